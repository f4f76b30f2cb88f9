"""SGLang's EAGLE-3 drafter against the ``speculators`` library's own ``Eagle3DraftModel``, on
the same checkpoint and inputs, float32 on the CPU.

Runs inside one SGLang tree (first on sys.path). Usage:

    python speculators_oracle_probe.py WORKDIR [--prototype] [--case NAME ...]
                                               [--mutant NAME ... | --all-mutants]

For each case (a norm variant and an aux-layer count, see ``CASES``) it builds a tiny drafter
with the library (``Eagle3DraftModel``, random weights, norm weights away from 1) and saves it
with the library's own ``save_pretrained`` under WORKDIR. Then:

- the oracle: the library's ``forward`` (``ttt_steps=2``) on one causal document
  (``document_ids`` all 0, explicit ``position_ids`` from 0, eager attention); forward hooks
  record its first step's logits (``lm_head``'s output) and the hidden state it carries into
  the second step (the second half of what its decoder layer reads on the second step);
- SGLang: the tree's ``get_config`` on the folder, ``LlamaForCausalLMEagle3`` built from it on
  the CPU, ``load_weights`` fed by SGLang's own safetensors iterator with the names as saved,
  then the real ``LlamaForCausalLMEagle3.forward`` (``LlamaModel``, its ``RadixAttention`` on
  ``TorchNativeAttnBackend`` with a real ``MHATokenToKVPool`` / ``ReqToTokenPool`` on the CPU,
  ``LogitsProcessor``) on one sequence: once as ``DRAFT_EXTEND_V2`` (logits of every token)
  and once as ``EXTEND`` (the last token's logits), capturing the hidden states the next draft
  step reads (``CaptureHiddenMode.FULL``).

``--prototype`` (an unpatched tree, which cannot read the speculators format): the
``LlamaConfig`` is written from the checkpoint's ``transformer_layer_config`` here (no variant
flag) and ``layers.0.*`` renamed ``midlayer.*``; 0.5.11 matches the library on ``default/3``
only. ``--case NAME`` (repeatable): only these cases (default: all of ``CASES``).

``--mutant NAME`` (repeatable): also run every case with the named change (``MUTANTS``) made
to the tree's source, in this process (the mutated module is executed from its edited
source; the tree is not written).

Prints ``PROBE-JSON {...}``: per case the largest absolute differences (logits, carried
hidden states), plus per mutant the same.

What stands in: the process groups (one tensor-/pipeline-parallel rank, as the fork's CPU
test does), global server args (unset), ``sgl_kernel`` (SGLang's own CPU stub; none of its
kernels runs: RMSNorm, RoPE and SiLU take their native paths on the CPU).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (SGLang imports it)

import contextlib
import functools
import importlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

START = time.time()

from sglang.test.test_utils import maybe_stub_sgl_kernel  # noqa: E402

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

import sglang  # noqa: E402
import torch  # noqa: E402
from one_sequence import one_sequence_batch  # noqa: E402
from sglang.srt import server_args as server_args_module  # noqa: E402
from sglang.srt.distributed import parallel_state  # noqa: E402
from sglang.srt.layers import dp_attention  # noqa: E402
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend  # noqa: E402
from sglang.srt.layers.rotary_embedding import base as rotary_embedding_base  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator  # noqa: E402
from speculators_cases import (  # noqa: E402
    load_over_nan,
    mutated_module,
    probe_main,
    run_case,
)
from speculators_reference import reference_case  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

EAGLE3 = "sglang.srt.models.llama_eagle3"
CONFIG = "sglang.srt.utils.hf_transformers.config"
#: name -> (what the change does, [(module, text in its source, replacement), ...])
MUTANTS = {
    "drop-input-norm": (
        "fc reads the concatenated aux hidden states without input_norm (norm_before_fc)",
        [(EAGLE3, "hidden_states = self.input_norm(hidden_states)",
          "hidden_states = hidden_states")],
    ),
    "drop-fc-norm": (
        "fc reads each aux layer's hidden states without its fc_norm",
        [(EAGLE3, "[norm(chunk.contiguous()) for norm, chunk in",
          "[chunk.contiguous() for norm, chunk in")],
    ),
    "fc-norms-reversed": (
        "the fc_norm of the last aux layer normalizes the first one's chunk, and so on",
        [(EAGLE3, "zip(self.fc_norm, chunks)", "zip(self.fc_norm[::-1], chunks)")],
    ),
    "ignore-norm-before-residual": (
        "the mid layer's residual is the un-normed hidden states whatever the config says",
        [(EAGLE3, 'self.norm_before_residual = get_eagle3_norm_flag(config, "norm_before_residual")',
          "self.norm_before_residual = False")],
    ),
    "ignore-norm-output": (
        "the next draft step reads the hidden states before the final norm whatever the "
        "config says",
        [(EAGLE3, "hidden_states_to_aux = hidden_states_to_logits",
          "hidden_states_to_aux = hidden_states_to_aux")],
    ),
    "config-drops-norm-output": (
        "the speculators config's norm_output is not carried into the LlamaConfig",
        [(CONFIG, '"fc_norm", "norm_output"):', '"fc_norm"):')],
    ),
    "no-layers-0-rename": (
        "load_weights does not read layers.0.* as midlayer.* (the layer keeps its init)",
        [(EAGLE3, 'if name.startswith("layers.0."):', 'if name.startswith("no such name"):')],
    ),
}


class ServerArgsUnset:
    def __getattr__(self, name):
        return None


@contextlib.contextmanager
def one_cpu_rank():
    """One tensor- and pipeline-parallel rank without a process group, and RoPE's CPU path
    (as the fork's CPU test builds models). Restores what it sets."""
    one_rank = SimpleNamespace(
        world_size=1, rank_in_group=0, rank=0, local_rank=0,
        is_first_rank=True, is_last_rank=True,
    )
    with contextlib.ExitStack() as stack:
        for target, name, value in (
            (parallel_state, "_TP", one_rank),
            (parallel_state, "_PP", one_rank),
            (parallel_state, "_ATTN_TP", one_rank),
            (dp_attention, "_ATTN_TP_SIZE", 1),
            (dp_attention, "_ATTN_TP_RANK", 0),
            (server_args_module, "_global_server_args", ServerArgsUnset()),
            (rotary_embedding_base, "_is_cpu", True),
        ):
            stack.enter_context(mock.patch.object(target, name, value, create=True))
        yield


# -- SGLang's side -------------------------------------------------------------------------
@functools.cache
def sglang_modules(mutant: str | None):
    """(the config module, the llama_eagle3 module), the mutant's change made to its file."""
    modules = {}
    for name in (CONFIG, EAGLE3):
        edits = [(t, r) for m, t, r in MUTANTS[mutant][1] if m == name] if mutant else []
        modules[name] = mutated_module(name, edits) if edits else importlib.import_module(name)
    return modules[CONFIG], modules[EAGLE3]


def prototype_config(folder: Path) -> LlamaConfig:
    """What a patched tree's get_config gives, written here for an unpatched tree (default
    variant only): the layer config, the draft vocab, the aux ids."""
    saved = json.loads((folder / "config.json").read_text())
    fields = dict(saved["transformer_layer_config"])
    fields.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=saved["draft_vocab_size"],
        tie_word_embeddings=False,
        eagle_aux_hidden_state_layer_ids=saved["eagle_aux_hidden_state_layer_ids"],
        torch_dtype="float32",
    )
    return LlamaConfig(**fields)


def sglang_drafter(folder: Path, prototype: bool, mutant: str | None):
    config_module, eagle3 = sglang_modules(mutant)
    if prototype:
        config = prototype_config(folder)
    else:
        config = config_module.get_config(str(folder), trust_remote_code=False)
    with one_cpu_rank():
        model = eagle3.LlamaForCausalLMEagle3(config).eval()
    weights = safetensors_weights_iterator([str(folder / "model.safetensors")])
    if prototype:
        weights = (
            (f"midlayer.{name.removeprefix('layers.0.')}" if name.startswith("layers.0.")
             else name, tensor)
            for name, tensor in weights
        )
    unloaded = load_over_nan(model, weights)
    return config, model, unloaded


def sglang_forward(model, config, aux, input_ids, mode: ForwardMode):
    """The real LlamaForCausalLMEagle3.forward on one sequence of ``len(input_ids)`` new
    tokens (no prefix): (logits, the hidden states the next draft step reads, KV rows
    written)."""
    batch, _, kv_pool = one_sequence_batch(
        input_ids, mode, kv_heads=config.num_key_value_heads, head_dim=config.head_dim,
        layers=1, pools_in_batch=True,
        attn_backend=TorchNativeAttnBackend(SimpleNamespace(device="cpu")),
        spec_info=SimpleNamespace(hidden_states=aux),
    )
    with one_cpu_rank(), torch.no_grad():
        output = model.forward(input_ids, batch.positions, batch)
    keys = kv_pool.get_key_buffer(0)
    written = int((keys.abs().sum(dim=(1, 2)) != 0).sum())
    return output.next_token_logits, output.hidden_states, written


def main():
    run_one = functools.partial(
        run_case, reference=reference_case, drafter=sglang_drafter, forward=sglang_forward,
        modes=(ForwardMode.DRAFT_EXTEND_V2, ForwardMode.EXTEND),
    )
    header = {"sglang_file": sglang.__file__, "import_seconds": round(time.time() - START, 1)}
    probe_main(sys.argv[1:], MUTANTS, run_one, header)


if __name__ == "__main__":
    main()
