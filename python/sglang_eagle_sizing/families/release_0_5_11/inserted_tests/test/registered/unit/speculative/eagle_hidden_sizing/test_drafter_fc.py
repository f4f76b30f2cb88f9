"""LlamaForCausalLMEagle3's fc takes the aux layers the drafter declares."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")

import json
import logging
import os
import subprocess
import sys
import unittest

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import validate_eagle_draft_config
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.speculative.eagle_hidden_sizing.cases import StartupValidationTestCase
from sglang.test.speculative.eagle_hidden_sizing.common import eagle3
from sglang.test.speculative.eagle_hidden_sizing.cpu_models import (
    draft_forward_batch,
    llama_eagle3_model,
    one_cpu_rank,
)


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

    def test_building_the_model_imports_no_scheduler_module(self):
        """llama_eagle3.py reads the drafter's aux layers with the parser of spec_info.py:
        building the model, in a fresh interpreter, leaves eagle_info.py (which imports
        schedule_batch and the model runner) unimported."""
        from sglang.srt.models import llama_eagle3

        root = os.path.dirname(llama_eagle3.__file__)
        for _ in range(3):  # sglang/srt/models -> the folder holding sglang/
            root = os.path.dirname(root)
        paths = [root, os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
        result = subprocess.run(
            [sys.executable, "-c", MODEL_BUILT_IN_A_CHILD, json.dumps(eagle3())],
            capture_output=True,
            text=True,
            env=env,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        *_, module_file, imported = result.stdout.splitlines()
        self.assertEqual(module_file, llama_eagle3.__file__)
        self.assertEqual(imported, "False")


#: Builds LlamaForCausalLMEagle3 from the config in argv[1] on one CPU rank (as
#: ``one_cpu_rank``), then prints the model file and whether eagle_info was imported.
MODEL_BUILT_IN_A_CHILD = """
import contextlib, json, sys
from types import SimpleNamespace
from unittest import mock
from sglang.test.test_utils import maybe_stub_sgl_kernel
maybe_stub_sgl_kernel()
from transformers import LlamaConfig
from sglang.srt import server_args
from sglang.srt.distributed import parallel_state
from sglang.srt.layers.rotary_embedding import base
from sglang.srt.models import llama_eagle3
class Unset:
    def __getattr__(self, name):
        return None
rank = SimpleNamespace(world_size=1, rank_in_group=0, rank=0, local_rank=0,
                       is_first_rank=True, is_last_rank=True)
with contextlib.ExitStack() as stack:
    for target, name, value in (
        (parallel_state, "_TP", rank), (parallel_state, "_PP", rank),
        (parallel_state, "_ATTN_TP", rank), (server_args, "_global_server_args", Unset()),
        (base, "_is_cpu", True),
    ):
        stack.enter_context(mock.patch.object(target, name, value))
    llama_eagle3.LlamaForCausalLMEagle3(LlamaConfig(**json.loads(sys.argv[1])))
print(llama_eagle3.__file__)
print("sglang.srt.speculative.eagle_info" in sys.modules)
"""


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
