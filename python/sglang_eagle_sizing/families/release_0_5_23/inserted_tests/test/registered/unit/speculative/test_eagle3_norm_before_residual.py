"""norm_before_residual (in eagle_config or at the top level of the drafter's config,
as the speculators library writes it): the EAGLE-3 drafter's input layer carries the
target hidden states after hidden_norm as its residual, not before."""

import contextlib
import unittest
from types import SimpleNamespace
from unittest import mock

import torch
from transformers import LlamaConfig

from sglang.srt.models.llama_eagle3 import LlamaDecoderLayer
from sglang.srt.runtime_context import get_parallel
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=28, suite="base-a-test-cpu")

HIDDEN_SIZE = 64
TOKENS = 5


def draft_config(**flags):
    config = LlamaConfig(
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=1,
        vocab_size=128,
        rms_norm_eps=1e-6,
    )
    for key, value in flags.items():
        setattr(config, key, value)
    return config


@contextlib.contextmanager
def one_rank():
    group = SimpleNamespace(rank_in_group=0, world_size=1)
    with get_parallel().override(
        tp_group=group,
        attn_tp_group=group,
        tp_rank=0,
        tp_size=1,
        attn_tp_rank=0,
        attn_tp_size=1,
    ):
        yield


def randomize(module):
    """Random weights, the norms' away from 1 so that a skipped norm shows."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.5 * torch.randn_like(param))
            else:
                param.copy_(0.1 * torch.randn_like(param))
    return module


class ZeroAttention(torch.nn.Module):
    """Self-attention stand-in: adds nothing to the residual stream."""

    def forward(self, positions, hidden_states, forward_batch):
        return torch.zeros(
            hidden_states.shape[0], HIDDEN_SIZE, dtype=hidden_states.dtype
        )


class TestNormBeforeResidual(CustomTestCase):
    def carried_residual(self, layer_id=0, residual=None, **flags):
        # The attention (and its rotary embedding) is stubbed: with a zero attention
        # output the layer carries its input residual on.
        with one_rank(), torch.no_grad():
            with mock.patch("sglang.srt.models.llama.get_rope"):
                layer = randomize(LlamaDecoderLayer(draft_config(**flags), layer_id))
            layer.self_attn = ZeroAttention()
            torch.manual_seed(1)
            embeds = torch.randn(TOKENS, HIDDEN_SIZE)
            hidden_states = torch.randn(TOKENS, HIDDEN_SIZE)
            _, carried = layer(None, embeds, hidden_states, None, residual)
            return carried, hidden_states, layer.hidden_norm(hidden_states)

    def test_without_the_flag_the_residual_is_the_raw_hidden_states(self):
        carried, raw, normed = self.carried_residual()
        torch.testing.assert_close(carried, raw)
        self.assertFalse(torch.allclose(carried, normed))

    def test_with_the_flag_the_residual_is_normed(self):
        for flags in (
            {"norm_before_residual": True},
            {"eagle_config": {"norm_before_residual": True}},
        ):
            carried, raw, normed = self.carried_residual(**flags)
            torch.testing.assert_close(carried, normed, msg=str(flags))
            self.assertFalse(torch.allclose(carried, raw), flags)

    def test_a_later_layer_is_unchanged(self):
        residual = torch.randn(TOKENS, HIDDEN_SIZE)
        for flag in (False, True):
            carried, raw, _ = self.carried_residual(
                layer_id=1, residual=residual, norm_before_residual=flag
            )
            torch.testing.assert_close(carried, raw + residual)


if __name__ == "__main__":
    unittest.main()
