"""End-to-end check of the EAGLE hidden-state sizing contract on a GPU.

Serves EAGLE-3 (DEFAULT_TARGET_MODEL_EAGLE3 with DEFAULT_DRAFT_MODEL_EAGLE3) with the v1
worker (``--disable-overlap-schedule``) and with the v2 worker (overlap schedule), CUDA
graphs on, and drives the paths whose hidden-state sizes come from
``EagleDraftInput``/``EagleDraftExtendInput.hidden_size_for``: the draft and draft-extend
CUDA graphs, and batches whose requests all finish at their first verify, after which the
draft-extend step runs on an idle input (``max_new_tokens=2``: prefill gives the first
token, the first verify at least one more). One server cannot produce
the idle batches of DP attention; those idle inputs are covered by the CPU unit test
``test/registered/unit/speculative/test_eagle_hidden_sizing.py``.

It checks what a user sees: correct answers (a greedy fact, MMLU above a floor), an
acceptance length above a floor (``SpecDecodingMixin``'s single-request check and the
server's average), and no shape or dtype error in the server log.

Needs one CUDA GPU and the two models' weights. This file was written on a machine without
a GPU and has never been run; only its imports, its registration and the server arguments
it builds were checked there.
"""

from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=420, suite="stage-b-test-1-gpu-small")

import concurrent.futures
import os
import re
import tempfile
import unittest
from types import SimpleNamespace
from typing import Dict, List

import requests

from sglang.srt.utils import kill_process_tree
from sglang.test.kits.spec_decoding_kit import SpecDecodingMixin
from sglang.test.run_eval import run_eval
from sglang.test.test_utils import (
    DEFAULT_DRAFT_MODEL_EAGLE3,
    DEFAULT_TARGET_MODEL_EAGLE3,
    DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
    DEFAULT_URL_FOR_TEST,
    CustomTestCase,
    popen_launch_server,
)

SPEC_STEPS = 3
SPEC_TOPK = 1  # the v2 worker runs with top-k 1 only
SPEC_DRAFT_TOKENS = 4
MAX_RUNNING_REQUESTS = 16

# Errors a wrongly sized hidden-state tensor raises somewhere in the draft or
# draft-extend forward, or when a CUDA graph replays with a tensor of another shape.
SIZING_ERRORS = re.compile(
    r"size of tensor a .* must match the size of tensor b"
    r"|mat1 and mat2 shapes cannot be multiplied"
    r"|shape .* is invalid for input of size"
    r"|expected (?:both|all) .*same dtype"
    r"|expected scalar type"
    r"|The expanded size of the tensor",
    re.IGNORECASE,
)


def eagle3_server_args(spec_v2: bool) -> List[str]:
    """Launch arguments of the EAGLE-3 server; ``spec_v2``: the overlap-schedule worker.

    CUDA graphs stay on (no ``--disable-cuda-graph``) and cover every batch size the test
    sends, so the draft and draft-extend graph buffers are the ones used.
    """
    args = [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        DEFAULT_DRAFT_MODEL_EAGLE3,
        "--speculative-num-steps",
        str(SPEC_STEPS),
        "--speculative-eagle-topk",
        str(SPEC_TOPK),
        "--speculative-num-draft-tokens",
        str(SPEC_DRAFT_TOKENS),
        "--dtype",
        "float16",
        "--mem-fraction-static",
        "0.7",
        "--max-running-requests",
        str(MAX_RUNNING_REQUESTS),
        "--cuda-graph-max-bs",
        str(MAX_RUNNING_REQUESTS),
    ]
    if not spec_v2:
        args.append("--disable-overlap-schedule")
    return args


def eagle3_server_env(spec_v2: bool) -> Dict[str, str]:
    """Environment of the EAGLE-3 server: SGLANG_ENABLE_SPEC_V2 says which worker runs."""
    return {"SGLANG_ENABLE_SPEC_V2": "1" if spec_v2 else "0"}


class EagleHiddenSizingServerMixin(SpecDecodingMixin):
    """One EAGLE-3 server per class; ``spec_v2`` picks the worker."""

    spec_v2: bool
    # SpecDecodingMixin.test_bs_1_speed: acceptance length and tokens/s of one request
    num_accepted_drafts_thres = 2.0
    bs_1_speed_thres = 40
    mmlu_floor = 0.65

    @classmethod
    def setUpClass(cls):
        cls.model = DEFAULT_TARGET_MODEL_EAGLE3
        cls.base_url = DEFAULT_URL_FOR_TEST
        cls.log_dir = tempfile.TemporaryDirectory(prefix="eagle-hidden-sizing-")
        cls.stdout = open(os.path.join(cls.log_dir.name, "stdout.txt"), "w")
        cls.stderr = open(os.path.join(cls.log_dir.name, "stderr.txt"), "w")
        cls.process = popen_launch_server(
            cls.model,
            cls.base_url,
            timeout=DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
            other_args=eagle3_server_args(cls.spec_v2),
            env=eagle3_server_env(cls.spec_v2),
            return_stdout_stderr=(cls.stdout, cls.stderr),
        )

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "process", None) is not None:
            kill_process_tree(cls.process.pid)
        for name in ("stdout", "stderr"):
            if getattr(cls, name, None) is not None:
                getattr(cls, name).close()
        if getattr(cls, "log_dir", None) is not None:
            cls.log_dir.cleanup()

    def generate(self, text: str, max_new_tokens: int) -> dict:
        response = requests.post(
            self.base_url + "/generate",
            json={
                "text": text,
                "sampling_params": {
                    "temperature": 0,
                    "max_new_tokens": max_new_tokens,
                },
            },
        )
        self.assertEqual(response.status_code, 200, response.text)
        return response.json()

    def generate_concurrently(self, requests_: List[tuple]) -> List[dict]:
        with concurrent.futures.ThreadPoolExecutor(len(requests_)) as pool:
            return list(pool.map(lambda r: self.generate(*r), requests_))

    def assert_server_healthy(self):
        self.assertIsNone(self.process.poll(), "the server exited")
        for stream in (self.stdout, self.stderr):
            stream.flush()
            with open(stream.name) as f:
                log = f.read()
            match = SIZING_ERRORS.search(log)
            self.assertIsNone(
                match, f"{stream.name}: {match.group(0) if match else ''}"
            )

    def test_a_greedy_answer(self):
        out = self.generate("The capital of France is", 16)
        self.assertIn("Paris", out["text"])
        self.assert_server_healthy()

    def test_b_batches_that_finish_at_the_first_verify(self):
        """Prefill gives each request its first token and the first verify at least
        its second: verify finishes the whole batch, and the draft-extend step that
        follows runs on an idle input."""
        prompts = [f"Count from {i} to {i + 5}:" for i in range(MAX_RUNNING_REQUESTS)]
        for _ in range(3):
            outs = self.generate_concurrently([(p, 2) for p in prompts])
            for out in outs:
                self.assertEqual(out["meta_info"]["completion_tokens"], 2)
        self.assert_server_healthy()

    def test_c_batches_where_some_requests_finish(self):
        lengths = [1, 2, 3, 5, 8, 16, 32, 64] * 2
        outs = self.generate_concurrently(
            [(f"Write a story about the number {n}.", n) for n in lengths]
        )
        for out, n in zip(outs, lengths):
            self.assertLessEqual(out["meta_info"]["completion_tokens"], n)
            self.assertGreaterEqual(out["meta_info"]["completion_tokens"], 1)
        self.assert_server_healthy()

    def test_d_accuracy_and_acceptance_length(self):
        """MMLU through the spec-decoding server, then the server's own average
        acceptance length over everything this class sent."""
        metrics = run_eval(
            SimpleNamespace(
                base_url=self.base_url,
                model=self.model,
                eval_name="mmlu",
                num_examples=64,
                num_threads=MAX_RUNNING_REQUESTS,
            )
        )
        self.assertGreaterEqual(metrics["score"], self.mmlu_floor)

        server_info = requests.get(self.base_url + "/server_info").json()
        accept_length = server_info["internal_states"][0]["avg_spec_accept_length"]
        print(f"{self.__class__.__name__}: {accept_length=}")
        self.assertGreater(accept_length, self.num_accepted_drafts_thres)
        self.assert_server_healthy()


class TestEagleHiddenSizingV1(EagleHiddenSizingServerMixin, CustomTestCase):
    spec_v2 = False


class TestEagleHiddenSizingV2(EagleHiddenSizingServerMixin, CustomTestCase):
    spec_v2 = True


if __name__ == "__main__":
    unittest.main()
