"""Real SGLang models built on the CPU: one tensor- and pipeline-parallel rank without a
process group, the EAGLE-3 draft model of llama_eagle3.py, and a tiny Llama target whose
captured hidden states are compared with transformers'."""

import contextlib
from types import SimpleNamespace
from typing import Dict, List, Optional
from unittest import mock

import torch

from sglang.srt import server_args as server_args_module
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.distributed import parallel_state
from sglang.srt.layers.rotary_embedding import base as rotary_embedding_base
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.models.llama import LlamaForCausalLM
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.test.speculative.eagle_hidden_sizing.common import (
    ConfigFolders,
    DraftModelLoaded,
    eagle3,
    llama,
    make_server_args,
)
from sglang.test.test_utils import CustomTestCase


class ServerArgsUnset:
    """Global server args for building a model outside a server: every field unset."""

    def __getattr__(self, name):
        return None


@contextlib.contextmanager
def one_cpu_rank():
    """One tensor- and pipeline-parallel rank without a process group, and RoPE's CPU
    path: what building a model's layers on a CPU needs. Restores what it sets."""
    one_rank = SimpleNamespace(
        world_size=1,
        rank_in_group=0,
        rank=0,
        local_rank=0,
        is_first_rank=True,
        is_last_rank=True,
    )
    with contextlib.ExitStack() as stack:
        for target, name, value in (
            (parallel_state, "_TP", one_rank),
            (parallel_state, "_PP", one_rank),
            (parallel_state, "_ATTN_TP", one_rank),
            (server_args_module, "_global_server_args", ServerArgsUnset()),
            (rotary_embedding_base, "_is_cpu", True),
        ):
            stack.enter_context(mock.patch.object(target, name, value))
        yield


def llama_eagle3_model(**fields) -> LlamaForCausalLMEagle3:
    """The real EAGLE-3 draft model of llama_eagle3.py, built on the CPU from a tiny
    config (random weights)."""
    from transformers import LlamaConfig

    config = eagle3(**fields)
    with one_cpu_rank():
        return LlamaForCausalLMEagle3(LlamaConfig(**config))


def draft_forward_batch(mode: ForwardMode, hidden_states: torch.Tensor):
    """What LlamaModel.forward reads of a batch before the mid layer."""
    return SimpleNamespace(
        forward_mode=mode,
        spec_info=SimpleNamespace(hidden_states=hidden_states),
        mm_input_embeds=None,
        contains_mm_inputs=lambda: False,
    )


#: The target whose capture is compared with transformers': float32, small enough to
#: build twice on a CPU.
CAPTURE_TARGET = llama(hidden_size=64, torch_dtype="float32")


def same_tiny_llama(config: dict):
    """One tiny Llama as transformers builds it and as SGLang loads its weights (by its
    own load_weights). Every o_proj is zero, so attention adds nothing: no attention
    backend runs here."""
    from transformers import LlamaConfig
    from transformers import LlamaForCausalLM as HFLlamaForCausalLM

    torch.manual_seed(0)
    reference = HFLlamaForCausalLM(LlamaConfig(**config)).eval()
    with torch.no_grad():
        for layer in reference.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
            layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    with one_cpu_rank():
        model = LlamaForCausalLM(LlamaConfig(**config))
        model.load_weights(iter(reference.state_dict().items()))
    return reference, model


class TargetCaptureTestCase(CustomTestCase):
    """Which of transformers' hidden states the target hands its drafter, through the
    target ModelRunner's own ``__init__`` and ``init_aux_hidden_state_capture``
    (``TestTargetCapture`` of test_target_capture.py and test_speculators_format.py)."""

    TOKENS = torch.tensor([3, 17, 99, 5])

    @classmethod
    def setUpClass(cls):
        cls.folders = ConfigFolders()
        cls.target_path = cls.folders.write(CAPTURE_TARGET)
        reference, cls.model = same_tiny_llama(CAPTURE_TARGET)
        with torch.no_grad():
            outputs = reference.model(cls.TOKENS[None], output_hidden_states=True)
        cls.hidden_states = [h[0] for h in outputs.hidden_states]

    @classmethod
    def tearDownClass(cls):
        cls.folders.cleanup()

    def start_target_runner(
        self, draft: dict, target: Optional[dict] = None
    ) -> ModelRunner:
        """The target ModelRunner's ``__init__``, run up to what follows the capture;
        ``target``: another target config than ``CAPTURE_TARGET``."""
        target_path = self.folders.write(target) if target else self.target_path
        server_args = make_server_args(target_path, self.folders.write(draft), "EAGLE3")
        runner = ModelRunner.__new__(ModelRunner)

        def stop(self):
            raise DraftModelLoaded

        with mock.patch.object(ModelRunner, "model_specific_adjustment", stop):
            with self.assertRaises(DraftModelLoaded):
                runner.__init__(
                    model_config=ModelConfig.from_server_args(server_args),
                    mem_fraction_static=0.5,
                    gpu_id=0,
                    tp_rank=0,
                    tp_size=1,
                    moe_ep_rank=0,
                    moe_ep_size=1,
                    pp_rank=0,
                    pp_size=1,
                    nccl_port=0,
                    server_args=server_args,
                )
        return runner

    def captured(self, draft: dict) -> List[Optional[int]]:
        """Which of transformers' hidden states the target hands the drafter."""
        runner = self.start_target_runner(draft)
        runner.model = self.model
        self.model.model.layers_to_capture = []
        runner.init_aux_hidden_state_capture()

        def no_attention(positions, hidden_states, forward_batch):
            return torch.zeros_like(hidden_states)

        with contextlib.ExitStack() as stack, torch.no_grad():
            for layer in self.model.model.layers:
                stack.enter_context(
                    mock.patch.object(layer.self_attn, "forward", no_attention)
                )
            stack.enter_context(one_cpu_rank())
            outputs = self.model.model(
                self.TOKENS, torch.arange(len(self.TOKENS)), SimpleNamespace()
            )
        aux_hidden_states = outputs[1] if isinstance(outputs, tuple) else []
        return [
            next(
                (
                    k
                    for k, reference in enumerate(self.hidden_states)
                    if torch.allclose(aux, reference, atol=1e-5)
                ),
                None,
            )
            for aux in aux_hidden_states
        ]


def speculators_weights(config: dict, num_aux: int) -> Dict[str, torch.Tensor]:
    """Random weights under the names and shapes the speculators library saves."""
    layer = config["transformer_layer_config"]
    hidden, inter = layer["hidden_size"], layer["intermediate_size"]
    q = layer["num_attention_heads"] * layer["head_dim"]
    kv = layer["num_key_value_heads"] * layer["head_dim"]
    shapes = {
        "embed_tokens.weight": (layer["vocab_size"], hidden),
        "fc.weight": (hidden, num_aux * hidden),
        "layers.0.hidden_norm.weight": (hidden,),
        "layers.0.input_layernorm.weight": (hidden,),
        "layers.0.self_attn.q_proj.weight": (q, 2 * hidden),
        "layers.0.self_attn.k_proj.weight": (kv, 2 * hidden),
        "layers.0.self_attn.v_proj.weight": (kv, 2 * hidden),
        "layers.0.self_attn.o_proj.weight": (hidden, q),
        "layers.0.post_attention_layernorm.weight": (hidden,),
        "layers.0.mlp.gate_proj.weight": (inter, hidden),
        "layers.0.mlp.up_proj.weight": (inter, hidden),
        "layers.0.mlp.down_proj.weight": (hidden, inter),
        "norm.weight": (hidden,),
        "lm_head.weight": (config["draft_vocab_size"], hidden),
    }
    if config.get("norm_before_fc"):
        shapes["input_norm.weight"] = (num_aux * hidden,)
    if config.get("fc_norm"):
        shapes.update({f"fc_norm.{i}.weight": (hidden,) for i in range(num_aux)})
    weights = {name: torch.randn(shape) for name, shape in shapes.items()}
    weights["d2t"] = torch.zeros(config["draft_vocab_size"], dtype=torch.int64)
    weights["t2d"] = torch.zeros(layer["vocab_size"], dtype=torch.bool)
    return weights
