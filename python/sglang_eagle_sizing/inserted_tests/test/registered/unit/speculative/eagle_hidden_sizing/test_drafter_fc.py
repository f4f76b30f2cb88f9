"""LlamaForCausalLMEagle3's fc takes the aux layers the drafter declares."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import logging
import sys
import unittest
from pathlib import Path

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import validate_eagle_draft_config
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

CURRENT_DIR = Path(__file__).resolve().parent
if str(CURRENT_DIR) not in sys.path:
    sys.path.insert(0, str(CURRENT_DIR))

from cases import StartupValidationTestCase
from cpu_models import draft_forward_batch, llama_eagle3_model, one_cpu_rank


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


class TestStartupValidation(StartupValidationTestCase):
    """validate_eagle_draft_config: a drafter that cannot consume what the target
    produces stops the worker at start-up with one message naming the cause."""

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


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
