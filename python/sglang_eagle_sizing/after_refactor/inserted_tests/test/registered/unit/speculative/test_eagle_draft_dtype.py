"""At --dtype auto an EAGLE draft model is built in its target's dtype: it reads the
target's hidden states as they are."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import sys
import unittest
from pathlib import Path

import torch

from sglang.srt.arg_groups.overrides import resolved_view
from sglang.srt.configs.model_config import ModelConfig

CURRENT_DIR = Path(__file__).resolve().parent
if str(CURRENT_DIR) not in sys.path:
    sys.path.insert(0, str(CURRENT_DIR))

from common import DRAFT, TARGET, DrafterTestCase

FLOAT16_TARGET = {**TARGET, "torch_dtype": "float16"}
BFLOAT16_DRAFT = {**DRAFT, "torch_dtype": "bfloat16"}
STANDALONE_DRAFT = {**TARGET, "torch_dtype": "bfloat16", "num_hidden_layers": 1}


class TestDraftDtype(DrafterTestCase):
    def _dtypes(self, draft, target=FLOAT16_TARGET, **kwargs):
        """(the resolved --dtype, the target's dtype, the draft model's dtype)."""
        server_args = self.server_args(draft, target=target, **kwargs)
        with self.published(server_args):
            return (
                resolved_view(server_args).dtype,
                ModelConfig.from_server_args(server_args).dtype,
                self.draft_model_config(server_args).dtype,
            )

    def test_a_drafter_saved_in_another_dtype_takes_the_targets(self):
        for algorithm in ("EAGLE3", "EAGLE"):
            draft = BFLOAT16_DRAFT if algorithm == "EAGLE3" else STANDALONE_DRAFT
            self.assertEqual(
                self._dtypes(draft, algorithm=algorithm),
                ("float16", torch.float16, torch.float16),
            )

    def test_a_drafter_in_the_targets_dtype_leaves_dtype_auto(self):
        self.assertEqual(
            self._dtypes({**DRAFT, "torch_dtype": "float16"}),
            ("auto", torch.float16, torch.float16),
        )

    def test_an_explicit_dtype_is_kept(self):
        self.assertEqual(
            self._dtypes(BFLOAT16_DRAFT, dtype="bfloat16"),
            ("bfloat16", torch.bfloat16, torch.bfloat16),
        )

    def test_standalone_keeps_its_own_dtype(self):
        # A STANDALONE drafter reads tokens, not the target's hidden states.
        self.assertEqual(
            self._dtypes(STANDALONE_DRAFT, algorithm="STANDALONE"),
            ("auto", torch.float16, torch.bfloat16),
        )


if __name__ == "__main__":
    unittest.main()
