"""The target layers an EAGLE-3 target captures for its drafter, compared with
transformers' hidden states of the same model."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

from sglang.test.speculative.eagle_hidden_sizing.common import NO_AUX_EAGLE3, eagle3
from sglang.test.speculative.eagle_hidden_sizing.cpu_models import (
    CAPTURE_TARGET,
    TargetCaptureTestCase,
)


class TestTargetCapture(TargetCaptureTestCase):
    """The target ModelRunner's own ``__init__`` decides which layers the target captures
    for an EAGLE-3 drafter (it runs here up to ``model_specific_adjustment``: what
    follows is device set-up), its ``init_aux_hidden_state_capture`` tells the model, and
    the model's forward hands the drafter those hidden states. Each is compared with
    transformers' ``output_hidden_states`` of the same model (0: the embeddings, ``k``:
    the output of layer ``k - 1``)."""

    def test_the_drafters_layer_ids(self):
        """SGLang's ids name the layer whose output the drafter reads."""
        draft = eagle3(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 3, 6]})
        self.assertEqual(self.captured(draft), [1, 4, 7])

    def test_top_level_ids_name_hidden_states(self):
        """Ids at the top level (vLLM's key) are hidden-state indices, captured as
        declared; 0.5.11 ignored them and captured its default [2, 4, 5]."""
        draft = eagle3(eagle_aux_hidden_state_layer_ids=[1, 4, 7])
        self.assertEqual(self.captured(draft), [1, 4, 7])

    def test_eagle_config_comes_first(self):
        """Declared in both places: eagle_config's, as 0.5.11 captured."""
        draft = eagle3(
            eagle_aux_hidden_state_layer_ids=[2, 3, 4],
            eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 3, 6]},
        )
        self.assertEqual(self.captured(draft), [1, 4, 7])

    def test_default_layers_without_eagle_config(self):
        """The inputs of layers [2, L // 2, L - 3]."""
        self.assertEqual(self.captured(eagle3()), [2, 4, 5])

    def test_nothing_when_aux_is_off(self):
        self.assertEqual(self.captured(NO_AUX_EAGLE3), [])

    def test_ids_the_target_cannot_capture_are_refused(self):
        """Layer 7 of 8 has no layer after it to capture its output as an input: layer
        id 7 in eagle_config, hidden state 8 at the top level."""
        for key, draft in (
            (
                "eagle_config.",
                eagle3(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}),
            ),
            ("", eagle3(eagle_aux_hidden_state_layer_ids=[1, 4, 8])),
        ):
            with self.subTest(key=key), self.assertRaises(ValueError) as raised:
                self.start_target_runner(draft)
            message = str(raised.exception)
            self.assertIn(f"{key}eagle_aux_hidden_state_layer_ids=[1, 4, ", message)
            self.assertIn("a target of 8 layers", message)

    def test_a_target_class_without_eagle3_capture_is_refused(self):
        """Before any weights load; 0.5.11 loaded them, then raised AttributeError
        (set_eagle3_layers_to_capture). Without aux hidden states it captures nothing:
        served, as 0.5.11 did."""
        gemma = dict(
            CAPTURE_TARGET,
            architectures=["Gemma3ForCausalLM"],
            model_type="gemma3_text",
        )
        with self.assertRaises(ValueError) as raised:
            self.start_target_runner(eagle3(), gemma)
        self.assertEqual(
            str(raised.exception),
            "The target model Gemma3ForCausalLM does not capture EAGLE-3 aux hidden "
            "states (no set_eagle3_layers_to_capture): --speculative-algorithm EAGLE3 "
            "cannot serve it.",
        )
        runner = self.start_target_runner(NO_AUX_EAGLE3, gemma)
        self.assertFalse(runner.eagle_use_aux_hidden_state)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
