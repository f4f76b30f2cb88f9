"""Import the fork's GPU end-to-end test file and print, as JSON, the server it would launch.

Runs with the patched SGLang first on the path and the libcuda stub loaded (``create_worker``
imports the worker modules). Usage: ``python e2e_server_args_probe.py E2E_TEST_FILE``.

For the v1 and the v2 server: the launch arguments the file builds, parsed by SGLang's own
``ServerArgs`` command line; the environment it sets, as SGLang's ``envs`` reads it; and the
worker class ``SpeculativeAlgorithm.create_worker`` picks for those arguments.
"""

import argparse
import importlib.util
import json
import os
import sys


def main() -> None:
    spec = importlib.util.spec_from_file_location("fork_e2e_test", sys.argv[1])
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)

    from sglang.srt.environ import envs
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    out = {"module_file": e2e.__file__, "servers": {}}
    for spec_v2 in (False, True):
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        args = parser.parse_args(
            ["--model-path", e2e.DEFAULT_TARGET_MODEL_EAGLE3, *e2e.eagle3_server_args(spec_v2)]
        )
        env = e2e.eagle3_server_env(spec_v2)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            spec_v2_enabled = envs.SGLANG_ENABLE_SPEC_V2.get()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        algorithm = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
        out["servers"]["v2" if spec_v2 else "v1"] = {
            "model_path": args.model_path,
            "speculative_algorithm": args.speculative_algorithm,
            "speculative_draft_model_path": args.speculative_draft_model_path,
            "speculative_eagle_topk": args.speculative_eagle_topk,
            "disable_overlap_schedule": args.disable_overlap_schedule,
            "disable_cuda_graph": args.disable_cuda_graph,
            "cuda_graph_max_bs": args.cuda_graph_max_bs,
            "max_running_requests": args.max_running_requests,
            "env_spec_v2": spec_v2_enabled,
            "worker": algorithm.create_worker(args).__name__,
        }
    out["defaults"] = [e2e.DEFAULT_TARGET_MODEL_EAGLE3, e2e.DEFAULT_DRAFT_MODEL_EAGLE3]
    print("PROBE-JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
