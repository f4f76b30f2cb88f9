"""LlamaForCausalLMEagle3 computes the norm variants its config declares."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from unittest import mock

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.test.speculative.eagle_hidden_sizing.cpu_models import (
    draft_forward_batch,
    llama_eagle3_model,
    one_cpu_rank,
)


def attention_zeroed(model: LlamaForCausalLMEagle3):
    """The mid layer's attention contributes nothing: no attention backend runs here,
    and what the norm flags change is around it."""
    attention = model.model.midlayer.self_attn
    return mock.patch.object(
        attention,
        "forward",
        lambda positions, hidden_states, forward_batch: torch.zeros(
            (hidden_states.shape[0], attention.hidden_size)
        ),
    )


def with_random_weights(model: LlamaForCausalLMEagle3) -> LlamaForCausalLMEagle3:
    """SGLang's layers allocate their weights uninitialized: give every one a value."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.05 + 0.1)
    return model


class TestEagle3NormVariants(CustomTestCase):
    """LlamaForCausalLMEagle3 computes the norm variants its config declares; with none
    declared it computes what it did before."""

    def setUp(self):
        torch.manual_seed(0)
        self.features = torch.randn((2, 3 * 256))
        self.batch = draft_forward_batch(ForwardMode.DRAFT_EXTEND, self.features)

    def fc_input_read(self, model, features: torch.Tensor) -> torch.Tensor:
        return model.model.project_hidden_states(features, self.batch)

    def one_layer_scaled(self, factor: float) -> torch.Tensor:
        scaled = self.features.clone()
        scaled[:, :256] *= factor
        return scaled

    def test_norm_before_fc_normalizes_the_concatenation(self):
        model = llama_eagle3_model(norm_before_fc=True)
        self.assertEqual(tuple(model.model.input_norm.weight.shape), (3 * 256,))
        reference = self.fc_input_read(model, self.features)
        torch.testing.assert_close(
            self.fc_input_read(model, 4 * self.features), reference
        )
        changed = self.fc_input_read(model, self.one_layer_scaled(4))
        self.assertFalse(torch.allclose(changed, reference, atol=1e-3))

    def test_fc_norm_normalizes_each_aux_layer(self):
        model = llama_eagle3_model(fc_norm=True)
        self.assertEqual(len(model.model.fc_norm), 3)
        torch.testing.assert_close(
            self.fc_input_read(model, self.one_layer_scaled(4)),
            self.fc_input_read(model, self.features),
        )

    def test_without_the_flags_fc_reads_the_states_as_they_are(self):
        model = llama_eagle3_model()
        self.assertIsNone(model.model.input_norm)
        self.assertIsNone(model.model.fc_norm)
        torch.testing.assert_close(
            self.fc_input_read(model, 2 * self.features),
            2 * model.model.fc(self.features),
        )

    def test_norm_before_fc_in_eagle_config_normalizes_the_concatenation(self):
        model = llama_eagle3_model(eagle_config={"norm_before_fc": True})
        self.assertEqual(tuple(model.model.input_norm.weight.shape), (3 * 256,))
        torch.testing.assert_close(
            self.fc_input_read(model, 4 * self.features),
            self.fc_input_read(model, self.features),
        )

    def test_a_flag_set_in_both_places_must_agree(self):
        agreeing = llama_eagle3_model(
            norm_output=True, eagle_config={"norm_output": True}
        )
        self.assertTrue(agreeing.model.norm_output)
        with self.assertRaises(ValueError) as raised:
            llama_eagle3_model(
                norm_before_fc=False, eagle_config={"norm_before_fc": True}
            )
        self.assertIn("eagle_config.norm_before_fc=True", str(raised.exception))

    def test_both_fc_norms_are_refused_when_the_model_is_built(self):
        with self.assertRaises(ValueError) as raised:
            llama_eagle3_model(norm_before_fc=True, fc_norm=True)
        self.assertIn("norm_before_fc and fc_norm", str(raised.exception))

    def test_norm_before_residual_keeps_the_normed_hidden_states(self):
        hidden = torch.randn((2, 256))
        embeds = torch.randn((2, 256))
        positions = torch.tensor([0, 1])
        for flag in (False, True):
            model = with_random_weights(llama_eagle3_model(norm_before_residual=flag))
            layer = model.model.midlayer
            with self.subTest(norm_before_residual=flag), attention_zeroed(model):
                with one_cpu_rank():
                    _, residual = layer(positions, embeds, hidden, self.batch, None)
                    _, scaled = layer(positions, embeds, 5 * hidden, self.batch, None)
                if flag:
                    torch.testing.assert_close(residual, layer.hidden_norm(hidden))
                    torch.testing.assert_close(scaled, residual)
                else:
                    torch.testing.assert_close(residual, hidden)

    def test_norm_output_passes_the_normed_hidden_states_on(self):
        tokens = torch.tensor([1, 2])
        for flag in (False, True):
            model = with_random_weights(llama_eagle3_model(norm_output=flag))
            with self.subTest(norm_output=flag), attention_zeroed(model):
                with one_cpu_rank():
                    to_logits, (to_next_step,) = model.model(tokens, tokens, self.batch)
                self.assertEqual(torch.equal(to_next_step, to_logits), flag)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
