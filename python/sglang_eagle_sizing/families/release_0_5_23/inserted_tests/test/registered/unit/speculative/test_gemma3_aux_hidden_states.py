"""EAGLE-3 on Gemma-3: each captured aux hidden state is the layer's output (the branch its
decoder layer returns plus the residual stream beside it), and stays what it was captured
as when the next layer's fused add-norm updates its inputs in place."""

import unittest

import torch
from torch import nn

from sglang.srt.models.gemma3_causal import Gemma3TextModel
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

NUM_LAYERS = 3
HIDDEN = 4


class Layer(nn.Module):
    """Returns its branch and the residual stream apart, as Gemma3DecoderLayer does, and
    adds the two in place before its norm, as the fused add-norm does on CUDA."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.outputs = []

    def forward(self, hidden_states, residual=None, **kwargs):
        if residual is None:
            stream = hidden_states.clone()
        else:
            residual.add_(hidden_states)
            hidden_states.mul_(0.5)  # the normed input, written over the branch
            stream = residual
        branch = torch.tanh(stream * self.scale)
        self.outputs.append((stream + branch).clone())
        return branch, stream


def model():
    model = Gemma3TextModel.__new__(Gemma3TextModel)
    nn.Module.__init__(model)
    torch.manual_seed(0)
    model.embed_tokens = nn.Embedding(16, HIDDEN)
    model.rotary_emb = model.rotary_emb_local = lambda hidden_states, positions: None
    model.layers = nn.ModuleList(Layer(0.5 + i) for i in range(NUM_LAYERS))
    # the final norm's output is not the last layer's output
    model.norm = lambda hidden_states, residual: (
        nn.functional.normalize(hidden_states + residual, dim=-1),
        None,
    )
    return model


class TestGemma3AuxHiddenStates(CustomTestCase):
    def test_each_capture_is_the_layers_output(self):
        target = model()
        target.layers_to_capture = list(range(1, NUM_LAYERS + 1))
        input_ids = torch.tensor([1, 2, 3])
        with torch.no_grad():
            _, aux_hidden_states = target(input_ids, torch.arange(3), None)
        self.assertEqual(len(aux_hidden_states), NUM_LAYERS)
        for i, captured in enumerate(aux_hidden_states):
            with self.subTest(layer=i):
                # 0.5.23 captured the branch alone, which the next norm overwrote.
                torch.testing.assert_close(captured, target.layers[i].outputs[0])


if __name__ == "__main__":
    unittest.main()
