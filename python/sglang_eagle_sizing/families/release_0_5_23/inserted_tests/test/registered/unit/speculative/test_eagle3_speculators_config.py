"""EAGLE-3 drafters saved by the speculators library load as LlamaForCausalLMEagle3,
read as vLLM reads the format; what the library computes otherwise is refused."""

import json
import re
import tempfile
import unittest
from pathlib import Path

from sglang.srt.utils.hf_transformers_utils import get_config
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 48,
    "num_attention_heads": 4,
    "num_hidden_layers": 6,
}
# As speculators writes it: no model_type, the decoder layer's config nested.
SPECULATORS_DRAFT = {
    "architectures": ["Eagle3DraftModel"],
    "speculators_model_type": "eagle3",
    "speculators_config": {"algorithm": "eagle3"},
    "transformer_layer_config": {**TARGET, "hidden_size": 64, "num_hidden_layers": 1},
    "draft_vocab_size": 96,
    "target_hidden_size": 48,
    "norm_before_residual": True,
}


class TestSpeculatorsConfig(CustomTestCase):
    def folder(self, config):
        """A new folder holding ``config`` (get_config caches a path's config)."""
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        (Path(folder.name) / "config.json").write_text(json.dumps(config))
        return folder.name

    def test_only_a_speculators_config_reads_as_llama_eagle3(self):
        config = get_config(self.folder(SPECULATORS_DRAFT), trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLMEagle3"])
        self.assertEqual((config.hidden_size, config.target_hidden_size), (64, 48))
        self.assertEqual(config.draft_vocab_size, 96)
        self.assertTrue(config.norm_before_residual)
        config = get_config(self.folder(TARGET), trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLM"])
        self.assertFalse(hasattr(config, "draft_vocab_size"))

    def test_the_drafter_is_named_by_speculators_model_type(self):
        # As vLLM reads the format: a speculators_config and no model_type (or a
        # null one), whose speculators_model_type names the drafter.
        draft = {**SPECULATORS_DRAFT, "model_type": None}
        config = get_config(self.folder(draft), trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLMEagle3"])
        unnamed = dict(SPECULATORS_DRAFT)
        del unnamed["speculators_model_type"]
        for draft, value in (
            (unnamed, None),
            ({**SPECULATORS_DRAFT, "speculators_model_type": "eagle"}, "eagle"),
        ):
            declared = re.escape(f"speculators_model_type={value!r}")
            with (
                self.subTest(value),
                self.assertRaisesRegex(ValueError, f"{declared}: only eagle3"),
            ):
                get_config(self.folder(draft), trust_remote_code=False)

    def test_an_absent_norm_before_residual_is_true(self):
        # As vLLM reads the format (the library writes the key for every drafter).
        draft = dict(SPECULATORS_DRAFT)
        del draft["norm_before_residual"]
        for flags, expected in (({}, True), ({"norm_before_residual": False}, False)):
            config = get_config(
                self.folder({**draft, **flags}), trust_remote_code=False
            )
            with self.subTest(flags):
                self.assertIs(config.norm_before_residual, expected)

    def test_a_qwen3_layer_is_refused_saying_what_the_library_computes(self):
        # The library drafts with a Qwen3 layer for it (none named: its default),
        # whose q_norm and k_norm LlamaForCausalLMEagle3 does not have.
        unnamed = dict(SPECULATORS_DRAFT["transformer_layer_config"])
        qwen3 = {**unnamed, "model_type": "qwen3"}
        del unnamed["model_type"]
        library = "the speculators library drafts with a Qwen3 decoder layer"
        norms = re.escape("(self_attn.q_norm, self_attn.k_norm) before RoPE")
        for layer, value in ((qwen3, "qwen3"), (unnamed, None)):
            draft = {**SPECULATORS_DRAFT, "transformer_layer_config": layer}
            declared = re.escape(f"transformer_layer_config.model_type={value!r}")
            with (
                self.subTest(value),
                self.assertRaisesRegex(ValueError, f"{declared}: {library}.*{norms}"),
            ):
                get_config(self.folder(draft), trust_remote_code=False)

    def test_a_config_with_a_model_type_is_read_as_it_says(self):
        # An SGLang EAGLE-3 config carrying a leftover speculators_config block.
        leftover = {
            **TARGET,
            "architectures": ["LlamaForCausalLMEagle3"],
            "speculators_config": {"algorithm": "eagle3"},
            "transformer_layer_config": {"model_type": "qwen3"},
        }
        config = get_config(self.folder(leftover), trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLMEagle3"])
        self.assertEqual(config.hidden_size, 48)


if __name__ == "__main__":
    unittest.main()
