"""EAGLE-3 drafters saved by the speculators library: their config, their weights and
the target layers they read."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from unittest import mock

import torch

from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.srt.speculative.spec_info import (
    get_eagle_aux_hidden_state_layer_ids,
    get_eagle_num_aux_hidden_states,
)
from sglang.srt.utils.hf_transformers_utils import get_config
from sglang.test.speculative.eagle_hidden_sizing.cases import HiddenSizeContractTestCase
from sglang.test.speculative.eagle_hidden_sizing.common import (
    DEFAULT_NUM_AUX,
    ConfigFolders,
    eagle3,
    llama,
    speculators_eagle3,
)
from sglang.test.speculative.eagle_hidden_sizing.cpu_models import (
    TargetCaptureTestCase,
    one_cpu_rank,
    speculators_weights,
)


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
        # whose output is read: hidden states [1, 3, 5, 6] are layers [0, 2, 4, 5]. An
        # absent norm_before_residual is true, as vLLM reads the format.
        for architecture, layer_ids, sglang_ids, num_aux, norm in (
            ("Eagle3DraftModel", [1, 3, 5, 6], [0, 2, 4, 5], 4, False),
            ("Eagle3Speculator", None, None, DEFAULT_NUM_AUX, None),
        ):
            config = speculators_eagle3(layer_ids, architectures=[architecture])
            if norm is not None:
                config["norm_before_residual"] = norm
            with self.subTest(architecture=architecture):
                draft = self.folders.model_config(config, is_draft_model=True)
                hf_config = draft.hf_config
                self.assertEqual(hf_config.architectures, ["LlamaForCausalLMEagle3"])
                self.assertEqual(draft.hidden_size, 256)
                self.assertEqual(draft.dtype, torch.float16)
                self.assertEqual(hf_config.draft_vocab_size, 512)
                self.assertIs(hf_config.norm_before_residual, norm is None)
                self.assertFalse(hf_config.norm_output)
                self.assertFalse(hasattr(hf_config, "target_hidden_size"))
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), sglang_ids
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_the_format_is_told_as_vllm_tells_it(self):
        # A speculators_config and no model_type, or a null one; a config with a
        # model_type is AutoConfig's, whatever else it holds.
        path = self.folders.write(speculators_eagle3(model_type=None))
        self.assertEqual(
            get_config(path, trust_remote_code=False).architectures,
            ["LlamaForCausalLMEagle3"],
        )
        path = self.folders.write(speculators_eagle3(model_type="not_a_model"))
        with self.assertRaisesRegex(ValueError, "not_a_model"):
            get_config(path, trust_remote_code=False)

    def test_what_cannot_be_served_is_refused_naming_the_key(self):
        # speculators_model_type names the drafter, as vLLM reads it; the library
        # drafts with a Qwen3 layer for qwen3, and for none named.
        layer = speculators_eagle3()["transformer_layer_config"]
        unnamed = {k: v for k, v in layer.items() if k != "model_type"}
        untyped = speculators_eagle3()
        del untyped["speculators_model_type"]
        qwen3 = (
            ": the speculators library drafts with a Qwen3 decoder layer, whose "
            "attention RMS-normalizes each head's queries and keys (self_attn.q_norm, "
            "self_attn.k_norm) before RoPE"
        )
        refused = {
            "transformer_layer_config.model_type='qwen3'"
            + qwen3: speculators_eagle3(
                transformer_layer_config={**layer, "model_type": "qwen3"}
            ),
            "transformer_layer_config.model_type=None"
            + qwen3: speculators_eagle3(transformer_layer_config=unnamed),
            "transformer_layer_config.num_hidden_layers=2": speculators_eagle3(
                transformer_layer_config={**layer, "num_hidden_layers": 2}
            ),
            "speculators_model_type='eagle': only eagle3": speculators_eagle3(
                speculators_model_type="eagle"
            ),
            "speculators_model_type=None: only eagle3": untyped,
            "fc_norm=True": speculators_eagle3(norm_before_fc=True, fc_norm=True),
        }
        for words, config in refused.items():
            path = self.folders.write(config)
            with self.subTest(words=words), self.assertRaises(ValueError) as raised:
                get_config(path, trust_remote_code=False)
            self.assertIn(f"{path}/config.json: {words}", str(raised.exception))

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


class TestHiddenSizeContract(HiddenSizeContractTestCase):
    """The classmethods on every real worker a sizing site hands them, against the
    widths and dtypes computed here from the config facts."""

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


class TestTargetCapture(TargetCaptureTestCase):
    """The target ModelRunner's own ``__init__`` decides which layers the target captures
    for an EAGLE-3 drafter (it runs here up to ``model_specific_adjustment``: what
    follows is device set-up), its ``init_aux_hidden_state_capture`` tells the model, and
    the model's forward hands the drafter those hidden states. Each is compared with
    transformers' ``output_hidden_states`` of the same model (0: the embeddings, ``k``:
    the output of layer ``k - 1``)."""

    def test_speculators_layer_ids(self):
        """The speculators library's ids index the target's hidden states as transformers
        does: the last layer's input is hidden state L - 1."""
        for layer_ids in ([1, 3, 5], [2, 5, 7]):
            with self.subTest(layer_ids=layer_ids):
                draft = speculators_eagle3(layer_ids)
                self.assertEqual(self.captured(draft), layer_ids)

    def test_speculators_ids_the_target_cannot_capture_are_refused(self):
        """Hidden state 0 is the embeddings, hidden state L the final one: a target's
        forward captures neither. The error names the ids as the config declares them,
        in the words of the same ids at the top level of an EAGLE-3 config.
        """
        for layer_ids, expected in (
            ([0, 4, 7], "indices of the target's hidden states from 1"),
            ([1, 4, 8], "index 8, after its last layer, is not captured"),
        ):
            for draft in (
                speculators_eagle3(layer_ids),
                eagle3(eagle_aux_hidden_state_layer_ids=layer_ids),
            ):
                with (
                    self.subTest(layer_ids=layer_ids, draft=draft["architectures"]),
                    self.assertRaises(ValueError) as raised,
                ):
                    self.start_target_runner(draft)
                declared = f"Invalid eagle_aux_hidden_state_layer_ids={layer_ids} in"
                self.assertIn(declared, str(raised.exception))
                self.assertIn(expected, str(raised.exception))


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
