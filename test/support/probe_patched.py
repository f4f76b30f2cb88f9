"""Runs inside the patched SGLang tree (first on sys.path) and prints what it finds as JSON.

One process, because importing a worker module costs ~20 s of CPU. Usage:

    python probe_patched.py PAIRS_JSON [START_UP_JSON [DTYPE_JSON]]

PAIRS_JSON lists the cases: {"name", "draft", "target", "algorithm"} with config folders;
START_UP_JSON the same for ``start_up``; DTYPE_JSON adds "dtype" (``--dtype``) for
``start_up_dtypes``.

What is real here: the patched SGLang modules, ``ModelConfig`` built from real config.json
files, the patched classmethods and flag parser, and the patched worker methods run on the
CPU. What stands in: worker objects are created with ``__new__`` (their ``__init__`` loads
models on a GPU) and given only the attributes sizing reads; a runner is a namespace holding
the real ``ModelConfig``.
"""

import importlib
import json
import os
import re
import sys
import traceback
from types import SimpleNamespace

WORKER_OR_RUNNER = re.compile(r"^class \w*(Worker|GraphRunner)\w*\b", re.MULTILINE)


def worker_and_runner_modules():
    """Every module under srt/speculative/ that defines a worker or a graph runner class."""
    import sglang

    folder = os.path.join(os.path.dirname(sglang.__file__), "srt", "speculative")
    names = []
    for file in sorted(os.listdir(folder)):
        if file.endswith(".py"):
            with open(os.path.join(folder, file), encoding="utf-8") as handle:
                if WORKER_OR_RUNNER.search(handle.read()):
                    names.append("sglang.srt.speculative." + file[:-3])
    return names


class StopBeforeForward(Exception):
    pass


def empty_idle_batch(spec_info, stop):
    """An idle batch (no rows) as ``verify`` hands it to ``forward_draft_extend_after_decode``;
    ``stop`` ends the method where it builds the model worker batch."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return SimpleNamespace(
        forward_mode=ForwardMode.IDLE,
        spec_info=spec_info,
        seq_lens=torch.empty(0, dtype=torch.int64),
        seq_lens_cpu=torch.empty(0, dtype=torch.int64),
        req_pool_indices=torch.empty(0, dtype=torch.int64),
        return_logprob=False,
        get_model_worker_batch=stop,
    )


class DraftModelBuilt(Exception):
    """Raised where the draft TpModelWorker (model loader, weights) would start."""


def server_args_for(draft: str, target: str, algorithm: str, multi_layer: bool):
    """SGLang's ServerArgs with their defaults, without __post_init__ (it probes the GPU)."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    args = object.__new__(ServerArgs)
    for field in dataclasses.fields(ServerArgs):
        if field.default is not dataclasses.MISSING:
            setattr(args, field.name, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            setattr(args, field.name, field.default_factory())
    args.model_path = target
    args.speculative_draft_model_path = draft
    args.speculative_algorithm = algorithm
    args.enable_multi_layer_eagle = multi_layer
    args.device = "cpu"
    args.speculative_eagle_topk = 1
    args.speculative_num_steps = 3
    args.speculative_num_draft_tokens = 4
    return args


class QueuesReached(Exception):
    """Raised where Scheduler.init_disaggregation builds its transfer queues."""


def stop_at_queues(*args, **kwargs):
    raise QueuesReached


def pd_buffers(worker, v2: bool, draft, mode: str) -> dict:
    """Run the patched ``Scheduler.init_disaggregation`` in ``mode`` ("prefill" or "decode")
    for ``worker`` (its draft runner holding ``draft``), with the real MetadataBuffers,
    stopped right after them (at the transfer queues it builds next; ``main`` replaces
    them with ``stop_at_queues``)."""
    import sglang.srt.managers.scheduler as scheduler_module

    scheduler = scheduler_module.Scheduler.__new__(scheduler_module.Scheduler)
    scheduler.server_args = SimpleNamespace(
        disaggregation_mode=mode,
        disaggregation_transfer_backend="fake",
        disaggregation_bootstrap_port=0,
        enable_multi_layer_eagle=False,
        dp_size=1,
        num_reserved_decode_tokens=0,
        language_only=False,
    )
    scheduler.spec_algorithm = worker.speculative_algorithm
    scheduler.enable_overlap = v2
    # a v2 scheduler holds the outer worker, whose draft_worker is the draft worker
    scheduler.draft_worker = SimpleNamespace(draft_worker=worker) if v2 else worker
    scheduler.req_to_token_pool = SimpleNamespace(size=8)
    scheduler.max_running_requests = 8
    scheduler.token_to_kv_pool_allocator = SimpleNamespace(
        get_kvcache=lambda: SimpleNamespace(maybe_get_custom_mem_pool=lambda: None)
    )
    for name in ("attn_tp_cpu_group", "tree_cache", "gpu_id", "max_total_num_tokens"):
        setattr(scheduler, name, None)
    scheduler.tp_rank = scheduler.pp_rank = 0
    scheduler.tp_size = scheduler.pp_size = 1
    if not v2:
        worker.model_config = draft
        worker._model_runner = SimpleNamespace(model_config=draft, token_to_kv_pool=None)
    else:
        worker.draft_runner = SimpleNamespace(model_config=draft, token_to_kv_pool=None)
    try:
        scheduler_module.Scheduler.init_disaggregation(scheduler)
        reached = False
    except QueuesReached:
        reached = True
    buffers = scheduler.disagg_metadata_buffers
    ptrs, _, item_lens = buffers.get_buf_infos()
    hidden = buffers.output_hidden_states
    return {
        "reached_queues": reached,
        # the item length the transfer (e.g. mooncake's send_aux) copies per request
        "hidden_states_item_bytes": item_lens[ptrs.index(hidden.data_ptr())],
        "hidden_states": [hidden.shape[1], str(hidden.dtype)],
    }


class _Records(list):
    """A logging handler's sink: the messages it was given."""

    def handler(self):
        import logging

        handler = logging.Handler(logging.INFO)
        handler.emit = lambda record: self.append(record.getMessage())
        return handler


def start_up_dtypes(cases):
    """The dtype each EAGLE worker builds its draft model in, on the real start-up path.

    Each worker's patched __init__ runs, and so does the real draft ``TpModelWorker.__init__``
    up to the ``ModelRunner`` it builds (weights, devices and kernels start there: that
    ``__init__`` is the sentinel, and records the draft ``ModelConfig`` it is handed, which
    ``TpModelWorker._init_model_config`` built from ``server_args``). Then what every dtype
    site gets from that config: the classmethods, the v1 idle inputs (the workers' own
    methods), and the PD metadata buffers of both servers. ``before`` is what 0.5.11's
    draft ``TpModelWorker`` built from the same server arguments: 0.5.11's workers do not
    touch ``server_args.dtype``, so that is ``ModelConfig.from_server_args`` on them.
    """
    import copy
    import logging

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_info import (
        EagleDraftExtendInput,
        EagleDraftInput,
        EagleVerifyInput,
    )
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
        MultiLayerEagleDraftWorker,
    )

    os.environ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "1"
    handed = []

    def sentinel(self, *args, **kwargs):
        handed.append(kwargs["model_config"])
        raise DraftModelBuilt

    records = _Records()
    handler = records.handler()
    eagle_info_logger = logging.getLogger("sglang.srt.speculative.eagle_info")
    eagle_info_logger.addHandler(handler)
    eagle_info_logger.setLevel(logging.INFO)
    saved_init = ModelRunner.__init__
    ModelRunner.__init__ = sentinel
    rows = []
    try:
        for case in cases:
            for cls in (EAGLEWorker, EagleDraftWorker, MultiLayerEagleWorker, MultiLayerEagleDraftWorker):
                multi_layer = cls.__name__.startswith("MultiLayer")
                v2 = cls in (EagleDraftWorker, MultiLayerEagleDraftWorker)
                server_args = server_args_for(case["draft"], case["target"], case["algorithm"], multi_layer)
                server_args.dtype = case["dtype"]
                # what the target TpModelWorker builds, and 0.5.11's draft TpModelWorker
                target_config = ModelConfig.from_server_args(server_args)
                before = ModelConfig.from_server_args(
                    copy.copy(server_args), model_path=case["draft"], is_draft_model=True
                ).dtype
                target_worker = SimpleNamespace(
                    model_config=target_config,
                    model_runner=SimpleNamespace(model_config=target_config, memory_pool_config=None),
                    get_memory_pool=lambda: (None, None),
                )
                worker = cls.__new__(cls)
                del handed[:], records[:]
                try:
                    cls.__init__(
                        worker, server_args, gpu_id=0, tp_rank=0, dp_rank=None, moe_ep_rank=0,
                        attn_cp_rank=0, moe_dp_rank=0, nccl_port=0, target_worker=target_worker,
                    )
                    outcome = "returned"
                except DraftModelBuilt:
                    outcome = "draft model built"
                except Exception as exc:  # reported, asserted by the test
                    outcome = f"error: {type(exc).__name__}: {exc}"
                row = {
                    "case": case["name"],
                    "worker": cls.__name__,
                    "outcome": outcome,
                    "server_args_dtype": server_args.dtype,
                    "log": [m for m in records if "--dtype auto" in m],
                    "target": str(target_config.dtype),
                    "before": str(before),
                }
                rows.append(row)
                if len(handed) != 1:
                    continue
                draft_config = handed[0]
                row["draft_model_config"] = str(draft_config.dtype)
                runner = SimpleNamespace(model_config=draft_config, token_to_kv_pool=None)
                if cls is EagleDraftWorker:
                    worker.draft_runner = runner
                elif cls is MultiLayerEagleDraftWorker:
                    worker.draft_runner_list = [runner] * server_args.speculative_num_steps
                    worker.draft_runner = worker.draft_runner_list[0]
                else:  # the v1 worker is the draft TpModelWorker; model_config set by it
                    row["v1_worker_model_config"] = str(worker.model_config.dtype)
                    worker._model_runner = runner
                    worker.model_runner_list = [runner]
                row["decode_dtype_for"] = str(EagleDraftInput.dtype_for(worker))
                row["extend_dtype_for"] = str(EagleDraftExtendInput.dtype_for(worker))
                if not v2:
                    # the v1 idle inputs, built by the workers' own methods
                    batch = SimpleNamespace(spec_info=None)
                    cls._draft_preprocess_idle(worker, batch)
                    row["decode_idle"] = str(batch.spec_info.hidden_states.dtype)
                    verify_input = EagleVerifyInput.__new__(EagleVerifyInput)
                    verify_input.topk = worker.topk
                    verify_input.spec_steps = worker.speculative_num_steps
                    made = verify_input.verify(
                        SimpleNamespace(forward_mode=ForwardMode.IDLE, device="cpu", model_config=target_config),
                        None, None, 1,
                    ).draft_input

                    def stop(*args, **kwargs):
                        raise StopBeforeForward

                    idle_batch = empty_idle_batch(made, stop)
                    try:
                        cls.forward_draft_extend_after_decode(worker, idle_batch)
                    except StopBeforeForward:
                        row["extend_idle"] = str(idle_batch.spec_info.hidden_states.dtype)
                if not multi_layer:
                    # the PD metadata buffers of both servers (EAGLE's PD workers)
                    row["pd"] = {
                        mode: pd_buffers(worker, v2, draft_config, mode)["hidden_states"][1]
                        for mode in ("prefill", "decode")
                    }
    finally:
        ModelRunner.__init__ = saved_init
        eagle_info_logger.removeHandler(handler)
    return rows


def start_up(cases):
    """Run each EAGLE worker's patched __init__ with the draft TpModelWorker replaced by a
    sentinel: a bad drafter must be refused before the sentinel is reached, a good one must
    reach it with the parsed attributes already set."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
        MultiLayerEagleDraftWorker,
    )

    # The shared drafters' configs declare a shorter max_position_embeddings than their
    # targets' context length; SGLang refuses that unless told (as a launch would be told).
    os.environ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "1"
    built = []

    def sentinel(self, *args, **kwargs):
        built.append(type(self).__name__)
        raise DraftModelBuilt

    TpModelWorker.__init__ = sentinel
    ModelRunner.__init__ = sentinel
    ModelRunner.load_model = sentinel
    rows = []
    for case in cases:
        target_config = ModelConfig(case["target"])
        target_worker = SimpleNamespace(
            model_config=target_config,
            model_runner=SimpleNamespace(model_config=target_config, memory_pool_config=None),
            get_memory_pool=lambda: (None, None),
        )
        for cls in (EAGLEWorker, EagleDraftWorker, MultiLayerEagleWorker, MultiLayerEagleDraftWorker):
            multi_layer = cls.__name__.startswith("MultiLayer")
            server_args = server_args_for(case["draft"], case["target"], case["algorithm"], multi_layer)
            worker = cls.__new__(cls)
            del built[:]
            try:
                cls.__init__(
                    worker, server_args, gpu_id=0, tp_rank=0, dp_rank=None, moe_ep_rank=0,
                    attn_cp_rank=0, moe_dp_rank=0, nccl_port=0, target_worker=target_worker,
                )
                outcome, message = "returned", ""
            except DraftModelBuilt:
                outcome, message = "draft model built", ""
            except ValueError as exc:
                outcome, message = "refused", str(exc)
            except Exception as exc:  # reported, asserted by the test
                outcome, message = "error", f"{type(exc).__name__}: {exc}"
            rows.append(
                {
                    "case": case["name"],
                    "worker": cls.__name__,
                    "outcome": outcome,
                    "message": message,
                    "sentinel_calls": list(built),
                    "eagle_use_aux_hidden_state": getattr(worker, "eagle_use_aux_hidden_state", None),
                    "eagle_num_aux_hidden_states": getattr(worker, "eagle_num_aux_hidden_states", None),
                }
            )
    return rows


def main() -> None:
    cases = json.loads(open(sys.argv[1]).read())
    out = {"imports": {}, "sglang_file": None, "sizes": [], "errors": []}
    for name in worker_and_runner_modules():
        try:
            importlib.import_module(name)
            out["imports"][name] = "ok"
        except Exception as exc:  # reported, asserted by the test
            out["imports"][name] = f"{type(exc).__name__}: {exc}"
    import sglang

    out["sglang_file"] = sglang.__file__


    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info
    from sglang.srt.speculative.eagle_info import (
        EagleDraftExtendInput,
        EagleDraftInput,
        EagleVerifyInput,
    )
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
        MultiLayerEagleDraftWorker,
    )
    from sglang.srt.speculative.spec_info import (
        SpeculativeAlgorithm,
        get_eagle_num_aux_hidden_states,
        parse_eagle_use_aux_hidden_state,
    )
    from sglang.srt.speculative.standalone_worker import StandaloneWorker
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker

    def make_worker(cls, draft_config, target_config, algorithm):
        worker = cls.__new__(cls)
        runner = SimpleNamespace(model_config=draft_config)
        worker.speculative_algorithm = SpeculativeAlgorithm.from_string(algorithm)
        worker.target_worker = SimpleNamespace(model_config=target_config)
        worker.device = "cpu"
        worker.topk = 4
        worker.speculative_num_steps = 3
        if cls in (EagleDraftWorker, StandaloneDraftWorker):
            worker.draft_runner = runner
        elif cls is MultiLayerEagleDraftWorker:
            # The patched __init__ sets draft_runner = draft_runner_list[0]; __init__ cannot
            # run here, so the same assignment is made by hand.
            worker.draft_runner_list = [runner, runner]
            worker.draft_runner = worker.draft_runner_list[0]
        else:  # v1 workers are the draft TpModelWorker: model_runner is a property
            worker._model_runner = runner
            worker.model_runner_list = [runner]
        # What every patched EAGLE worker's __init__ sets, with the same inserted functions.
        worker.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
            worker.speculative_algorithm, draft_config.hf_config
        )
        worker.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states(
            draft_config.hf_config
        )
        return worker

    kinds = {
        "EAGLE": [EAGLEWorker, MultiLayerEagleWorker, EagleDraftWorker, MultiLayerEagleDraftWorker],
        "EAGLE3": [EAGLEWorker, MultiLayerEagleWorker, EagleDraftWorker, MultiLayerEagleDraftWorker],
        "STANDALONE": [StandaloneWorker, StandaloneDraftWorker],
    }
    configs = {}
    for case in cases:
        try:
            target = configs.get(case["target"]) or ModelConfig(case["target"])
            draft = configs.get(case["draft"]) or ModelConfig(case["draft"], is_draft_model=True)
            if case["algorithm"] != "STANDALONE":
                # the config an EAGLE draft TpModelWorker is handed at --dtype auto: in the
                # dtype the patched start-up chose (start_up_dtypes runs that path itself)
                draft = ModelConfig(case["draft"], is_draft_model=True)
                eagle_info.set_eagle_draft_dtype(SimpleNamespace(dtype="auto"), draft, target)
            configs[case["draft"]], configs[case["target"]] = draft, target
            for cls in kinds[case["algorithm"]]:
                worker = make_worker(cls, draft, target, case["algorithm"])
                out["sizes"].append(
                    {
                        "case": case["name"],
                        "algorithm": case["algorithm"],
                        "worker": cls.__name__,
                        "aux": worker.eagle_use_aux_hidden_state,
                        "decode_width": EagleDraftInput.hidden_size_for(worker),
                        "decode_dtype": str(EagleDraftInput.dtype_for(worker)),
                        "extend_width": EagleDraftExtendInput.hidden_size_for(worker),
                        "extend_dtype": str(EagleDraftExtendInput.dtype_for(worker)),
                    }
                )
        except Exception:
            out["errors"].append(f"{case['name']}: {traceback.format_exc()}")

    # Idle-input sites run through the patched SGLang methods on the CPU.
    case = cases[0]
    draft, target = configs[case["draft"]], configs[case["target"]]
    worker = make_worker(EAGLEWorker, draft, target, case["algorithm"])
    batch = SimpleNamespace(spec_info=None)
    EAGLEWorker._draft_preprocess_idle(worker, batch)
    out["decode_idle"] = {
        "type": type(batch.spec_info).__name__,
        "shape": list(batch.spec_info.hidden_states.shape),
        "dtype": str(batch.spec_info.hidden_states.dtype),
    }

    # verify() on an all-idle batch: no worker in reach.
    verify_input = EagleVerifyInput.__new__(EagleVerifyInput)
    verify_input.topk = worker.topk
    verify_input.spec_steps = worker.speculative_num_steps
    idle_batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE, device="cpu", model_config=target
    )
    verify_output = verify_input.verify(idle_batch, None, None, 1)
    made = verify_output.draft_input
    out["verify_idle"] = {
        "type": type(made).__name__,
        "shape": list(made.hidden_states.shape),
    }

    # The worker's draft-extend step rebuilds that idle input; stop it before the forward.
    def stop(*args, **kwargs):
        raise StopBeforeForward

    for cls in (EAGLEWorker, MultiLayerEagleWorker):
        worker = make_worker(cls, draft, target, case["algorithm"])
        idle_batch = empty_idle_batch(made, stop)
        try:
            cls.forward_draft_extend_after_decode(worker, idle_batch)
            result = {"reached_forward": False}
        except StopBeforeForward:
            result = {"reached_forward": True}
        spec = idle_batch.spec_info
        result.update(
            type=type(spec).__name__,
            shape=list(spec.hidden_states.shape),
            dtype=str(spec.hidden_states.dtype),
            expected_width=EagleDraftExtendInput.hidden_size_for(worker),
        )
        out["extend_rebuild_" + cls.__name__] = result

    # PD disaggregation: the patched Scheduler.init_disaggregation in both modes, with the real
    # MetadataBuffers, stopped right after them (at the transfer queues it builds next).
    import sglang.srt.managers.scheduler as scheduler_module

    scheduler_module.DecodeTransferQueue = stop_at_queues
    scheduler_module.PrefillBootstrapQueue = stop_at_queues
    pd_workers = {
        "EAGLE": ((EAGLEWorker, False), (EagleDraftWorker, True)),
        "EAGLE3": ((EAGLEWorker, False), (EagleDraftWorker, True)),
        "STANDALONE": ((StandaloneWorker, False), (StandaloneDraftWorker, True)),
    }
    out["pd"] = []
    for case in cases:
        if case.get("pd") is not True:
            continue
        draft, target = configs[case["draft"]], configs[case["target"]]
        for cls, v2 in pd_workers[case["algorithm"]]:
            for mode in ("prefill", "decode"):
                worker = make_worker(cls, draft, target, case["algorithm"])
                row = pd_buffers(worker, v2, draft, mode)
                out["pd"].append(
                    {
                        "case": case["name"],
                        "algorithm": case["algorithm"],
                        "mode": mode,
                        "worker": cls.__name__,
                        **row,
                        "contract": [
                            EagleDraftInput.hidden_size_for(worker),
                            str(EagleDraftInput.dtype_for(worker)),
                        ],
                    }
                )

    if len(sys.argv) > 3:
        out["start_up_dtypes"] = start_up_dtypes(json.loads(open(sys.argv[3]).read()))
    if len(sys.argv) > 2:
        out["start_up"] = start_up(json.loads(open(sys.argv[2]).read()))

    out["helpers"] = sorted(n for n in dir(eagle_info) if "eagle" in n.lower() and callable(getattr(eagle_info, n)))
    print("PROBE-JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
