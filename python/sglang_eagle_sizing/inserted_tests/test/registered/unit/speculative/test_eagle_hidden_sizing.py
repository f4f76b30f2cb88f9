"""Unit tests of the EAGLE workers on the CPU: how they read the drafter's config and
size the hidden states they pass between steps. No server, weights, GPU or network.

Worker modules import ``sgl_kernel``, which needs a GPU driver: on a CPU runner
``maybe_stub_sgl_kernel`` replaces it with an empty stub before those imports (no
``sgl_kernel`` kernel runs here; no CUDA graph is captured).
"""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple
from unittest import mock

import torch

from sglang.srt import server_args as server_args_module
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.distributed import parallel_state
from sglang.srt.layers import dp_attention
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.layers.rotary_embedding import base as rotary_embedding_base
from sglang.srt.managers import scheduler as scheduler_module
from sglang.srt.managers import tp_worker as tp_worker_module
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.models.llama import LlamaForCausalLM
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative import eagle_info_v2
from sglang.srt.speculative.draft_utils import DraftBackendFactory
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    EagleVerifyInput,
    get_draft_decode_metadata_batch,
    validate_eagle_draft_config,
)
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner import (
    MultiLayerEagleDraftExtendCudaGraphRunner,
    MultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
    MultiLayerEagleWorkerV2,
)
from sglang.srt.speculative.spec_info import (
    SpeculativeAlgorithm,
    get_eagle_aux_hidden_state_layer_ids,
    get_eagle_num_aux_hidden_states,
    parse_eagle_use_aux_hidden_state,
)
from sglang.srt.speculative.standalone_worker import StandaloneWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2
from sglang.srt.utils.hf_transformers_utils import get_config

# ---------------------------------------------------------------------------
# Minimal synthetic configs: what ModelConfig needs, plus the fields sizing reads.
# ---------------------------------------------------------------------------

TARGET_LAYERS = 8
SPEC_STEPS = 3
TOPK = 1
DRAFT_TOKENS = 4
#: The target's default capture: 3 layers.
DEFAULT_NUM_AUX = 3
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def llama(hidden_size: int = 256, torch_dtype: str = "bfloat16", **fields) -> dict:
    """A Llama config: the target, or the base of a drafter."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
        "torch_dtype": torch_dtype,
    }
    config.update(fields)
    return config


def eagle3(hidden_size: int = 256, torch_dtype: str = "float16", **fields) -> dict:
    """A one-layer EAGLE-3 drafter (llama_eagle3.py's architecture)."""
    fields.setdefault("architectures", ["LlamaForCausalLMEagle3"])
    return llama(
        hidden_size, torch_dtype, num_hidden_layers=1, draft_vocab_size=512, **fields
    )


def eagle(hidden_size: int = 256, torch_dtype: str = "float16", **fields) -> dict:
    """A one-layer EAGLE (EAGLE-2) drafter."""
    return llama(
        hidden_size,
        torch_dtype,
        architectures=["LlamaForCausalLMEagle"],
        num_hidden_layers=1,
        **fields,
    )


#: An EAGLE-3 drafter half as wide as its target, declaring the target's width.
NARROW_EAGLE3 = eagle3(hidden_size=128, target_hidden_size=256)
#: An EAGLE-3 drafter that names four target layers; its architecture is not
#: llama_eagle3.py's.
FOUR_LAYER_EAGLE3 = eagle3(
    architectures=["Qwen3MoEForCausalLMEagle3"],
    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 6]},
)
#: An EAGLE-3 drafter with aux hidden states off: it reads one target hidden state.
NO_AUX_EAGLE3 = eagle3(eagle_config={"use_aux_hidden_state": False})
#: An EAGLE-3 drafter half as wide as its target, aux hidden states off: it reads the
#: target's last hidden state (256 wide) and carries its own (128 wide).
NARROW_NO_AUX_EAGLE3 = eagle3(
    hidden_size=128,
    target_hidden_size=256,
    eagle_config={"use_aux_hidden_state": False},
)
#: A hyper-connection pair (hc_mult=2): hidden states are 2 x hidden_size wide.
HC_TARGET = llama(hc_mult=2)
HC_DRAFTER = eagle(hc_mult=2)
#: A STANDALONE drafter: a small Llama half as wide as its target.
STANDALONE_DRAFTER = llama(hidden_size=128, torch_dtype="float16", num_hidden_layers=2)


def spec_width(config: dict) -> int:
    """The width of a model's hidden state: hidden_size, times hc_mult when set."""
    return config["hidden_size"] * config.get("hc_mult", 1)


def built_dtype(algorithm: str, draft: dict, target: dict) -> str:
    """The dtype the draft model is built in at ``--dtype auto``: an EAGLE drafter (EAGLE,
    EAGLE-3, MTP) consumes the target's hidden states and shares its embedding, so it
    takes the target's; a STANDALONE drafter keeps its own."""
    return draft["torch_dtype"] if algorithm == "STANDALONE" else target["torch_dtype"]


def expected_sizes(algorithm: str, draft: dict, target: dict) -> Dict[str, object]:
    """Decode and extend width and dtype, from the config facts alone."""
    eagle_config = draft.get("eagle_config") or {}
    if algorithm == "EAGLE3" and eagle_config.get("use_aux_hidden_state", True):
        layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids") or draft.get(
            "eagle_aux_hidden_state_layer_ids"
        )
        extend_width = (len(layer_ids) if layer_ids else DEFAULT_NUM_AUX) * target[
            "hidden_size"
        ]
    elif algorithm == "STANDALONE":
        extend_width = spec_width(draft)
    else:
        extend_width = spec_width(target)
    dtype = DTYPES[built_dtype(algorithm, draft, target)]
    return {
        "decode": (spec_width(draft), dtype),
        "extend": (extend_width, dtype),
    }


class ConfigFolders:
    """Writes config dicts as ``<folder>/config.json`` under one temporary folder."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="eagle-hidden-sizing-")
        self._count = 0

    def write(self, config: dict) -> str:
        self._count += 1
        folder = os.path.join(self._tmp.name, f"{self._count:03d}")
        os.makedirs(folder)
        for name, content in (("config.json", config), ("generation_config.json", {})):
            with open(os.path.join(folder, name), "w") as f:
                json.dump(content, f)
        return folder

    def model_config(self, config: dict, is_draft_model: bool = False) -> ModelConfig:
        return ModelConfig(self.write(config), is_draft_model=is_draft_model)

    def cleanup(self):
        self._tmp.cleanup()


# ---------------------------------------------------------------------------
# The seams: what a CPU cannot do (load weights, allocate KV caches, join process
# groups, build attention backends). Everything else is the workers' own code.
# ---------------------------------------------------------------------------


class DraftModelStandIn:
    """The loaded draft model: it only receives the target's embedding and head."""

    hot_token_id = None

    def set_embed(self, embed: torch.Tensor):
        self.embed = embed

    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor):
        self.embed, self.head = embed, head


class TargetModelStandIn:
    """The loaded target model: its embedding and head, and the layers it captures."""

    def __init__(self):
        self.captured_layer_ids = "not set"

    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.empty(0), torch.empty(0)

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        self.captured_layer_ids = layer_ids


class ModelRunnerStandIn:
    """A ModelRunner after start-up, without weights or KV cache: it holds the real
    ``ModelConfig`` its worker read."""

    def __init__(self, model_config: ModelConfig, server_args: ServerArgs, model):
        self.model_config = model_config
        self.server_args = server_args
        self.device = server_args.device
        self.dtype = model_config.dtype
        self.model = model
        self.tp_group = None
        self.token_to_kv_pool = None
        self.memory_pool_config = None
        self.attn_backend = None
        self.graph_runner = None
        self.max_total_num_tokens = 1024
        self.max_running_requests = 8
        self.max_token_pool_size = 1024


class TargetWorkerStandIn:
    """The target TpModelWorker: its real ModelConfig, a request pool on the CPU."""

    def __init__(self, model_config: ModelConfig, server_args: ServerArgs):
        self.model_config = model_config
        self.model_runner = ModelRunnerStandIn(
            model_config, server_args, TargetModelStandIn()
        )
        self.req_to_token_pool = ReqToTokenPool(
            size=8, max_context_len=64, device="cpu", enable_memory_saver=False
        )

    def get_memory_pool(self):
        return self.req_to_token_pool, None


class DraftModelLoaded(Exception):
    """Raised where the draft model would load, when a test asks to stop there."""


def draft_model_seams(loads: List[str], stop_at_loader: bool = False):
    """Replace the draft TpModelWorker's model runners (and process groups) and the draft
    attention backends; record each draft model load in ``loads``."""

    def init_model_runner(worker: TpModelWorker):
        loads.append(worker.model_config.model_path)
        if stop_at_loader:
            raise DraftModelLoaded
        worker._model_runner = ModelRunnerStandIn(
            worker.model_config, worker.server_args, DraftModelStandIn()
        )

    def init_multi_layer_runners(worker: TpModelWorker):
        worker.model_runner_list.append(worker.model_runner)
        for _ in range(1, worker.server_args.speculative_num_steps):
            worker.model_runner_list.append(
                ModelRunnerStandIn(
                    worker.model_config, worker.server_args, DraftModelStandIn()
                )
            )

    stack = contextlib.ExitStack()
    for target, name, value in (
        (TpModelWorker, "_init_model_runner", init_model_runner),
        (
            TpModelWorker,
            "_init_multi_layer_eagle_model_runners",
            init_multi_layer_runners,
        ),
        (tp_worker_module, "get_pp_group", lambda: None),
        (
            tp_worker_module,
            "get_world_group",
            lambda: SimpleNamespace(cpu_group=None, ranks=[0]),
        ),
        (tp_worker_module, "broadcast_pyobj", lambda data, *args, **kwargs: data),
        (DraftBackendFactory, "create_decode_backend", lambda self: None),
        (DraftBackendFactory, "create_draft_extend_backend", lambda self: None),
    ):
        stack.enter_context(mock.patch.object(target, name, value))
    return stack


def make_server_args(
    target_path: str, draft_path: str, algorithm: str, **overrides
) -> ServerArgs:
    """SGLang's ServerArgs for a speculative server on the CPU, CUDA graphs off."""
    kwargs = dict(
        model_path=target_path,
        speculative_algorithm=algorithm,
        speculative_draft_model_path=draft_path,
        speculative_num_steps=SPEC_STEPS,
        speculative_eagle_topk=TOPK,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        device="cpu",
        skip_tokenizer_init=True,
        disable_cuda_graph=True,
    )
    kwargs.update(overrides)
    return ServerArgs(**kwargs)


#: The worker classes and how a server selects them.
V1_WORKERS = (EAGLEWorker, MultiLayerEagleWorker, StandaloneWorker)
MULTI_LAYER_WORKERS = (
    MultiLayerEagleWorker,
    MultiLayerEagleDraftWorker,
    MultiLayerEagleWorkerV2,
)


class Workers:
    """Starts real workers for a drafter and a target (config dicts)."""

    def __init__(self, folders: ConfigFolders):
        self.folders = folders
        self.loads: List[str] = []

    def start(self, cls, algorithm: str, draft: dict, target: dict, **overrides):
        server_args = make_server_args(
            self.folders.write(target),
            self.folders.write(draft),
            algorithm,
            disable_overlap_schedule=cls in V1_WORKERS,
            enable_multi_layer_eagle=cls in MULTI_LAYER_WORKERS,
            **overrides,
        )
        target_worker = TargetWorkerStandIn(
            ModelConfig.from_server_args(server_args), server_args
        )
        with draft_model_seams(self.loads):
            return cls(
                server_args,
                gpu_id=0,
                tp_rank=0,
                dp_rank=None,
                moe_ep_rank=0,
                attn_cp_rank=0,
                moe_dp_rank=0,
                nccl_port=0,
                target_worker=target_worker,
            )


class StopBeforeForward(Exception):
    """Raised where the draft forward would start; carries the batch's spec_info."""

    def __init__(self, spec_info):
        super().__init__()
        self.spec_info = spec_info


def hidden_states_of(spec_info) -> Tuple[int, torch.dtype]:
    return spec_info.hidden_states.shape[-1], spec_info.hidden_states.dtype


def assert_refusal(test, error: Exception, key: str, value, draft_path: str) -> str:
    """A refusal is one line naming the key, its value and the drafter's config."""
    message = str(error)
    test.assertIn(f"{key}={value!r}", message)
    test.assertIn(draft_path, message)
    test.assertNotIn("\n", message)
    return message


class BatchAfterVerify:
    """What ``forward_draft_extend_after_decode`` reads of a ScheduleBatch before it
    builds the draft forward batch (``get_model_worker_batch``, where this stops)."""

    def __init__(self, forward_mode: ForwardMode, spec_info):
        self.forward_mode = forward_mode
        self.spec_info = spec_info
        self.seq_lens = torch.empty(0, dtype=torch.int64)
        self.seq_lens_cpu = torch.empty(0, dtype=torch.int64)
        self.req_pool_indices = torch.empty(0, dtype=torch.int64)
        self.return_logprob = False

    def copy(self) -> "BatchAfterVerify":
        return BatchAfterVerify(self.forward_mode, self.spec_info)

    def prepare_for_idle(self):
        self.forward_mode = ForwardMode.IDLE

    def get_model_worker_batch(self):
        raise StopBeforeForward(self.spec_info)


def verify_idle_output(worker) -> EagleDraftExtendInput:
    """The idle input ``EagleVerifyInput.verify`` makes for an idle batch of the target
    (no worker in reach: it takes the batch's, i.e. the target's, sizes)."""
    verify_input = EagleVerifyInput.__new__(EagleVerifyInput)
    verify_input.topk = worker.topk
    verify_input.spec_steps = worker.speculative_num_steps
    batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE,
        device="cpu",
        model_config=worker.target_worker.model_config,
    )
    return verify_input.verify(batch, None, None, 1).draft_input


def draft_extend_input(worker, batch: BatchAfterVerify):
    """Run the worker's real ``forward_draft_extend_after_decode``; the spec_info that
    reaches the draft-extend forward."""
    with torch.inference_mode():
        try:
            worker.forward_draft_extend_after_decode(batch)
        except StopBeforeForward as stopped:
            return stopped.spec_info
    raise AssertionError("forward_draft_extend_after_decode did not reach the forward")


def v2_idle_input(worker):
    """Run the real ``forward_batch_generation`` of a v2 worker on a decode batch without
    spec_info (an idle DP-attention rank); the spec_info handed to the draft step."""
    batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE, is_extend_in_batch=False, spec_info=None
    )

    def draft(model_worker_batch):
        raise StopBeforeForward(model_worker_batch.spec_info)

    with mock.patch.object(worker.draft_worker, "draft", draft):
        try:
            worker.forward_batch_generation(batch)
        except StopBeforeForward as stopped:
            return stopped.spec_info
    raise AssertionError("forward_batch_generation did not reach the draft step")


class WorkerTestCase(CustomTestCase):
    """Holds the config folders and starts real workers.

    The workers are started by their own ``__init__``. What is replaced is the device
    work only: the draft ``TpModelWorker``'s model runners (weights, KV cache), its
    process groups, the draft attention backends, and the target worker, whose model is
    never loaded. The model configs are minimal synthetic ``config.json`` files that vary
    only the fields sizing reads.
    """

    @classmethod
    def setUpClass(cls):
        cls.folders = ConfigFolders()
        cls.workers = Workers(cls.folders)

    @classmethod
    def tearDownClass(cls):
        cls.folders.cleanup()

    def start(self, cls, algorithm: str, draft: dict, target: dict = None, **overrides):
        return self.workers.start(cls, algorithm, draft, target or llama(), **overrides)

    def assert_hidden_states(self, spec_info, width: int, dtype: torch.dtype):
        self.assertEqual(hidden_states_of(spec_info), (width, dtype))


class TestSpeculativeModulesImport(CustomTestCase):
    def test_multi_layer_eagle_worker_imports(self):
        """Its ``-> ModelRunner`` annotation names a class imported for type checking
        only; evaluated at import, it raised ``NameError``."""
        self.assertEqual(
            MultiLayerEagleWorker.mtp_model_runner.__annotations__["return"],
            "ModelRunner",
        )


class TestWorkerStartUp(WorkerTestCase):
    """Each EAGLE worker reads and checks its drafter in its own ``__init__``, before the
    draft model loads, and keeps what the sizing classmethods read."""

    def assert_parsed(self, worker, use_aux: bool, num_aux: int):
        self.assertIs(worker.eagle_use_aux_hidden_state, use_aux)
        self.assertEqual(worker.eagle_num_aux_hidden_states, num_aux)

    def test_v1_worker_parses_the_drafter(self):
        self.assert_parsed(self.start(EAGLEWorker, "EAGLE3", NO_AUX_EAGLE3), False, 3)

    def test_v2_draft_worker_parses_the_drafter(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NO_AUX_EAGLE3)
        self.assert_parsed(worker.draft_worker, False, 3)

    def test_v2_draft_worker_counts_the_drafters_layers(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3)
        self.assert_parsed(worker.draft_worker, True, 4)

    def test_multi_layer_v2_draft_worker_counts_the_drafters_layers(self):
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3)
        self.assert_parsed(worker.draft_worker, True, 4)

    def test_multi_layer_v1_worker_parses_the_drafter(self):
        """MTP (served as EAGLE): no aux hidden states."""
        self.assert_parsed(
            self.start(MultiLayerEagleWorker, "EAGLE", HC_DRAFTER), False, 3
        )

    def test_every_eagle_worker_refuses_before_the_draft_model_loads(self):
        """A drafter trained for a 512-wide target: refused, naming the key and value,
        and no draft model is loaded."""
        draft = eagle3(target_hidden_size=512)
        for cls in (
            EAGLEWorker,
            MultiLayerEagleWorker,
            EAGLEWorkerV2,
            MultiLayerEagleWorkerV2,
        ):
            with self.subTest(worker=cls.__name__):
                del self.workers.loads[:]
                with self.assertRaises(ValueError) as raised:
                    self.start(cls, "EAGLE3", draft)
                self.assertIn("target_hidden_size=512", str(raised.exception))
                self.assertEqual(self.workers.loads, [])

    def test_a_good_drafter_is_loaded_once(self):
        for cls in (EAGLEWorker, EAGLEWorkerV2, MultiLayerEagleWorkerV2):
            with self.subTest(worker=cls.__name__):
                del self.workers.loads[:]
                self.start(cls, "EAGLE3", eagle3())
                self.assertEqual(len(self.workers.loads), 1)


class TestHiddenSizeContract(WorkerTestCase):
    """The classmethods on every real worker a sizing site hands them, against the
    widths and dtypes computed here from the config facts."""

    def workers_for(self, algorithm: str, draft: dict, target: dict):
        """(name, object a site hands the classmethods) for every worker kind."""
        v1 = self.start(EAGLEWorker, algorithm, draft, target)
        v2 = self.start(EAGLEWorkerV2, algorithm, draft, target)
        ml_v2 = self.start(MultiLayerEagleWorkerV2, algorithm, draft, target)
        found = [
            ("EAGLEWorker", v1),
            ("EagleDraftWorker", v2.draft_worker),
            ("MultiLayerEagleDraftWorker", ml_v2.draft_worker),
        ]
        if algorithm == "EAGLE":  # 0.5.11's MultiLayerEagleWorker serves MTP only
            found.append(
                (
                    "MultiLayerEagleWorker",
                    self.start(MultiLayerEagleWorker, algorithm, draft, target),
                )
            )
        return found

    def assert_contract(self, worker, expected: dict):
        """Both phases' (width, dtype) for ``worker``, as the contract's classmethods give them."""
        for phase, input_class in (
            ("decode", EagleDraftInput),
            ("extend", EagleDraftExtendInput),
        ):
            self.assertEqual(
                (input_class.hidden_size_for(worker), input_class.dtype_for(worker)),
                expected[phase],
                phase,
            )

    def check(self, algorithm: str, draft: dict, target: dict):
        expected = expected_sizes(algorithm, draft, target)
        for name, worker in self.workers_for(algorithm, draft, target):
            with self.subTest(worker=name):
                self.assert_contract(worker, expected)

    def test_eagle3_fp16_drafter_on_a_bf16_target(self):
        self.check("EAGLE3", eagle3(), llama())

    def test_eagle3_narrow_drafter(self):
        self.check("EAGLE3", NARROW_EAGLE3, llama())

    def test_eagle3_four_aux_layers(self):
        self.check("EAGLE3", FOUR_LAYER_EAGLE3, llama())

    def test_eagle3_top_level_layer_ids(self):
        self.check(
            "EAGLE3", eagle3(eagle_aux_hidden_state_layer_ids=[1, 3, 5]), llama()
        )

    def test_eagle3_without_aux(self):
        self.check("EAGLE3", NO_AUX_EAGLE3, llama())

    def test_eagle3_speculators_format(self):
        target = llama()
        for layer_ids, num_aux in ((None, DEFAULT_NUM_AUX), ([1, 3, 5, 6], 4)):
            expected = {
                "decode": (256, torch.bfloat16),
                "extend": (num_aux * 256, torch.bfloat16),
            }
            draft = speculators_eagle3(layer_ids)
            for name, worker in self.workers_for("EAGLE3", draft, target):
                with self.subTest(layer_ids=layer_ids, worker=name):
                    self.assert_contract(worker, expected)

    def test_eagle(self):
        self.check("EAGLE", eagle(), llama())

    def test_hyper_connection_pair(self):
        self.check("EAGLE", HC_DRAFTER, HC_TARGET)

    def test_standalone(self):
        expected = expected_sizes("STANDALONE", STANDALONE_DRAFTER, llama())
        v1 = self.start(StandaloneWorker, "STANDALONE", STANDALONE_DRAFTER)
        v2 = self.start(StandaloneWorkerV2, "STANDALONE", STANDALONE_DRAFTER)
        for name, worker in (
            ("StandaloneWorker", v1),
            ("StandaloneDraftWorker", v2.draft_worker),
        ):
            with self.subTest(worker=name):
                self.assert_contract(worker, expected)


class TestIdleInputs(WorkerTestCase):
    """The idle inputs the workers build, read where the draft forward would start. The
    drafter is 128 wide, the target 256 wide, so the decode width (128), the extend width
    (3 x 256) and the target's width (256) all differ. The drafter's config says float16,
    the target's bfloat16: at ``--dtype auto`` the drafter is built in bfloat16."""

    def test_v1_draft_step(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = SimpleNamespace(spec_info=None)
        worker._draft_preprocess_idle(batch)
        self.assertIsInstance(batch.spec_info, EagleDraftInput)
        self.assert_hidden_states(batch.spec_info, 128, torch.bfloat16)

    def test_v1_draft_extend_rebuilds_the_input_verify_made(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        made = verify_idle_output(worker)
        self.assert_hidden_states(made, 256, torch.bfloat16)  # the target's sizes
        spec_info = draft_extend_input(worker, BatchAfterVerify(ForwardMode.IDLE, made))
        self.assertIsInstance(spec_info, EagleDraftExtendInput)
        self.assert_hidden_states(spec_info, 3 * 256, torch.bfloat16)

    def test_v1_draft_extend_when_every_request_finished(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        finished = EagleDraftInput.create_idle_input(
            device="cpu",
            hidden_size=1,
            dtype=torch.float32,
            topk=TOPK,
            capture_hidden_mode=None,
        )
        batch = BatchAfterVerify(ForwardMode.DECODE, finished)
        self.assert_hidden_states(
            draft_extend_input(worker, batch), 3 * 256, torch.bfloat16
        )

    def test_multi_layer_v1_draft_extend_rebuilds_the_input_verify_made(self):
        worker = self.start(MultiLayerEagleWorker, "EAGLE", HC_DRAFTER, HC_TARGET)
        made = verify_idle_output(worker)
        spec_info = draft_extend_input(worker, BatchAfterVerify(ForwardMode.IDLE, made))
        self.assertIsInstance(spec_info, EagleDraftExtendInput)
        self.assertIsNot(spec_info, made)  # MTP: the same sizes, rebuilt all the same
        self.assert_hidden_states(spec_info, spec_width(HC_TARGET), torch.bfloat16)

    def test_v2_worker_without_spec_info(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_hidden_states(v2_idle_input(worker), 128, torch.bfloat16)

    def test_multi_layer_v2_worker_without_spec_info(self):
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_hidden_states(v2_idle_input(worker), 128, torch.bfloat16)

    def test_multi_layer_v2_hidden_states_pool(self):
        """``req_to_hidden_states_pool`` holds what the MTP layers are fed: the extend
        width, one slot per request and step after the first."""
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3)
        pool = worker.draft_worker.req_to_hidden_states_pool
        self.assertEqual(tuple(pool.shape), (8, SPEC_STEPS - 1, 4 * 256))
        self.assertEqual(pool.dtype, torch.bfloat16)


class TestIdleInputsCarryAttentionIndices(WorkerTestCase):
    """Under DP attention a padded idle batch re-initialises the Triton and FlashInfer
    attention metadata from ``spec_info.kv_indptr`` / ``kv_indices``: every idle input a
    worker builds carries empty ones (one zero pointer, no indices) on its device."""

    def assert_empty_indices(self, spec_info):
        self.assertEqual(spec_info.kv_indptr.tolist(), [0])
        self.assertEqual(spec_info.kv_indptr.dtype, torch.int32)
        self.assertEqual(tuple(spec_info.kv_indices.shape), (0,))
        self.assertEqual(spec_info.kv_indices.dtype, torch.int32)
        self.assertEqual(spec_info.kv_indptr.device.type, "cpu")

    def test_v1_draft_step(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = SimpleNamespace(spec_info=None)
        worker._draft_preprocess_idle(batch)
        self.assert_empty_indices(batch.spec_info)

    def test_v1_draft_extend(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        made = verify_idle_output(worker)
        self.assert_empty_indices(made)
        batch = BatchAfterVerify(ForwardMode.IDLE, made)
        self.assert_empty_indices(draft_extend_input(worker, batch))

    def test_multi_layer_v1_draft_extend(self):
        worker = self.start(MultiLayerEagleWorker, "EAGLE", HC_DRAFTER, HC_TARGET)
        batch = BatchAfterVerify(ForwardMode.IDLE, verify_idle_output(worker))
        self.assert_empty_indices(draft_extend_input(worker, batch))

    def test_v2_worker_without_spec_info(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_empty_indices(v2_idle_input(worker))

    def test_multi_layer_v2_worker_without_spec_info(self):
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_empty_indices(v2_idle_input(worker))


# ---------------------------------------------------------------------------
# Attention on the CPU: the real TritonAttnBackend with its kernels interpreted, on a rank
# of two attention-DP ranks. What stands in: the process groups, pinned memory (it needs a
# GPU driver) and the KV cache (two tensors, no device pool).
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def attention_dp_rank(rank: int = 1, size: int = 2):
    """This process is attention-DP rank ``rank`` of ``size``, one attention-TP rank
    each; no collective runs. Restores the globals it sets."""
    one_rank = SimpleNamespace(world_size=1, rank_in_group=0)
    factory = torch.tensor

    def tensor(*args, pin_memory: bool = False, **kwargs):
        return factory(*args, **kwargs)

    wrapper = getattr(dp_attention, "_DpGatheredBufferWrapper", None)
    saved = dict(vars(wrapper)) if wrapper is not None else {}
    with contextlib.ExitStack() as stack:
        for target, name, value in (
            (parallel_state, "_ATTN_TP", one_rank),
            (parallel_state, "_ATTN_CP", one_rank),
            (dp_attention, "_ATTN_DP_RANK", rank),
            (dp_attention, "_ATTN_DP_SIZE", size),
            (dp_attention, "_ENABLE_DP_ATTENTION_FLAG", size > 1),
            (torch, "tensor", tensor),
        ):
            stack.enter_context(mock.patch.object(target, name, value))
        try:
            yield
        finally:
            # the padding's buffer lengths, kept by SGLang per forward
            for name in set(vars(wrapper) if wrapper is not None else ()) - set(saved):
                delattr(wrapper, name)
            for name, value in saved.items():
                if not name.startswith("__") and vars(wrapper).get(name) is not value:
                    setattr(wrapper, name, value)


class KVPoolStandIn:
    """The KV cache of one attention layer: a key and a value tensor."""

    def __init__(self, slots: int, kv_heads: int, head_dim: int):
        self.keys = torch.randn((slots, kv_heads, head_dim))
        self.values = torch.randn((slots, kv_heads, head_dim))

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.keys

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.values

    def set_kv_buffer(self, layer, loc, k, v, *scales):
        self.keys[loc] = k.view(-1, *self.keys.shape[1:])
        self.values[loc] = v.view(-1, *self.values.shape[1:])


def triton_runner(model_config: ModelConfig, server_args: ServerArgs):
    """What ``TritonAttnBackend`` and ``prepare_mlp_sync_batch`` read of a ModelRunner,
    with the real backend built on it (``runner.attn_backend``)."""
    runner = SimpleNamespace(
        model_config=model_config,
        server_args=server_args,
        req_to_token_pool=ReqToTokenPool(
            size=8, max_context_len=64, device="cpu", enable_memory_saver=False
        ),
        token_to_kv_pool=KVPoolStandIn(
            16, model_config.get_num_kv_heads(1), model_config.head_dim
        ),
        token_to_kv_pool_allocator=None,
        sliding_window_size=None,
        hybrid_gdn_config=None,
        kimi_linear_config=None,
        linear_attn_model_spec=None,
        device="cpu",
        gpu_id=0,
        is_draft_worker=False,
    )
    runner.attn_backend = TritonAttnBackend(runner)
    return runner


def forward_batch(
    mode: ForwardMode, seq_lens: List[int], spec_info, global_num_tokens: List[int]
) -> ForwardBatch:
    """A batch of this rank as the scheduler hands it to the model runner (requests in
    pool slots 1, 2, ...), before SGLang pads it to the DP ranks' token counts."""
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    tokens = len(seq_lens)
    return ForwardBatch(
        forward_mode=mode,
        batch_size=tokens,
        input_ids=torch.arange(tokens, dtype=torch.int64),
        req_pool_indices=torch.arange(1, tokens + 1, dtype=torch.int64),
        seq_lens=lens,
        out_cache_loc=lens.clone(),
        seq_lens_sum=int(lens.sum()),
        seq_lens_cpu=lens.clone(),
        positions=lens - 1,
        lora_ids=[None] * tokens,
        spec_info=spec_info,
        global_num_tokens_cpu=list(global_num_tokens),
        global_num_tokens_for_logprob_cpu=list(global_num_tokens),
        global_num_tokens_gpu=torch.zeros((len(global_num_tokens),), dtype=torch.int64),
        is_extend_in_batch=False,
    )


def draft_runner_of(worker):
    """The draft model runner of a v1 worker, a v2 worker or a v2 draft worker."""
    if isinstance(worker, EAGLEWorkerV2):
        worker = worker.draft_worker
    return getattr(worker, "draft_runner", None) or worker.model_runner


def v2_draft_extend_idle_input(worker) -> EagleDraftInput:
    """Run the real ``_draft_extend_for_decode`` of a v2 draft worker on an idle batch;
    the spec_info it hands to the draft-extend forward batch."""
    empty = torch.empty((0,), dtype=torch.int64)
    batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE,
        seq_lens=empty.clone(),
        seq_lens_cpu=empty.clone(),
        seq_lens_sum=0,
        spec_info=None,
    )
    verified = SimpleNamespace(
        logits_output=SimpleNamespace(
            hidden_states=torch.empty(
                (0, DEFAULT_NUM_AUX * llama()["hidden_size"]), dtype=torch.bfloat16
            )
        ),
        accept_lens=empty.clone(),
        next_token_ids=empty.clone(),
    )

    def init_new(model_worker_batch, model_runner):
        raise StopBeforeForward(model_worker_batch.spec_info)

    with mock.patch.object(eagle_info_v2.ForwardBatch, "init_new", init_new):
        try:
            worker.draft_worker._draft_extend_for_decode(batch, verified)
        except StopBeforeForward as stopped:
            return stopped.spec_info
    raise AssertionError("_draft_extend_for_decode did not reach the forward batch")


class TestPaddedIdleBatchOnTriton(WorkerTestCase):
    """Under DP attention an idle rank runs the busy rank's token count: SGLang pads its
    batch (``prepare_mlp_sync_batch``) and, the padded batch being non-empty,
    re-initialises the attention metadata from the idle input (``forward_idle``). The
    real Triton backend's metadata of each idle input: no rows, no KV indices."""

    #: the busy rank's requests
    BUSY_REQUESTS = 3

    def assert_no_rows(self, worker, spec_info):
        busy_tokens = self.BUSY_REQUESTS * spec_info.num_tokens_per_req
        batch = forward_batch(ForwardMode.IDLE, [], spec_info, [busy_tokens, 0])
        with attention_dp_rank():
            runner = triton_runner(
                draft_runner_of(worker).model_config, worker.server_args
            )
            batch.prepare_mlp_sync_batch(runner)
            self.assertEqual(batch.batch_size, self.BUSY_REQUESTS)  # padded
            runner.attn_backend.init_forward_metadata(batch)
        metadata = runner.attn_backend.forward_metadata
        self.assertEqual(metadata.kv_indptr.tolist(), [0])
        self.assertEqual(tuple(metadata.kv_indices.shape), (0,))
        self.assertEqual(metadata.attn_logits.shape[0], 0)
        self.assertEqual(tuple(metadata.num_kv_splits.shape), (0,))

    def test_v1_draft_step(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = SimpleNamespace(spec_info=None)
        worker._draft_preprocess_idle(batch)
        batch.spec_info.num_tokens_per_req = TOPK  # draft() sets it next
        self.assert_no_rows(worker, batch.spec_info)

    def test_v1_draft_extend(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = BatchAfterVerify(ForwardMode.IDLE, verify_idle_output(worker))
        self.assert_no_rows(worker, draft_extend_input(worker, batch))

    def test_v2_worker_without_spec_info(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        spec_info = v2_idle_input(worker)
        spec_info.num_tokens_per_req = TOPK  # the draft worker's draft() sets it
        self.assert_no_rows(worker, spec_info)

    def test_v2_draft_extend(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_no_rows(worker, v2_draft_extend_idle_input(worker))


PADDED_DECODE_SEQ_LEN = 5
#: Runs this file as a module (not its tests) and prints ``padded_decode_results()``.
PADDED_DECODE_IN_A_CHILD = (
    "import json, runpy, sys; "
    "print(json.dumps(runpy.run_path(sys.argv[1])['padded_decode_results']()))"
)


def padded_decode_results() -> Dict[str, object]:
    """Decode attention of a padded draft step on the real ``TritonAttnBackend``, its
    kernels interpreted: this rank holds 1 request, the other rank 2. Runs in a child
    process with ``TRITON_INTERPRET=1`` (see ``TestPaddedDecodeOnTriton``)."""
    seq_len = PADDED_DECODE_SEQ_LEN
    folders = ConfigFolders()
    try:
        server_args = make_server_args(
            folders.write(llama()), folders.write(eagle3()), "EAGLE3"
        )
        config = ModelConfig.from_server_args(server_args)
    finally:
        folders.cleanup()
    torch.manual_seed(0)
    heads, kv_heads = config.num_attention_heads, config.get_num_kv_heads(1)
    dim = config.head_dim
    layer = RadixAttention(heads, dim, dim**-0.5, kv_heads, layer_id=0)
    batch = forward_batch(ForwardMode.DECODE, [seq_len], None, [2, 1])
    even = forward_batch(ForwardMode.DECODE, [seq_len], None, [1, 1])
    q = torch.randn((1, heads * dim))
    k, v = torch.randn((2, 1, kv_heads * dim))
    with attention_dp_rank():
        runner = triton_runner(config, server_args)
        backend = runner.attn_backend
        slots = torch.arange(1, seq_len + 1, dtype=torch.int32)
        runner.req_to_token_pool.req_to_token[1, :seq_len] = slots
        batch.token_to_kv_pool = runner.token_to_kv_pool
        backend.init_forward_metadata(batch)
        unpadded = backend.forward_decode(q, k, v, layer, batch)
        not_padded = get_draft_decode_metadata_batch(even, runner) is even
        # Before the draft steps set their own tokens, the batch holds more rows (every
        # step's cache locations).
        step_ids, step_locs = batch.input_ids, batch.out_cache_loc
        batch.input_ids = torch.zeros((3,), dtype=torch.int64)
        batch.out_cache_loc = torch.arange(3)
        backend.init_forward_metadata(get_draft_decode_metadata_batch(batch, runner))
        batch.input_ids, batch.out_cache_loc = step_ids, step_locs
        kv_indptr = backend.forward_metadata.kv_indptr.tolist()
        rows_before_the_step = batch.batch_size
        batch.prepare_mlp_sync_batch(runner)
        padded_rows = batch.batch_size

        def padded(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, torch.randn((padded_rows - 1, x.shape[1]))])

        # Uninitialised memory filled with NaN, so that a row left unwritten shows.
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        output = backend.forward_decode(padded(q), padded(k), padded(v), layer, batch)
    return {
        "kv_indptr": kv_indptr,
        "rows_before_the_step": rows_before_the_step,
        "padded_rows": padded_rows,
        "not_padded": not_padded,
        "output_rows": output.shape[0],
        "finite": bool(torch.isfinite(output).all()),
        "real_row_as_unpadded": torch.equal(output[:1], unpadded),
    }


class TestPaddedDecodeOnTriton(CustomTestCase):
    """Under DP attention without CUDA graphs each EAGLE draft step's forward pads the
    batch to the other rank's token count, after the metadata of every step was built
    (``EAGLEWorker.draft``). ``get_draft_decode_metadata_batch`` gives the metadata the
    padded batch: this rank holds 1 request, the other 2, and the real
    ``TritonAttnBackend.forward_decode`` attends both rows of the padded query, the real
    one as it does unpadded. Triton interprets its kernels on the CPU only when
    ``TRITON_INTERPRET=1`` is set before they are defined, so the attention runs in a
    child process (``padded_decode_results``)."""

    @classmethod
    def setUpClass(cls):
        result = subprocess.run(
            [sys.executable, "-c", PADDED_DECODE_IN_A_CHILD, __file__],
            env={**os.environ, "TRITON_INTERPRET": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"padded decode failed:\n{result.stderr[-3000:]}")
        cls.results = json.loads(result.stdout.splitlines()[-1])

    def test_the_metadata_has_the_rows_of_the_padded_batch(self):
        self.assertEqual(self.results["kv_indptr"][:2], [0, PADDED_DECODE_SEQ_LEN])
        self.assertEqual(
            len(self.results["kv_indptr"]), self.results["padded_rows"] + 1
        )
        self.assertEqual(self.results["padded_rows"], 2)
        self.assertEqual(self.results["rows_before_the_step"], 1)

    def test_a_batch_dp_attention_does_not_pad_is_used_as_it_is(self):
        self.assertTrue(self.results["not_padded"])

    def test_every_row_is_attended_and_the_real_one_as_unpadded(self):
        self.assertEqual(self.results["output_rows"], 2)
        self.assertTrue(self.results["finite"])
        self.assertTrue(self.results["real_row_as_unpadded"])


class TestPaddedIdleBatchOnFlashInfer(CustomTestCase):
    """An idle draft input describes no rows, and DP attention pads its batch to the
    other rank's 2 requests (``seq_lens_cpu`` of 2 rows). FlashInfer's decode planner
    (the real ``FlashInferIndicesUpdaterDecode.call_begin_forward``, its wrapper
    recording the plan) plans the rows the input's ``kv_indptr`` has: none, as no
    attention runs on an idle batch."""

    def test_the_plan_has_the_rows_of_the_idle_input(self):
        from sglang.srt.layers.attention import flashinfer_backend

        idle = EagleDraftInput.create_idle_input(
            device="cpu",
            hidden_size=256,
            dtype=torch.bfloat16,
            topk=1,
            capture_hidden_mode=None,
        )
        planned = []
        wrapper = SimpleNamespace(
            begin_forward=lambda *args, **kw: planned.append(args)
        )
        updater = SimpleNamespace(
            kv_last_page_len=torch.ones((4,), dtype=torch.int32),
            num_qo_heads=4,
            num_kv_heads=2,
            head_dim=64,
            data_type=torch.bfloat16,
            q_data_type=torch.bfloat16,
        )
        padded_rows = 2
        with mock.patch.object(flashinfer_backend, "global_override_indptr_cpu", None):
            flashinfer_backend.FlashInferIndicesUpdaterDecode.call_begin_forward(
                updater,
                wrapper,
                req_pool_indices=torch.zeros((padded_rows,), dtype=torch.int64),
                paged_kernel_lens=torch.ones((padded_rows,), dtype=torch.int32),
                paged_kernel_lens_sum=padded_rows,
                kv_indptr=None,
                kv_start_idx=None,
                spec_info=idle,
                seq_lens_cpu=torch.ones((padded_rows,), dtype=torch.int32),
            )
            self.assertIsNone(flashinfer_backend.global_override_indptr_cpu)
        ((kv_indptr, kv_indices, kv_last_page_len, *_),) = planned
        self.assertEqual(kv_indptr.tolist(), [0])
        self.assertEqual(kv_indices.numel(), 0)
        self.assertEqual(kv_last_page_len.numel(), 0)


class TestOneDtypeAtDtypeAuto(WorkerTestCase):
    """At ``--dtype auto`` a float16 EAGLE-3 drafter on a bfloat16 target is built in
    bfloat16 (each EAGLE worker decides it at start-up, before the draft model loads):
    every hidden state its sites size has that one dtype."""

    def test_the_draft_model_config_takes_the_targets_dtype(self):
        for cls in (EAGLEWorker, EAGLEWorkerV2, MultiLayerEagleWorkerV2):
            with self.subTest(worker=cls.__name__):
                worker = self.start(cls, "EAGLE3", eagle3())
                draft = worker if cls is EAGLEWorker else worker.draft_worker
                runners = getattr(draft, "draft_runner_list", None) or [
                    draft.draft_runner if cls is not EAGLEWorker else draft.model_runner
                ]
                for runner in runners:
                    self.assertEqual(runner.model_config.dtype, torch.bfloat16)

    def test_every_site_gets_the_targets_dtype(self):
        v1 = self.start(EAGLEWorker, "EAGLE3", eagle3())
        v2 = self.start(EAGLEWorkerV2, "EAGLE3", eagle3())
        ml_v2 = self.start(MultiLayerEagleWorkerV2, "EAGLE3", eagle3())
        batch = SimpleNamespace(spec_info=None)
        v1._draft_preprocess_idle(batch)
        made = verify_idle_output(v1)
        dtypes = {
            "v1 decode": EagleDraftInput.dtype_for(v1),
            "v1 extend": EagleDraftExtendInput.dtype_for(v1),
            "v2 decode": EagleDraftInput.dtype_for(v2.draft_worker),
            "v2 extend": EagleDraftExtendInput.dtype_for(v2.draft_worker),
            "v1 idle input": batch.spec_info.hidden_states.dtype,
            "v1 extend idle input": draft_extend_input(
                v1, BatchAfterVerify(ForwardMode.IDLE, made)
            ).hidden_states.dtype,
            "v2 idle input": v2_idle_input(v2).hidden_states.dtype,
            "multi-layer v2 pool": ml_v2.draft_worker.req_to_hidden_states_pool.dtype,
        }
        self.assertEqual(dtypes, {site: torch.bfloat16 for site in dtypes})

    def test_an_explicit_dtype_is_kept(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", eagle3(), dtype="float16")
        self.assertEqual(worker.target_worker.model_config.dtype, torch.float16)
        draft_config = worker.draft_worker.draft_runner.model_config
        self.assertEqual(draft_config.dtype, torch.float16)

    def test_a_standalone_drafter_keeps_its_own(self):
        """A STANDALONE drafter does not read the target's hidden states."""
        worker = self.start(StandaloneWorkerV2, "STANDALONE", STANDALONE_DRAFTER)
        draft_config = worker.draft_worker.draft_runner.model_config
        self.assertEqual(draft_config.dtype, torch.float16)


#: The target whose capture is compared with transformers': float32, small enough to
#: build twice on a CPU.
CAPTURE_TARGET = llama(hidden_size=64, torch_dtype="float32")


def same_tiny_llama(config: dict):
    """One tiny Llama as transformers builds it and as SGLang loads its weights (by its
    own load_weights). Every o_proj is zero, so attention adds nothing: no attention
    backend runs here."""
    from transformers import LlamaConfig
    from transformers import LlamaForCausalLM as HFLlamaForCausalLM

    torch.manual_seed(0)
    reference = HFLlamaForCausalLM(LlamaConfig(**config)).eval()
    with torch.no_grad():
        for layer in reference.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
            layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    with one_cpu_rank():
        model = LlamaForCausalLM(LlamaConfig(**config))
        model.load_weights(iter(reference.state_dict().items()))
    return reference, model


class TestTargetCapture(CustomTestCase):
    """The target ModelRunner's own ``__init__`` decides which layers the target captures
    for an EAGLE-3 drafter (it runs here up to ``model_specific_adjustment``: what
    follows is device set-up), its ``init_aux_hidden_state_capture`` tells the model, and
    the model's forward hands the drafter those hidden states. Each is compared with
    transformers' ``output_hidden_states`` of the same model (0: the embeddings, ``k``:
    the output of layer ``k - 1``)."""

    TOKENS = torch.tensor([3, 17, 99, 5])

    @classmethod
    def setUpClass(cls):
        cls.folders = ConfigFolders()
        cls.target_path = cls.folders.write(CAPTURE_TARGET)
        reference, cls.model = same_tiny_llama(CAPTURE_TARGET)
        with torch.no_grad():
            outputs = reference.model(cls.TOKENS[None], output_hidden_states=True)
        cls.hidden_states = [h[0] for h in outputs.hidden_states]

    @classmethod
    def tearDownClass(cls):
        cls.folders.cleanup()

    def start_target_runner(self, draft: dict) -> ModelRunner:
        server_args = make_server_args(
            self.target_path, self.folders.write(draft), "EAGLE3"
        )
        runner = ModelRunner.__new__(ModelRunner)

        def stop(self):
            raise DraftModelLoaded

        with mock.patch.object(ModelRunner, "model_specific_adjustment", stop):
            with self.assertRaises(DraftModelLoaded):
                runner.__init__(
                    model_config=ModelConfig.from_server_args(server_args),
                    mem_fraction_static=0.5,
                    gpu_id=0,
                    tp_rank=0,
                    tp_size=1,
                    moe_ep_rank=0,
                    moe_ep_size=1,
                    pp_rank=0,
                    pp_size=1,
                    nccl_port=0,
                    server_args=server_args,
                )
        return runner

    def captured(self, draft: dict) -> List[Optional[int]]:
        """Which of transformers' hidden states the target hands the drafter."""
        runner = self.start_target_runner(draft)
        runner.model = self.model
        self.model.model.layers_to_capture = []
        runner.init_aux_hidden_state_capture()

        def no_attention(positions, hidden_states, forward_batch):
            return torch.zeros_like(hidden_states)

        with contextlib.ExitStack() as stack, torch.no_grad():
            for layer in self.model.model.layers:
                stack.enter_context(
                    mock.patch.object(layer.self_attn, "forward", no_attention)
                )
            stack.enter_context(one_cpu_rank())
            outputs = self.model.model(
                self.TOKENS, torch.arange(len(self.TOKENS)), SimpleNamespace()
            )
        aux_hidden_states = outputs[1] if isinstance(outputs, tuple) else []
        return [
            next(
                (
                    k
                    for k, reference in enumerate(self.hidden_states)
                    if torch.allclose(aux, reference, atol=1e-5)
                ),
                None,
            )
            for aux in aux_hidden_states
        ]

    def test_the_drafters_layer_ids(self):
        """SGLang's ids name the layer whose output the drafter reads."""
        draft = eagle3(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 3, 6]})
        self.assertEqual(self.captured(draft), [1, 4, 7])

    def test_top_level_layer_ids(self):
        draft = eagle3(eagle_aux_hidden_state_layer_ids=[1, 4, 5])
        self.assertEqual(self.captured(draft), [2, 5, 6])

    def test_default_layers_without_eagle_config(self):
        """The inputs of layers [2, L // 2, L - 3]."""
        self.assertEqual(self.captured(eagle3()), [2, 4, 5])

    def test_nothing_when_aux_is_off(self):
        self.assertEqual(self.captured(NO_AUX_EAGLE3), [])

    def test_ids_the_target_cannot_capture_are_refused(self):
        """Layer 7 of 8 has no layer after it to capture its output as an input."""
        draft = eagle3(eagle_aux_hidden_state_layer_ids=[1, 4, 7])
        with self.assertRaises(ValueError) as raised:
            self.start_target_runner(draft)
        message = str(raised.exception)
        self.assertIn("eagle_aux_hidden_state_layer_ids=[1, 4, 7]", message)
        self.assertIn("a target of 8 layers", message)

    def test_speculators_layer_ids(self):
        """The speculators library's ids index the target's hidden states as transformers
        does: the last layer's input is hidden state L - 1."""
        for layer_ids in ([1, 3, 5], [2, 5, 7]):
            with self.subTest(layer_ids=layer_ids):
                draft = speculators_eagle3(layer_ids)
                self.assertEqual(self.captured(draft), layer_ids)

    def test_speculators_ids_the_target_cannot_capture_are_refused(self):
        """Hidden state 0 is the embeddings, hidden state L the final one: a target's
        forward captures neither."""
        for layer_ids, key in (
            ([0, 4, 7], "eagle_aux_hidden_state_layer_ids=[0, 4, 7]"),
            ([1, 4, 8], "hidden state 8 is not captured"),
        ):
            with (
                self.subTest(layer_ids=layer_ids),
                self.assertRaises(ValueError) as raised,
            ):
                self.start_target_runner(speculators_eagle3(layer_ids))
            self.assertIn(key, str(raised.exception))


class QueuesReached(Exception):
    """Raised where init_disaggregation builds its transfer queues (network set-up)."""


class TestPDMetadataBuffers(WorkerTestCase):
    """The real ``Scheduler.init_disaggregation`` on a prefill and a decode server with
    the same worker: the hidden-state slot has one size on both (the transfer copies the
    prefill side's item length into the decode side's slot): the draft state's."""

    def metadata_buffers(self, worker, target_worker, server_args, mode: str, v2: bool):
        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = server_args
        server_args.disaggregation_mode = mode
        server_args.disaggregation_transfer_backend = "fake"
        scheduler.spec_algorithm = SpeculativeAlgorithm.from_string(
            server_args.speculative_algorithm
        )
        scheduler.enable_overlap = v2
        scheduler.draft_worker = worker
        scheduler.tp_worker = target_worker
        scheduler.model_config = target_worker.model_config
        scheduler.req_to_token_pool = target_worker.req_to_token_pool
        scheduler.max_running_requests = 8
        scheduler.token_to_kv_pool_allocator = SimpleNamespace(
            get_kvcache=lambda: SimpleNamespace(maybe_get_custom_mem_pool=lambda: None)
        )
        for name in (
            "attn_tp_cpu_group",
            "tree_cache",
            "gpu_id",
            "max_total_num_tokens",
        ):
            setattr(scheduler, name, None)
        scheduler.tp_rank = scheduler.pp_rank = 0
        scheduler.tp_size = scheduler.pp_size = 1

        def stop(*args, **kwargs):
            raise QueuesReached

        with (
            mock.patch.object(scheduler_module, "DecodeTransferQueue", stop),
            mock.patch.object(scheduler_module, "PrefillBootstrapQueue", stop),
        ):
            with self.assertRaises(QueuesReached):
                scheduler.init_disaggregation()
        buffers = scheduler.disagg_metadata_buffers
        pointers, _, item_lens = buffers.get_buf_infos()
        hidden = buffers.output_hidden_states
        return item_lens[pointers.index(hidden.data_ptr())], hidden.dtype

    def check(self, cls, algorithm: str, draft: dict):
        worker = self.start(cls, algorithm, draft)
        v2 = cls not in V1_WORKERS
        target_worker = worker.target_worker
        server_args = worker.server_args
        width, dtype = expected_sizes(algorithm, draft, llama())["decode"]
        item = width * torch.empty(0, dtype=dtype).element_size()
        for mode in ("prefill", "decode"):
            with self.subTest(server=mode):
                self.assertEqual(
                    self.metadata_buffers(worker, target_worker, server_args, mode, v2),
                    (item, dtype),
                )

    def test_eagle3_v1(self):
        self.check(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)

    def test_eagle3_v2(self):
        self.check(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)

    def test_eagle3_narrow_drafter_without_aux_v1(self):
        """The draft-extend width is the target's (256) here, the draft state's 128."""
        self.check(EAGLEWorker, "EAGLE3", NARROW_NO_AUX_EAGLE3)

    def test_eagle3_narrow_drafter_without_aux_v2(self):
        self.check(EAGLEWorkerV2, "EAGLE3", NARROW_NO_AUX_EAGLE3)

    def test_standalone_v1(self):
        self.check(StandaloneWorker, "STANDALONE", STANDALONE_DRAFTER)

    def test_standalone_v2(self):
        self.check(StandaloneWorkerV2, "STANDALONE", STANDALONE_DRAFTER)


class AttentionBackendStandIn:
    """A draft attention backend as the CUDA-graph runners read it before capture."""

    def __init__(self):
        self.attn_backends = [self]  # a multi-step backend's per-step backends

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        pass

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1


class TestCudaGraphBuffers(WorkerTestCase):
    """The hidden-state buffer of each draft CUDA-graph runner, built by the runner's own
    constructor on the CPU; only the graph capture is replaced (and the attention
    backends, as for the workers). Expected sizes come from the config facts."""

    def setUp(self):
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        for runner_class in (
            EAGLEDraftCudaGraphRunner,
            EAGLEDraftExtendCudaGraphRunner,
            MultiLayerEagleDraftExtendCudaGraphRunner,
        ):
            stack.enter_context(
                mock.patch.object(runner_class, "capture", lambda self: None)
            )
        stack.enter_context(attention_dp_rank(rank=0, size=1))

    def start_with_graphs(self, cls, draft: dict):
        """A worker started without graphs; its runners then take graph sizes."""
        worker = self.start(cls, "EAGLE3", draft)
        worker.server_args.disable_cuda_graph = False
        worker.server_args.cuda_graph_bs = [1, 2, 4]
        draft_worker = worker if cls is EAGLEWorker else worker.draft_worker
        runners = getattr(draft_worker, "draft_runner_list", None) or [
            draft_runner_of(draft_worker)
        ]
        for runner in runners:
            runner.tp_size = runner.dp_size = 1
            runner.req_to_token_pool = worker.target_worker.req_to_token_pool
            runner.attn_backend = AttentionBackendStandIn()
        return draft_worker

    def assert_buffer(self, buffers, width: int, dtype: torch.dtype):
        hidden_states = buffers.hidden_states
        self.assertEqual((hidden_states.shape[-1], hidden_states.dtype), (width, dtype))

    def test_draft_decode_runner(self):
        expected = expected_sizes("EAGLE3", NARROW_EAGLE3, llama())["decode"]
        for cls in (EAGLEWorker, EAGLEWorkerV2):
            with self.subTest(worker=cls.__name__):
                runner = EAGLEDraftCudaGraphRunner(
                    self.start_with_graphs(cls, NARROW_EAGLE3),
                    draft_attn_backend=AttentionBackendStandIn(),
                )
                self.assert_buffer(runner.buffers, *expected)

    def test_draft_extend_runner(self):
        for draft in (FOUR_LAYER_EAGLE3, NARROW_NO_AUX_EAGLE3):
            expected = expected_sizes("EAGLE3", draft, llama())["extend"]
            for cls in (EAGLEWorker, EAGLEWorkerV2):
                with self.subTest(worker=cls.__name__, width=expected[0]):
                    runner = EAGLEDraftExtendCudaGraphRunner(
                        self.start_with_graphs(cls, draft),
                        draft_extend_attn_backend=AttentionBackendStandIn(),
                    )
                    self.assert_buffer(runner.buffers, *expected)

    def test_multi_layer_draft_extend_runners(self):
        expected = expected_sizes("EAGLE3", FOUR_LAYER_EAGLE3, llama())["extend"]
        draft_worker = self.start_with_graphs(
            MultiLayerEagleWorkerV2, FOUR_LAYER_EAGLE3
        )
        draft_worker.draft_extend_attn_backend_list = [
            AttentionBackendStandIn() for _ in range(SPEC_STEPS)
        ]
        runners = MultiLayerEagleMultiStepDraftExtendCudaGraphRunner(draft_worker)
        self.assertEqual(len(runners.runners), SPEC_STEPS)
        for step, runner in enumerate(runners.runners):
            with self.subTest(step=step):
                self.assert_buffer(runner.buffers, *expected)


class TestEagleConfigParser(CustomTestCase):
    """The one parser of the drafter's aux hidden-state flag and layer ids."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolders()
        cls.eagle3 = SpeculativeAlgorithm.EAGLE3

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def hf_config(self, **changes):
        """An EAGLE-3 drafter's hf_config with these keys set (None: JSON null)."""
        config = dict(eagle3(), **changes)
        return self.folder.model_config(config, is_draft_model=True).hf_config

    def assert_refused(self, call, key: str, value, hf_config):
        with self.assertRaises(ValueError) as raised:
            call()
        return assert_refusal(
            self, raised.exception, key, value, hf_config.name_or_path
        )

    def test_flag_accepted_forms(self):
        cases = [
            ("no eagle_config", {}, True),
            ("eagle_config null", {"eagle_config": None}, True),
            ("empty eagle_config", {"eagle_config": {}}, True),
            ("flag true", {"eagle_config": {"use_aux_hidden_state": True}}, True),
            ("flag false", {"eagle_config": {"use_aux_hidden_state": False}}, False),
            ("flag 1", {"eagle_config": {"use_aux_hidden_state": 1}}, True),
            ("flag 0", {"eagle_config": {"use_aux_hidden_state": 0}}, False),
            ("flag null", {"eagle_config": {"use_aux_hidden_state": None}}, False),
            (
                "layer ids only",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
                True,
            ),
        ]
        for name, changes, expected in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertIs(
                    parse_eagle_use_aux_hidden_state(self.eagle3, hf_config), expected
                )

    def test_flag_from_an_eagle_config_object(self):
        hf_config = self.hf_config()
        for flag in (True, False):
            with self.subTest(use_aux_hidden_state=flag):
                hf_config.eagle_config = SimpleNamespace(use_aux_hidden_state=flag)
                self.assertIs(
                    parse_eagle_use_aux_hidden_state(self.eagle3, hf_config), flag
                )

    def test_flag_is_false_unless_eagle3(self):
        """EAGLE, MTP and STANDALONE drafters have no aux hidden states; their
        eagle_config is not read at all."""
        for changes in (
            {},
            {"eagle_config": {"use_aux_hidden_state": True}},
            {"eagle_config": "x"},
        ):
            hf_config = self.hf_config(**changes)
            for algorithm in (
                SpeculativeAlgorithm.EAGLE,
                SpeculativeAlgorithm.STANDALONE,
            ):
                with self.subTest(algorithm=algorithm.name, changes=changes):
                    self.assertIs(
                        parse_eagle_use_aux_hidden_state(algorithm, hf_config), False
                    )

    def test_flag_refused_forms(self):
        cases = [
            ("eagle_config", "aux", {"eagle_config": "aux"}),
            ("eagle_config", [1, 2, 3], {"eagle_config": [1, 2, 3]}),
            ("eagle_config", 1, {"eagle_config": 1}),
            (
                "eagle_config.use_aux_hidden_state",
                "yes",
                {"eagle_config": {"use_aux_hidden_state": "yes"}},
            ),
            (
                "eagle_config.use_aux_hidden_state",
                "false",
                {"eagle_config": {"use_aux_hidden_state": "false"}},
            ),
            (
                "eagle_config.use_aux_hidden_state",
                2,
                {"eagle_config": {"use_aux_hidden_state": 2}},
            ),
        ]
        for key, value, changes in cases:
            with self.subTest(key=key, value=value):
                hf_config = self.hf_config(**changes)
                self.assert_refused(
                    lambda: parse_eagle_use_aux_hidden_state(self.eagle3, hf_config),
                    key,
                    value,
                    hf_config,
                )

    def test_layer_ids_accepted_forms(self):
        cases = [
            ("no eagle_config", {}, None, DEFAULT_NUM_AUX),
            ("eagle_config without ids", {"eagle_config": {}}, None, 3),
            (
                "three ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}},
                [1, 23, 44],
                3,
            ),
            (
                "two ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30]}},
                [2, 30],
                2,
            ),
            (
                "four ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 8, 16, 31]}},
                [1, 8, 16, 31],
                4,
            ),
        ]
        for name, changes, layer_ids, num_aux in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), layer_ids
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_layer_ids_at_the_top_level(self):
        cases = [
            ("top level only", {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}, 3),
            ("two at the top level", {"eagle_aux_hidden_state_layer_ids": [1, 44]}, 2),
            (
                "both places, the same layers",
                {
                    "eagle_aux_hidden_state_layer_ids": [2, 30],
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30]},
                },
                2,
            ),
        ]
        for name, changes, num_aux in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config),
                    changes["eagle_aux_hidden_state_layer_ids"],
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_layer_ids_declared_twice_must_agree(self):
        hf_config = self.hf_config(
            eagle_aux_hidden_state_layer_ids=[1, 44],
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44]},
        )
        for function in (
            get_eagle_aux_hidden_state_layer_ids,
            get_eagle_num_aux_hidden_states,
        ):
            with self.subTest(function=function.__name__):
                message = self.assert_refused(
                    lambda: function(hf_config),
                    "eagle_aux_hidden_state_layer_ids",
                    [1, 44],
                    hf_config,
                )
                self.assertIn("[1, 23, 44]", message)

    def test_num_aux_hidden_states_must_count_the_layers(self):
        cases = [
            ({"num_aux_hidden_states": 4}, 4),
            (
                {
                    "num_aux_hidden_states": 3,
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 31]},
                },
                3,
            ),
            (
                {
                    "num_aux_hidden_states": 2,
                    "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
                },
                2,
            ),
        ]
        for changes, value in cases:
            with self.subTest(changes=changes):
                hf_config = self.hf_config(**changes)
                self.assert_refused(
                    lambda: get_eagle_num_aux_hidden_states(hf_config),
                    "num_aux_hidden_states",
                    value,
                    hf_config,
                )
        hf_config = self.hf_config(num_aux_hidden_states=3)
        self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_layer_ids_from_a_tuple_or_an_object(self):
        hf_config = self.hf_config()
        forms = [
            SimpleNamespace(eagle_aux_hidden_state_layer_ids=(2, 30, 58)),
            {"eagle_aux_hidden_state_layer_ids": (2, 30, 58)},
        ]
        for eagle_config in forms:
            with self.subTest(eagle_config=eagle_config):
                hf_config.eagle_config = eagle_config
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), [2, 30, 58]
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_layer_ids_refused_forms(self):
        for value in ([], [1, "x", 3], [-1, 2, 3], [True, 2, 3], "1,2,3", 3):
            for key, changes in (
                (
                    "eagle_config.eagle_aux_hidden_state_layer_ids",
                    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": value}},
                ),
                (
                    "eagle_aux_hidden_state_layer_ids",
                    {"eagle_aux_hidden_state_layer_ids": value},
                ),
            ):
                with self.subTest(key=key, value=value):
                    hf_config = self.hf_config(**changes)
                    for function in (
                        get_eagle_aux_hidden_state_layer_ids,
                        get_eagle_num_aux_hidden_states,
                    ):
                        self.assert_refused(
                            lambda: function(hf_config), key, value, hf_config
                        )


class TestStartupValidation(CustomTestCase):
    """validate_eagle_draft_config: a drafter that cannot consume what the target
    produces stops the worker at start-up with one message naming the cause."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolders()
        cls.target = cls.folder.model_config(llama())
        cls.wide_target = cls.folder.model_config(llama(hidden_size=512))

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def draft(self, base: Optional[dict] = None, **changes) -> ModelConfig:
        config = dict(base or eagle3(), **changes)
        return self.folder.model_config(config, is_draft_model=True)

    def assert_refused(self, draft, target, key: str, value):
        with self.assertRaises(ValueError) as raised:
            validate_eagle_draft_config(SpeculativeAlgorithm.EAGLE3, draft, target)
        message = assert_refusal(self, raised.exception, key, value, draft.model_path)
        self.assertIn(target.model_path, message)
        return message

    def test_valid_drafters_pass(self):
        cases = [
            (self.draft(), self.target),
            (self.draft(NO_AUX_EAGLE3), self.target),
            (self.draft(target_hidden_size=256), self.target),
            (self.draft(num_aux_hidden_states=3), self.target),
            (
                self.draft(
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 29]}
                ),
                self.target,
            ),
            (self.draft(NARROW_EAGLE3), self.target),
            (
                self.draft(eagle_aux_hidden_state_layer_ids=[1, 15, 29]),
                self.target,
            ),
        ]
        for draft, target in cases:
            with self.subTest(draft=draft.model_path):
                self.assertIsNone(
                    validate_eagle_draft_config(
                        SpeculativeAlgorithm.EAGLE3, draft, target
                    )
                )

    def test_other_algorithms_are_not_checked(self):
        draft = self.draft(target_hidden_size=512, eagle_config="x")
        for algorithm in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.STANDALONE):
            with self.subTest(algorithm=algorithm.name):
                self.assertIsNone(
                    validate_eagle_draft_config(algorithm, draft, self.target)
                )

    def test_target_hidden_size_of_another_target(self):
        self.assert_refused(
            self.draft(target_hidden_size=512),
            self.target,
            "target_hidden_size",
            512,
        )
        # A drafter whose architecture is not llama_eagle3's: no fc width to compare,
        # the declared target width alone tells it was trained for another target.
        self.assert_refused(
            self.draft(FOUR_LAYER_EAGLE3, target_hidden_size=128),
            self.target,
            "target_hidden_size",
            128,
        )

    def test_num_aux_hidden_states_disagrees_with_the_capture(self):
        self.assert_refused(
            self.draft(num_aux_hidden_states=4),
            self.target,
            "num_aux_hidden_states",
            4,
        )
        self.assert_refused(
            self.draft(
                num_aux_hidden_states=3,
                eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 31]},
            ),
            self.target,
            "num_aux_hidden_states",
            3,
        )

    def test_narrow_drafter_without_target_hidden_size(self):
        """A 256-wide drafter for a 512-wide target must say target_hidden_size: its fc
        would take 3 x 256 features while the target produces 3 x 512."""
        message = self.assert_refused(
            self.draft(), self.wide_target, "target_hidden_size", None
        )
        self.assertIn("512", message)

    def test_four_aux_layers_fit_the_drafters_fc(self):
        """llama_eagle3.py's fc takes the aux layers the drafter declares: four captured
        layers of 256 are what its fc takes; without target_hidden_size a drafter
        narrower than its target is still refused."""
        layer_ids = [1, 3, 5, 6]
        for draft in (
            self.draft(eagle_config={"eagle_aux_hidden_state_layer_ids": layer_ids}),
            self.draft(eagle_aux_hidden_state_layer_ids=layer_ids),
            self.draft(eagle_aux_hidden_state_layer_ids=[1, 6]),
        ):
            with self.subTest(draft=draft.model_path):
                self.assertIsNone(
                    validate_eagle_draft_config(
                        SpeculativeAlgorithm.EAGLE3, draft, self.target
                    )
                )
        message = self.assert_refused(
            self.draft(eagle_aux_hidden_state_layer_ids=layer_ids),
            self.wide_target,
            "target_hidden_size",
            None,
        )
        self.assertIn("as hidden_size = 256 features", message)
        self.assertIn("the target's are 512 wide", message)

    def test_shallow_target_without_declared_layer_ids(self):
        """Without declared ids the target captures the inputs of its layers
        [2, L // 2, L - 3]: 2, 3, 4 and 5 layers give fewer than 3 distinct layer
        outputs (layer 0's input is the embedding), 7 layers give 3."""
        for num_layers in (2, 3, 4, 5):
            with self.subTest(num_layers=num_layers):
                target = self.folder.model_config(llama(num_hidden_layers=num_layers))
                self.assert_refused(
                    self.draft(),
                    target,
                    "eagle_config.eagle_aux_hidden_state_layer_ids",
                    None,
                )
        shallow = self.folder.model_config(llama(num_hidden_layers=3))
        deep_enough = self.folder.model_config(llama(num_hidden_layers=7))
        for draft, target in (
            (self.draft(), deep_enough),
            (
                self.draft(
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]}
                ),
                shallow,
            ),
            (self.draft(NO_AUX_EAGLE3), shallow),
        ):
            with self.subTest(draft=draft.model_path, target=target.model_path):
                self.assertIsNone(
                    validate_eagle_draft_config(
                        SpeculativeAlgorithm.EAGLE3, draft, target
                    )
                )

    def test_parser_refusals_name_both_configs(self):
        self.assert_refused(
            self.draft(eagle_config={"use_aux_hidden_state": "yes"}),
            self.target,
            "eagle_config.use_aux_hidden_state",
            "yes",
        )
        self.assert_refused(
            self.draft(eagle_config={"eagle_aux_hidden_state_layer_ids": []}),
            self.target,
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            [],
        )


class ServerArgsUnset:
    """Global server args for building a model outside a server: every field unset."""

    def __getattr__(self, name):
        return None


@contextlib.contextmanager
def one_cpu_rank():
    """One tensor- and pipeline-parallel rank without a process group, and RoPE's CPU
    path: what building a model's layers on a CPU needs. Restores what it sets."""
    one_rank = SimpleNamespace(
        world_size=1,
        rank_in_group=0,
        rank=0,
        local_rank=0,
        is_first_rank=True,
        is_last_rank=True,
    )
    with contextlib.ExitStack() as stack:
        for target, name, value in (
            (parallel_state, "_TP", one_rank),
            (parallel_state, "_PP", one_rank),
            (parallel_state, "_ATTN_TP", one_rank),
            (server_args_module, "_global_server_args", ServerArgsUnset()),
            (rotary_embedding_base, "_is_cpu", True),
        ):
            stack.enter_context(mock.patch.object(target, name, value))
        yield


def llama_eagle3_model(**fields) -> LlamaForCausalLMEagle3:
    """The real EAGLE-3 draft model of llama_eagle3.py, built on the CPU from a tiny
    config (random weights)."""
    from transformers import LlamaConfig

    config = eagle3(**fields)
    with one_cpu_rank():
        return LlamaForCausalLMEagle3(LlamaConfig(**config))


def draft_forward_batch(mode: ForwardMode, hidden_states: torch.Tensor):
    """What LlamaModel.forward reads of a batch before the mid layer."""
    return SimpleNamespace(
        forward_mode=mode,
        spec_info=SimpleNamespace(hidden_states=hidden_states),
        mm_input_embeds=None,
        contains_mm_inputs=lambda: False,
    )


class TestDrafterFc(CustomTestCase):
    """LlamaForCausalLMEagle3's fc takes the aux hidden states of the target layers the
    drafter declares, and its forward reads the hidden states by what the step is."""

    FOUR_IDS = [1, 3, 5, 6]

    @classmethod
    def setUpClass(cls):
        cls.models = {
            "eagle_config": llama_eagle3_model(
                eagle_config={"eagle_aux_hidden_state_layer_ids": cls.FOUR_IDS}
            ),
            "top level": llama_eagle3_model(
                eagle_aux_hidden_state_layer_ids=cls.FOUR_IDS
            ),
        }

    def test_fc_takes_the_declared_aux_layers(self):
        for where, model in self.models.items():
            with self.subTest(declared_in=where):
                self.assertEqual(model.model.fc.in_features, 4 * 256)
                self.assertEqual(model.model.fc.out_features, 256)
        self.assertEqual(llama_eagle3_model().model.fc.in_features, 3 * 256)
        narrow = llama_eagle3_model(
            hidden_size=128,
            target_hidden_size=256,
            eagle_aux_hidden_state_layer_ids=[1, 6],
        )
        self.assertEqual(narrow.model.fc.in_features, 2 * 256)

    def test_forward_with_another_width_fails_naming_both(self):
        model = self.models["top level"].model
        tokens = torch.tensor([1, 2])
        for mode in (ForwardMode.DRAFT_EXTEND, ForwardMode.EXTEND):
            with self.subTest(mode=mode.name):
                batch = draft_forward_batch(mode, torch.zeros((2, 3 * 256)))
                with one_cpu_rank(), self.assertRaises(ValueError) as raised:
                    model(tokens, tokens, batch)
                message = str(raised.exception)
                self.assertIn("fc takes 1024 features", message)
                self.assertIn("768 wide", message)

    def test_each_step_reads_its_own_width(self):
        model = self.models["eagle_config"].model
        features = torch.randn((2, 4 * 256))
        own = torch.randn((2, 256))
        for mode in (ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND):
            with self.subTest(mode=mode.name):
                out = model.project_hidden_states(
                    features, draft_forward_batch(mode, features)
                )
                self.assertTrue(torch.equal(out, model.fc(features)))
        # A draft decode step reads the draft model's own hidden states, also when DP
        # attention pads it as an EXTEND batch.
        padded = draft_forward_batch(ForwardMode.EXTEND, own)
        padded._original_forward_mode = ForwardMode.DECODE
        for batch in (draft_forward_batch(ForwardMode.DECODE, own), padded):
            self.assertIs(model.project_hidden_states(own, batch), own)
        # Idle batches, either phase: hidden_size wide, through the real forward.
        for width in (4 * 256, 256):
            with self.subTest(idle_width=width):
                empty = torch.zeros((0, width))
                none = torch.zeros((0,), dtype=torch.int64)
                batch = draft_forward_batch(ForwardMode.IDLE, empty)
                with one_cpu_rank():
                    hidden_states, _ = model(none, none, batch)
                self.assertEqual(tuple(hidden_states.shape), (0, 256))

    def test_without_aux_hidden_states_the_target_state_is_read_as_it_is(self):
        model = llama_eagle3_model(eagle_config={"use_aux_hidden_state": False}).model
        last = torch.randn((2, 256))
        batch = draft_forward_batch(ForwardMode.DRAFT_EXTEND, last)
        self.assertIs(model.project_hidden_states(last, batch), last)

    def test_building_the_model_imports_no_scheduler_module(self):
        """llama_eagle3.py reads the drafter's aux layers with the parser of spec_info.py:
        building the model, in a fresh interpreter, leaves eagle_info.py (which imports
        schedule_batch and the model runner) unimported."""
        from sglang.srt.models import llama_eagle3

        root = os.path.dirname(llama_eagle3.__file__)
        for _ in range(3):  # sglang/srt/models -> the folder holding sglang/
            root = os.path.dirname(root)
        paths = [root, os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
        result = subprocess.run(
            [sys.executable, "-c", MODEL_BUILT_IN_A_CHILD, json.dumps(eagle3())],
            capture_output=True,
            text=True,
            env=env,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        *_, module_file, imported = result.stdout.splitlines()
        self.assertEqual(module_file, llama_eagle3.__file__)
        self.assertEqual(imported, "False")


#: Builds LlamaForCausalLMEagle3 from the config in argv[1] on one CPU rank (as
#: ``one_cpu_rank``), then prints the model file and whether eagle_info was imported.
MODEL_BUILT_IN_A_CHILD = """
import contextlib, json, sys
from types import SimpleNamespace
from unittest import mock
from sglang.test.test_utils import maybe_stub_sgl_kernel
maybe_stub_sgl_kernel()
from transformers import LlamaConfig
from sglang.srt import server_args
from sglang.srt.distributed import parallel_state
from sglang.srt.layers.rotary_embedding import base
from sglang.srt.models import llama_eagle3
class Unset:
    def __getattr__(self, name):
        return None
rank = SimpleNamespace(world_size=1, rank_in_group=0, rank=0, local_rank=0,
                       is_first_rank=True, is_last_rank=True)
with contextlib.ExitStack() as stack:
    for target, name, value in (
        (parallel_state, "_TP", rank), (parallel_state, "_PP", rank),
        (parallel_state, "_ATTN_TP", rank), (server_args, "_global_server_args", Unset()),
        (base, "_is_cpu", True),
    ):
        stack.enter_context(mock.patch.object(target, name, value))
    llama_eagle3.LlamaForCausalLMEagle3(LlamaConfig(**json.loads(sys.argv[1])))
print(llama_eagle3.__file__)
print("sglang.srt.speculative.eagle_info" in sys.modules)
"""


def attention_zeroed(model: LlamaForCausalLMEagle3):
    """The mid layer's attention contributes nothing: no attention backend runs here,
    and what the norm flags change is around it."""
    attention = model.model.midlayer.self_attn
    return mock.patch.object(
        attention,
        "forward",
        lambda positions, hidden_states, forward_batch: torch.zeros(
            (hidden_states.shape[0], attention.hidden_size)
        ),
    )


def with_random_weights(model: LlamaForCausalLMEagle3) -> LlamaForCausalLMEagle3:
    """SGLang's layers allocate their weights uninitialized: give every one a value."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.05 + 0.1)
    return model


class TestEagle3NormVariants(CustomTestCase):
    """LlamaForCausalLMEagle3 computes the norm variants its config declares; with none
    declared it computes what it did before."""

    def setUp(self):
        torch.manual_seed(0)
        self.features = torch.randn((2, 3 * 256))
        self.batch = draft_forward_batch(ForwardMode.DRAFT_EXTEND, self.features)

    def fc_input_read(self, model, features: torch.Tensor) -> torch.Tensor:
        return model.model.project_hidden_states(features, self.batch)

    def one_layer_scaled(self, factor: float) -> torch.Tensor:
        scaled = self.features.clone()
        scaled[:, :256] *= factor
        return scaled

    def test_norm_before_fc_normalizes_the_concatenation(self):
        model = llama_eagle3_model(norm_before_fc=True)
        self.assertEqual(tuple(model.model.input_norm.weight.shape), (3 * 256,))
        reference = self.fc_input_read(model, self.features)
        torch.testing.assert_close(
            self.fc_input_read(model, 4 * self.features), reference
        )
        changed = self.fc_input_read(model, self.one_layer_scaled(4))
        self.assertFalse(torch.allclose(changed, reference, atol=1e-3))

    def test_fc_norm_normalizes_each_aux_layer(self):
        model = llama_eagle3_model(fc_norm=True)
        self.assertEqual(len(model.model.fc_norm), 3)
        torch.testing.assert_close(
            self.fc_input_read(model, self.one_layer_scaled(4)),
            self.fc_input_read(model, self.features),
        )

    def test_without_the_flags_fc_reads_the_states_as_they_are(self):
        model = llama_eagle3_model()
        self.assertIsNone(model.model.input_norm)
        self.assertIsNone(model.model.fc_norm)
        torch.testing.assert_close(
            self.fc_input_read(model, 2 * self.features),
            2 * model.model.fc(self.features),
        )

    def test_norm_before_fc_in_eagle_config_normalizes_the_concatenation(self):
        model = llama_eagle3_model(eagle_config={"norm_before_fc": True})
        self.assertEqual(tuple(model.model.input_norm.weight.shape), (3 * 256,))
        torch.testing.assert_close(
            self.fc_input_read(model, 4 * self.features),
            self.fc_input_read(model, self.features),
        )

    def test_a_flag_set_in_both_places_must_agree(self):
        agreeing = llama_eagle3_model(
            norm_output=True, eagle_config={"norm_output": True}
        )
        self.assertTrue(agreeing.model.norm_output)
        with self.assertRaises(ValueError) as raised:
            llama_eagle3_model(
                norm_before_fc=False, eagle_config={"norm_before_fc": True}
            )
        self.assertIn("eagle_config.norm_before_fc=True", str(raised.exception))

    def test_both_fc_norms_are_refused_when_the_model_is_built(self):
        with self.assertRaises(ValueError) as raised:
            llama_eagle3_model(norm_before_fc=True, fc_norm=True)
        self.assertIn("norm_before_fc and fc_norm", str(raised.exception))

    def test_norm_before_residual_keeps_the_normed_hidden_states(self):
        hidden = torch.randn((2, 256))
        embeds = torch.randn((2, 256))
        positions = torch.tensor([0, 1])
        for flag in (False, True):
            model = with_random_weights(llama_eagle3_model(norm_before_residual=flag))
            layer = model.model.midlayer
            with self.subTest(norm_before_residual=flag), attention_zeroed(model):
                with one_cpu_rank():
                    _, residual = layer(positions, embeds, hidden, self.batch, None)
                    _, scaled = layer(positions, embeds, 5 * hidden, self.batch, None)
                if flag:
                    torch.testing.assert_close(residual, layer.hidden_norm(hidden))
                    torch.testing.assert_close(scaled, residual)
                else:
                    torch.testing.assert_close(residual, hidden)

    def test_norm_output_passes_the_normed_hidden_states_on(self):
        tokens = torch.tensor([1, 2])
        for flag in (False, True):
            model = with_random_weights(llama_eagle3_model(norm_output=flag))
            with self.subTest(norm_output=flag), attention_zeroed(model):
                with one_cpu_rank():
                    to_logits, (to_next_step,) = model.model(tokens, tokens, self.batch)
                self.assertEqual(torch.equal(to_next_step, to_logits), flag)


def speculators_eagle3(layer_ids: Optional[List[int]] = None, **fields) -> dict:
    """An EAGLE-3 drafter as the speculators library saves it: the decoder layer's
    config nested, the drafter's own keys at the top level."""
    layer = llama(num_hidden_layers=1, head_dim=64)
    del layer["architectures"], layer["torch_dtype"]
    config = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_config": {
            "algorithm": "eagle3",
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": None},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": 512,
        "target_hidden_size": None,
        "dtype": "float16",
    }
    if layer_ids is not None:
        config["eagle_aux_hidden_state_layer_ids"] = layer_ids
    config.update(fields)
    return config


def speculators_weights(config: dict, num_aux: int) -> Dict[str, torch.Tensor]:
    """Random weights under the names and shapes the speculators library saves."""
    layer = config["transformer_layer_config"]
    hidden, inter = layer["hidden_size"], layer["intermediate_size"]
    q = layer["num_attention_heads"] * layer["head_dim"]
    kv = layer["num_key_value_heads"] * layer["head_dim"]
    shapes = {
        "embed_tokens.weight": (layer["vocab_size"], hidden),
        "fc.weight": (hidden, num_aux * hidden),
        "layers.0.hidden_norm.weight": (hidden,),
        "layers.0.input_layernorm.weight": (hidden,),
        "layers.0.self_attn.q_proj.weight": (q, 2 * hidden),
        "layers.0.self_attn.k_proj.weight": (kv, 2 * hidden),
        "layers.0.self_attn.v_proj.weight": (kv, 2 * hidden),
        "layers.0.self_attn.o_proj.weight": (hidden, q),
        "layers.0.post_attention_layernorm.weight": (hidden,),
        "layers.0.mlp.gate_proj.weight": (inter, hidden),
        "layers.0.mlp.up_proj.weight": (inter, hidden),
        "layers.0.mlp.down_proj.weight": (hidden, inter),
        "norm.weight": (hidden,),
        "lm_head.weight": (config["draft_vocab_size"], hidden),
    }
    if config.get("norm_before_fc"):
        shapes["input_norm.weight"] = (num_aux * hidden,)
    if config.get("fc_norm"):
        shapes.update({f"fc_norm.{i}.weight": (hidden,) for i in range(num_aux)})
    weights = {name: torch.randn(shape) for name, shape in shapes.items()}
    weights["d2t"] = torch.zeros(config["draft_vocab_size"], dtype=torch.int64)
    weights["t2d"] = torch.zeros(layer["vocab_size"], dtype=torch.bool)
    return weights


class TestSpeculatorsFormat(CustomTestCase):
    """EAGLE-3 drafters saved by the speculators library load as LlamaForCausalLMEagle3:
    their config through get_config, their weights under their own names."""

    @classmethod
    def setUpClass(cls):
        cls.folders = ConfigFolders()

    @classmethod
    def tearDownClass(cls):
        cls.folders.cleanup()

    def test_the_current_and_the_early_form_load(self):
        # The format's ids index the target's hidden states; SGLang's name the layer
        # whose output is read: hidden states [1, 3, 5, 6] are layers [0, 2, 4, 5].
        for architecture, layer_ids, sglang_ids, num_aux in (
            ("Eagle3DraftModel", [1, 3, 5, 6], [0, 2, 4, 5], 4),
            ("Eagle3Speculator", None, None, DEFAULT_NUM_AUX),
        ):
            config = speculators_eagle3(
                layer_ids, architectures=[architecture], norm_before_residual=True
            )
            with self.subTest(architecture=architecture):
                draft = self.folders.model_config(config, is_draft_model=True)
                hf_config = draft.hf_config
                self.assertEqual(hf_config.architectures, ["LlamaForCausalLMEagle3"])
                self.assertEqual(draft.hidden_size, 256)
                self.assertEqual(draft.dtype, torch.float16)
                self.assertEqual(hf_config.draft_vocab_size, 512)
                self.assertTrue(hf_config.norm_before_residual)
                self.assertFalse(hf_config.norm_output)
                self.assertFalse(hasattr(hf_config, "target_hidden_size"))
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), sglang_ids
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_what_cannot_be_served_is_refused_naming_the_key(self):
        layer = speculators_eagle3()["transformer_layer_config"]
        refused = {
            "transformer_layer_config.model_type": speculators_eagle3(
                transformer_layer_config={**layer, "model_type": "qwen3"}
            ),
            "transformer_layer_config.num_hidden_layers": speculators_eagle3(
                transformer_layer_config={**layer, "num_hidden_layers": 2}
            ),
            "speculators_config.algorithm": speculators_eagle3(
                speculators_config={"algorithm": "mlp"}
            ),
            "fc_norm": speculators_eagle3(norm_before_fc=True, fc_norm=True),
        }
        for key, config in refused.items():
            with self.subTest(key=key):
                path = self.folders.write(config)
                with self.assertRaises(ValueError) as raised:
                    get_config(path, trust_remote_code=False)
                self.assertIn(f"{key}=", str(raised.exception))
                self.assertIn(path, str(raised.exception))

    def test_every_weight_loads_under_its_speculators_name(self):
        for variant, num_aux in (("norm_before_fc", 4), ("fc_norm", 4), (None, 3)):
            config = speculators_eagle3([1, 3, 5, 6] if num_aux == 4 else None)
            if variant:
                config[variant] = True
            weights = speculators_weights(config, num_aux)
            with self.subTest(variant=variant, num_aux=num_aux), one_cpu_rank():
                model = LlamaForCausalLMEagle3(
                    get_config(self.folders.write(config), trust_remote_code=False)
                )
                for param in model.parameters():
                    param.data.fill_(float("nan"))
                model.load_weights(iter(weights.items()))
                unloaded = [
                    name
                    for name, param in model.named_parameters()
                    if param.isnan().any()
                ]
                self.assertEqual(unloaded, [])
                attention = model.model.midlayer.self_attn
                torch.testing.assert_close(
                    attention.qkv_proj.weight,
                    torch.cat(
                        [
                            weights[f"layers.0.self_attn.{name}_proj.weight"]
                            for name in "qkv"
                        ]
                    ),
                )
                self.assertEqual(model.model.fc.in_features, num_aux * 256)

    def test_a_config_autoconfig_reads_is_read_once(self):
        # The format is detected where AutoConfig reads the config: a target's
        # config.json is not read again to look for it.
        from transformers import PretrainedConfig

        path = self.folders.write(llama())
        read = PretrainedConfig.get_config_dict
        with mock.patch.object(
            PretrainedConfig, "get_config_dict", side_effect=read
        ) as reads:
            config = get_config(path, trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLM"])
        self.assertEqual(reads.call_count, 1)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
