"""End-to-end check of the EAGLE-3 hidden-state sizes on two GPUs, with a DP rank left idle.

Serves a tiny Llama target (bfloat16) with a tiny EAGLE-3 drafter (float16) at
``--dtype auto``, so the two configs give different dtypes, under DP attention
(``--tp-size 2 --dp-size 2 --enable-dp-attention``), once with the v1 worker
(``--disable-overlap-schedule``) and once with the v2 worker. Both models are written
by the test into a temporary folder with random weights: nothing is downloaded. The
drafter is narrower than its target (``target_hidden_size``) and names four target
layers, so the draft width, the extend width (4 x the target's) and the target's width
all differ. One request at a time leaves one DP rank with no request: that rank runs
idle batches, whose inputs are sized by the draft model's and the extend contracts.

Random weights accept few draft tokens; the test checks that each server serves every
request to its end and stays up, not the acceptance of a trained drafter.
"""

from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=300, suite="stage-b-test-2-gpu-large")

import concurrent.futures
import json
import os
import tempfile
import unittest
from typing import List, Tuple

import requests
import torch

from sglang.test.server_fixtures.eagle_fixture import EagleServerBase

SPEC_STEPS = 3
SPEC_TOPK = 1  # the v2 worker runs with top-k 1 only
SPEC_DRAFT_TOKENS = 4
MAX_RUNNING_REQUESTS = 16
#: Seconds one request may take; a hung server fails the test instead of the job.
REQUEST_TIMEOUT = 120

TARGET_HIDDEN_SIZE = 256
DRAFT_HIDDEN_SIZE = 128
TARGET_LAYERS = 8
AUX_LAYER_IDS = [1, 3, 5, 6]
VOCAB_SIZE = 1024


def _llama_config(hidden_size: int, num_layers: int, dtype: str) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
    }


def _save(folder: str, config: dict, tensors: dict) -> None:
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(
        {name: tensor.contiguous() for name, tensor in tensors.items()},
        os.path.join(folder, "model.safetensors"),
    )


def write_tiny_models(folder: str) -> Tuple[str, str]:
    """A tiny Llama target (bfloat16) and a tiny EAGLE-3 drafter for it (float16), with
    random weights and no tokenizer, written under ``folder``: (target, drafter)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    target_path = os.path.join(folder, "target")
    config = _llama_config(TARGET_HIDDEN_SIZE, TARGET_LAYERS, "bfloat16")
    target = LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16)
    _save(target_path, config, target.state_dict())

    draft_path = os.path.join(folder, "draft")
    hidden, inter = DRAFT_HIDDEN_SIZE, 2 * DRAFT_HIDDEN_SIZE
    q_width, kv_width = 4 * 64, 2 * 64
    config = _llama_config(hidden, 1, "float16")
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        target_hidden_size=TARGET_HIDDEN_SIZE,
        draft_vocab_size=VOCAB_SIZE,
        eagle_config={"eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS},
    )
    # A drafter narrower than its target keeps its own embedding.
    shapes = {
        "embed_tokens.weight": (VOCAB_SIZE, hidden),
        "fc.weight": (hidden, len(AUX_LAYER_IDS) * TARGET_HIDDEN_SIZE),
        "norm.weight": (hidden,),
        "lm_head.weight": (VOCAB_SIZE, hidden),
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.post_attention_layernorm.weight": (hidden,),
        "midlayer.self_attn.q_proj.weight": (q_width, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv_width, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv_width, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, q_width),
        "midlayer.mlp.gate_proj.weight": (inter, hidden),
        "midlayer.mlp.up_proj.weight": (inter, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, inter),
    }
    tensors = {
        name: (0.02 * torch.randn(shape)).to(torch.float16)
        for name, shape in shapes.items()
    }
    for name in shapes:
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shapes[name], dtype=torch.float16)
    _save(draft_path, config, tensors)
    return target_path, draft_path


def dp_attention_server_args(spec_v2: bool) -> List[str]:
    """Launch arguments besides EagleServerBase's speculative ones.

    ``--dtype auto``: each model config gives its own dtype. CUDA graphs stay on and
    cover every batch size sent. Without ``--disable-overlap-schedule`` EAGLE-3 runs
    with the v2 worker. The models come without a tokenizer: requests send token ids.
    """
    args = [
        "--dtype",
        "auto",
        "--skip-tokenizer-init",
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


class DpAttentionIdleRankMixin:
    """Tests for one server; ``spec_v2`` picks the worker. Each test stands alone."""

    spec_algo = "EAGLE3"
    spec_steps = SPEC_STEPS
    spec_topk = SPEC_TOPK
    spec_tokens = SPEC_DRAFT_TOKENS
    spec_v2: bool

    @classmethod
    def setUpClass(cls):
        cls.models = tempfile.TemporaryDirectory()
        cls.target_model, cls.draft_model = write_tiny_models(cls.models.name)
        cls.extra_args = dp_attention_server_args(cls.spec_v2)
        try:
            super().setUpClass()
        except BaseException:
            cls.models.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.models.cleanup()

    def generate(self, input_ids: List[int], max_new_tokens: int) -> dict:
        response = requests.post(
            self.base_url + "/generate",
            json={
                "input_ids": input_ids,
                "sampling_params": {
                    "temperature": 0,
                    "max_new_tokens": max_new_tokens,
                    "ignore_eos": True,
                },
            },
            timeout=REQUEST_TIMEOUT,
        )
        self.assertEqual(response.status_code, 200, response.text)
        return response.json()

    def assert_server_alive(self):
        self.assertIsNone(self.process.poll(), "the server exited")

    def test_one_request_leaves_a_rank_idle(self):
        for start in range(3):
            out = self.generate(list(range(3 + start, 20 + start)), 16)
            self.assertEqual(out["meta_info"]["completion_tokens"], 16)
        self.assert_server_alive()

    def test_batches_that_finish_at_the_first_verify(self):
        """Prefill gives each request its first token, the first verify its second: the
        draft-extend step after it runs on an idle batch on every rank."""
        prompts = [list(range(3 + i, 12 + i)) for i in range(MAX_RUNNING_REQUESTS)]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(lambda p: self.generate(p, 2), prompts))
        for out in outs:
            self.assertEqual(out["meta_info"]["completion_tokens"], 2)
        self.assert_server_alive()

    def test_acceptance_length_is_reported_in_range(self):
        self.generate(list(range(3, 40)), 64)
        server_info = requests.get(
            self.base_url + "/server_info", timeout=REQUEST_TIMEOUT
        ).json()
        accept_length = server_info["internal_states"][0]["avg_spec_accept_length"]
        self.assertGreaterEqual(accept_length, 1.0)
        self.assertLessEqual(accept_length, SPEC_DRAFT_TOKENS)
        self.assert_server_alive()


class TestEagle3DpAttentionIdleRankV1(DpAttentionIdleRankMixin, EagleServerBase):
    spec_v2 = False


class TestEagle3DpAttentionIdleRankV2(DpAttentionIdleRankMixin, EagleServerBase):
    spec_v2 = True


if __name__ == "__main__":
    unittest.main()
