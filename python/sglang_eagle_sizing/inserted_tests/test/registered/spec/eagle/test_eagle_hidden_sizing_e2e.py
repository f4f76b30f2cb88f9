"""End-to-end check of the EAGLE hidden-state sizing on two GPUs, with a rank left idle.

Serves Llama-3.1-8B-Instruct (bfloat16) with its EAGLE-3 drafter (float16) at
``--dtype auto``, so the two models keep different dtypes, under DP attention
(``--tp-size 2 --dp-size 2 --enable-dp-attention``), once with the v1 worker
(``--disable-overlap-schedule``) and once with the v2 worker. One request at a time
leaves one DP rank with no request: that rank runs idle batches, whose inputs are the
idle inputs the sizing contract builds (``EAGLEWorkerV2.forward_batch_generation``,
``EAGLEWorker.forward_draft_extend_after_decode`` after ``EagleVerifyInput.verify``).

Without one dtype for the hidden states, ``--dtype auto`` feeds the target's bfloat16
hidden states to the float16 drafter's ``fc`` (``llama_eagle3.py``), which raises at the
first request.

Needs two CUDA GPUs and the weights of both models. It has not been run on a GPU yet:
only its imports, its registration and the server arguments it builds were checked.
"""

from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=500, suite="stage-b-test-2-gpu-large")

import concurrent.futures
import unittest
from typing import List

import requests
from transformers import AutoConfig

from sglang.test.server_fixtures.eagle_fixture import EagleServerBase
from sglang.test.test_utils import (
    DEFAULT_DRAFT_MODEL_EAGLE3,
    DEFAULT_TARGET_MODEL_EAGLE3,
)

SPEC_STEPS = 3
SPEC_TOPK = 1  # the v2 worker runs with top-k 1 only
SPEC_DRAFT_TOKENS = 4
MAX_RUNNING_REQUESTS = 16
#: Seconds one request may take; a hung server fails the test instead of the job.
REQUEST_TIMEOUT = 120


def dp_attention_server_args(spec_v2: bool) -> List[str]:
    """Launch arguments besides EagleServerBase's speculative ones.

    ``--dtype auto``: each model keeps its own dtype. CUDA graphs stay on and cover every
    batch size sent. Without ``--disable-overlap-schedule`` 0.5.11 serves EAGLE-3 with
    the v2 worker.
    """
    args = [
        "--dtype",
        "auto",
        "--tp-size",
        "2",
        "--dp-size",
        "2",
        "--enable-dp-attention",
        "--max-running-requests",
        str(MAX_RUNNING_REQUESTS),
        "--cuda-graph-max-bs",
        str(MAX_RUNNING_REQUESTS),
    ]
    if not spec_v2:
        args.append("--disable-overlap-schedule")
    return args


def config_dtype(model: str) -> str:
    """The dtype a model's config.json declares (``torch_dtype`` or ``dtype``)."""
    config = AutoConfig.from_pretrained(model)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(dtype).replace("torch.", "")


class DpAttentionIdleRankMixin:
    """Tests for one server; ``spec_v2`` picks the worker."""

    target_model = DEFAULT_TARGET_MODEL_EAGLE3
    draft_model = DEFAULT_DRAFT_MODEL_EAGLE3
    spec_algo = "EAGLE3"
    spec_steps = SPEC_STEPS
    spec_topk = SPEC_TOPK
    spec_tokens = SPEC_DRAFT_TOKENS
    spec_v2: bool
    accept_length_floor = 2.0

    @classmethod
    def setUpClass(cls):
        cls.extra_args = dp_attention_server_args(cls.spec_v2)
        super().setUpClass()

    def generate(self, text: str, max_new_tokens: int) -> dict:
        response = requests.post(
            self.base_url + "/generate",
            json={
                "text": text,
                "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens},
            },
            timeout=REQUEST_TIMEOUT,
        )
        self.assertEqual(response.status_code, 200, response.text)
        return response.json()

    def assert_server_alive(self):
        self.assertIsNone(self.process.poll(), "the server exited")

    def test_a_the_models_keep_different_dtypes(self):
        """The premise: at --dtype auto the drafter runs in float16, the target in
        bfloat16 (else this test checks nothing 0.5.11 gets wrong)."""
        self.assertEqual(config_dtype(self.draft_model), "float16")
        self.assertEqual(config_dtype(self.target_model), "bfloat16")

    def test_b_one_request_leaves_a_rank_idle(self):
        for _ in range(3):
            out = self.generate("The capital of France is", 16)
            self.assertIn("Paris", out["text"])
        self.assert_server_alive()

    def test_c_batches_that_finish_at_the_first_verify(self):
        """Prefill gives each request its first token, the first verify its second: the
        draft-extend step after it runs on an idle batch on every rank."""
        prompts = [f"Count from {i} to {i + 5}:" for i in range(MAX_RUNNING_REQUESTS)]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(lambda p: self.generate(p, 2), prompts))
        for out in outs:
            self.assertEqual(out["meta_info"]["completion_tokens"], 2)
        self.assert_server_alive()

    def test_d_acceptance_length(self):
        self.generate("Write a short story about a lighthouse keeper.", 256)
        server_info = requests.get(
            self.base_url + "/server_info", timeout=REQUEST_TIMEOUT
        ).json()
        accept_length = server_info["internal_states"][0]["avg_spec_accept_length"]
        print(f"{self.__class__.__name__}: {accept_length=}")
        self.assertGreater(accept_length, self.accept_length_floor)
        self.assert_server_alive()


class TestEagle3DpAttentionIdleRankV1(DpAttentionIdleRankMixin, EagleServerBase):
    spec_v2 = False


class TestEagle3DpAttentionIdleRankV2(DpAttentionIdleRankMixin, EagleServerBase):
    spec_v2 = True


if __name__ == "__main__":
    unittest.main()
