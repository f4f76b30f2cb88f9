"""Import the fork's GPU end-to-end test file and print, as JSON, the servers it would launch.

Runs with the patched SGLang first on the path and the libcuda stub loaded (``create_worker``
imports the worker modules). Usage: ``python e2e_server_args_probe.py E2E_TEST_FILE``.

First the two tiny models the file writes (``write_tiny_models``, offline), read by SGLang's
``ModelConfig`` and checked by the patched tree's ``validate_eagle_draft_config``. For each
server class of the file: the launch arguments (EagleServerBase's speculative
arguments from the class attributes, then the class's extra arguments) parsed by SGLang's own
``ServerArgs`` command line, and the worker class ``SpeculativeAlgorithm.create_worker`` picks
for them. ``ServerArgs.__post_init__`` is not run: it needs an accelerator.
"""

import argparse
import importlib.util
import inspect
import json
import shutil
import sys
import tempfile


def launch_argv(cls, extra_args):
    """What EagleServerBase.setUpClass passes popen_launch_server, as a command line."""
    speculative = {
        "speculative-algorithm": cls.spec_algo,
        "speculative-draft-model-path": cls.draft_model,
        "speculative-num-steps": cls.spec_steps,
        "speculative-eagle-topk": cls.spec_topk,
        "speculative-num-draft-tokens": cls.spec_tokens,
        "mem-fraction-static": cls.mem_fraction_static,
    }
    argv = ["--model-path", cls.target_model]
    for name, value in speculative.items():
        argv.append(f"--{name}={value}")
    return argv + list(extra_args)


def main() -> None:
    spec = importlib.util.spec_from_file_location("fork_e2e_test", sys.argv[1])
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.eagle_info import validate_eagle_draft_config
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.test.server_fixtures.eagle_fixture import EagleServerBase

    folder = tempfile.mkdtemp()
    target_path, draft_path = e2e.write_tiny_models(folder)
    target = ModelConfig(target_path)
    draft = ModelConfig(draft_path, is_draft_model=True)
    validate_eagle_draft_config(SpeculativeAlgorithm.EAGLE3, draft, target)
    out = {
        "module_file": e2e.__file__,
        "servers": {},
        "models_under": folder,
        "models": [target_path, draft_path],
        "dtypes": [str(c.dtype).replace("torch.", "") for c in (target, draft)],
        "hidden_sizes": [target.hidden_size, draft.hidden_size],
        "aux_layer_ids": draft.hf_config.eagle_config["eagle_aux_hidden_state_layer_ids"],
        "validated": True,
    }
    for name, cls in inspect.getmembers(e2e, inspect.isclass):
        if not (issubclass(cls, EagleServerBase) and name.startswith("Test")):
            continue
        cls.target_model, cls.draft_model = target_path, draft_path
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        args = parser.parse_args(launch_argv(cls, e2e.dp_attention_server_args(cls.spec_v2)))
        algorithm = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
        out["servers"][name] = {
            "spec_v2": cls.spec_v2,
            "model_path": args.model_path,
            "speculative_algorithm": args.speculative_algorithm,
            "speculative_draft_model_path": args.speculative_draft_model_path,
            "speculative_eagle_topk": args.speculative_eagle_topk,
            "dtype": args.dtype,
            "tp_size": args.tensor_parallel_size,
            "dp_size": args.data_parallel_size,
            "enable_dp_attention": args.enable_dp_attention,
            "disable_overlap_schedule": args.disable_overlap_schedule,
            "disable_cuda_graph": args.disable_cuda_graph,
            "cuda_graph_max_bs": args.cuda_graph_max_bs,
            "max_running_requests": args.max_running_requests,
            "worker": algorithm.create_worker(args).__name__,
            "tear_down_waits": "wait_timeout" in inspect.getsource(EagleServerBase.tearDownClass)
            and "super().tearDownClass()" in inspect.getsource(cls.tearDownClass),
            "skip_tokenizer_init": args.skip_tokenizer_init,
            "tests": sorted(n for n in dir(cls) if n.startswith("test")),
        }
    out["request_timeout"] = e2e.REQUEST_TIMEOUT
    print("PROBE-JSON " + json.dumps(out))
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
