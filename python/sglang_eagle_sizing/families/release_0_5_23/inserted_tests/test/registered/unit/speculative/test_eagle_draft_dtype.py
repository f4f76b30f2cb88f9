"""At --dtype auto an EAGLE draft model is built in its target's dtype: it reads the
target's hidden states as they are."""

import json
import os
import tempfile
import unittest

import torch

from sglang.srt.arg_groups.overrides import resolved_view
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.runtime_context import (
    SpawnRanks,
    publish,
    restore_context,
    snapshot_context,
)
from sglang.srt.server_args import ServerArgs
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=18, suite="base-a-test-cpu")

# Tiny Llama configs (config only: no weights load).
TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 6,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "torch_dtype": "float16",
}
EAGLE3_DRAFT = {
    **TARGET,
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "target_hidden_size": 48,
}
STANDALONE_DRAFT = {**TARGET, "num_hidden_layers": 1, "torch_dtype": "bfloat16"}


class TestDraftDtype(CustomTestCase):
    def dtypes(self, draft, algorithm="EAGLE3", **kwargs):
        """(the resolved --dtype, the target's dtype, the draft model's dtype)."""
        # New folders each time: get_config caches a path's config.
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        target_path, draft_path = (
            os.path.join(folder.name, name) for name in ("target", "draft")
        )
        for path, config in ((target_path, TARGET), (draft_path, draft)):
            os.makedirs(path)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(config, f)
        server_args = ServerArgs(
            model_path=target_path,
            device="cpu",
            speculative_algorithm=algorithm,
            speculative_draft_model_path=draft_path,
            skip_tokenizer_init=True,
            **kwargs,
        )
        self.addCleanup(restore_context, snapshot_context())
        publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        return (
            resolved_view(server_args).dtype,
            ModelConfig.from_server_args(server_args).dtype,
            ModelConfig.from_server_args(
                server_args, model_path=draft_path, is_draft_model=True
            ).dtype,
        )

    def test_a_drafter_saved_in_another_dtype_takes_the_targets(self):
        bfloat16_eagle3 = {**EAGLE3_DRAFT, "torch_dtype": "bfloat16"}
        for algorithm, draft in (
            ("EAGLE3", bfloat16_eagle3),
            ("EAGLE", STANDALONE_DRAFT),
        ):
            with self.subTest(algorithm):
                self.assertEqual(
                    self.dtypes(draft, algorithm=algorithm),
                    ("float16", torch.float16, torch.float16),
                )

    def test_a_drafter_in_the_targets_dtype_leaves_dtype_auto(self):
        self.assertEqual(
            self.dtypes(EAGLE3_DRAFT), ("auto", torch.float16, torch.float16)
        )

    def test_an_explicit_dtype_is_kept(self):
        self.assertEqual(
            self.dtypes({**EAGLE3_DRAFT, "torch_dtype": "bfloat16"}, dtype="bfloat16"),
            ("bfloat16", torch.bfloat16, torch.bfloat16),
        )

    def test_standalone_keeps_its_own_dtype(self):
        # A STANDALONE drafter reads tokens, not the target's hidden states.
        self.assertEqual(
            self.dtypes(STANDALONE_DRAFT, algorithm="STANDALONE"),
            ("auto", torch.float16, torch.bfloat16),
        )


if __name__ == "__main__":
    unittest.main()
