"""The EAGLE-3 drafter computes the norm variants its config declares (norm_before_residual,
norm_before_fc, fc_norm, norm_output), each as the speculators library trains it."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import contextlib
import unittest
from types import SimpleNamespace
from unittest import mock

import torch
from transformers import LlamaConfig

from sglang.srt.models.llama_eagle3 import LlamaDecoderLayer, LlamaModel
from sglang.srt.runtime_context import get_parallel
from sglang.test.test_utils import CustomTestCase

HIDDEN_SIZE = 64
TOKENS = 5


def draft_config(num_hidden_layers=1, **flags):
    config = LlamaConfig(
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=num_hidden_layers,
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


class RecordingLayer(torch.nn.Module):
    """Decoder layer stand-in: records the hidden states fc feeds it and returns them
    with a residual of its own."""

    def forward(self, positions, embeds, hidden_states, forward_batch, residual):
        self.hidden_states = hidden_states
        self.residual = torch.linspace(-1, 1, hidden_states.numel()).view_as(
            hidden_states
        )
        return hidden_states, self.residual


class TestInputLayerResidual(CustomTestCase):
    """norm_before_residual: the input layer's residual is the target hidden states
    after hidden_norm, not before."""

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


class TestModelNorms(CustomTestCase):
    """norm_before_fc, fc_norm (what fc reads) and norm_output (what the next draft step
    reads), through LlamaModel.forward with its decoder layer stubbed."""

    def run_model(self, num_aux=3, **flags):
        config = draft_config(
            num_hidden_layers=0,
            eagle_aux_hidden_state_layer_ids=list(range(num_aux)),
            **flags,
        )
        with one_rank(), torch.no_grad():
            model = randomize(LlamaModel(config))
            model.layers = torch.nn.ModuleList([RecordingLayer()])
            torch.manual_seed(2)
            self.aux = torch.randn(TOKENS, num_aux * HIDDEN_SIZE)
            embeds = torch.randn(TOKENS, HIDDEN_SIZE)
            batch = SimpleNamespace(spec_info=SimpleNamespace(hidden_states=self.aux))
            to_logits, (to_next_step,) = model(None, None, batch, input_embeds=embeds)
            return model, to_logits, to_next_step

    def fc_output(self, model):
        """What fc gave the decoder layer."""
        return model.layers[0].hidden_states

    def test_fc_reads_the_raw_aux_hidden_states_by_default(self):
        model, _, _ = self.run_model()
        torch.testing.assert_close(self.fc_output(model), model.fc(self.aux))

    def test_norm_before_fc_normalizes_the_concatenation(self):
        for flags in (
            {"norm_before_fc": True},
            {"eagle_config": {"norm_before_fc": True}},
        ):
            model, _, _ = self.run_model(**flags)
            norm = model.input_norm
            self.assertEqual(norm.weight.shape, (3 * HIDDEN_SIZE,))
            torch.testing.assert_close(
                self.fc_output(model), model.fc(norm(self.aux)), msg=str(flags)
            )

    def test_fc_norm_normalizes_each_aux_layer(self):
        for num_aux in (3, 4):
            model, _, _ = self.run_model(num_aux=num_aux, fc_norm=True)
            self.assertEqual(len(model.fc_norm), num_aux)
            chunks = self.aux.split(HIDDEN_SIZE, dim=-1)
            normed = torch.cat([n(c) for n, c in zip(model.fc_norm, chunks)], dim=-1)
            torch.testing.assert_close(self.fc_output(model), model.fc(normed))

    def test_norm_output_carries_the_normed_hidden_states(self):
        for flag in (False, True):
            model, to_logits, to_next_step = self.run_model(norm_output=flag)
            layer = model.layers[0]
            pre_norm = layer.hidden_states + layer.residual
            torch.testing.assert_close(to_logits, model.norm(pre_norm))
            torch.testing.assert_close(
                to_next_step, model.norm(pre_norm) if flag else pre_norm, msg=str(flag)
            )


if __name__ == "__main__":
    unittest.main()
