"""SGLang 0.5.23's EAGLE-3 drafter against the ``speculators`` library's own
``Eagle3DraftModel``, on the checkpoints and outputs the library wrote (float32, CPU).

0.5.23's environment has no ``speculators``: ``speculators_reference.py`` runs first in
``.venv`` and writes, per case of ``speculators_cases.CASES``, the checkpoint the library saved
with its ``save_pretrained`` and ``reference.pt`` (the inputs, the library's logits and the
hidden state it carries into its second TTT step). This probe runs in ``.venv-0.5.23``, inside
one SGLang tree (first on sys.path):

    python speculators_oracle_probe_0_5_23.py WORKDIR [--prototype] [--case NAME ...]
                                                      [--mutant NAME ... | --all-mutants]

For each case: the tree's ``get_config`` on the folder, ``LlamaForCausalLMEagle3`` built from
it on the CPU, ``load_weights`` fed by SGLang's own safetensors iterator with the names as
saved, then the real ``LlamaForCausalLMEagle3.forward`` (``LlamaModel``, its
``RadixAttention`` on ``TorchNativeAttnBackend`` with a real ``MHATokenToKVPool`` /
``ReqToTokenPool``, ``LogitsProcessor``) on one sequence: as ``DRAFT_EXTEND_V2`` (every token's
logits) and as ``EXTEND`` (the last token's), capturing the hidden states the next draft step
reads (``CaptureHiddenMode.FULL``).

``--prototype`` (0.5.23 as released, which cannot read the speculators format): the config is
the one the patched converter would give, written here from the checkpoint's config.json
(the decoder layer's keys, the draft vocabulary, the layer ids as SGLang counts them, the four
norm flags at the top level). The weights load as saved (``layers.0.`` is 0.5.23's own name).

``--mutant NAME``: also run every case with the named change (``MUTANTS``) made to the tree's
source, in this process (the mutated module is executed from its edited source; the tree is
not written).

Prints ``PROBE-JSON {...}``: per case the largest absolute differences (logits, carried hidden
states), plus per mutant the same.

What stands in: the parallel groups (one tensor-, attention- and pipeline-parallel rank, no
process group), ``sgl_kernel`` (SGLang's own CPU stub), RoPE's CPU flag (its native path;
RMSNorm and SiLU take theirs off CUDA).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (SGLang imports it)

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
from cpu_forward_0_5_23 import forward_one_sequence, one_cpu_rank  # noqa: E402
from sglang.srt.configs import model_config_parser_registry  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator  # noqa: E402
from sglang.test.test_utils import publish_build_topology  # noqa: E402
from speculators_cases import (  # noqa: E402
    REFERENCE,
    load_over_nan,
    mutated_module,
    probe_main,
    run_case,
)
from transformers import LlamaConfig  # noqa: E402

#: the model-config parsers get_config dispatches to, by name
PARSERS = model_config_parser_registry._MODEL_CONFIG_PARSER_REGISTRY
EAGLE3 = "sglang.srt.models.llama_eagle3"
CONFIG = "sglang.srt.utils.hf_transformers.config"
#: name -> (what the change does, [(module, text in its source, replacement), ...])
MUTANTS = {
    "ignore-norm-before-residual": (
        "the input layer's residual is the un-normed hidden states whatever the config says",
        [(EAGLE3, "self.norm_before_residual = bool(", "self.norm_before_residual = False and bool(")],
    ),
    "drop-input-norm": (
        "fc reads the concatenated aux hidden states without input_norm (norm_before_fc)",
        [(EAGLE3, "hidden_states = self.input_norm(hidden_states)", "pass")],
    ),
    "drop-fc-norm": (
        "fc reads each aux layer's hidden states without its fc_norm",
        [(EAGLE3, "[norm(chunk) for norm, chunk in", "[chunk for norm, chunk in")],
    ),
    "fc-norms-reversed": (
        "the fc_norm of the last aux layer normalizes the first one's chunk, and so on",
        [(EAGLE3, "zip(self.fc_norm, chunks)", "zip(self.fc_norm[::-1], chunks)")],
    ),
    "ignore-norm-output": (
        "the next draft step reads the hidden states before the final norm whatever the "
        "config says",
        [(EAGLE3, "aux = hidden_states_to_logits if self.norm_output else", "aux =")],
    ),
    "config-drops-norm-before-residual": (
        "the speculators config's norm_before_residual is not carried into the LlamaConfig",
        [(CONFIG, 'config.norm_before_residual = bool(config_dict.get("norm_before_residual", True))', "pass")],
    ),
}


@functools.cache
def sglang_modules(mutant: str | None):
    """(the config module, the llama_eagle3 module, the parsers the config module
    registers), the mutant's change made to its file.

    A config module executed again registers its model-config parsers over the tree's
    (``register_model_config_parser``): the tree's stay registered, the mutant's are
    returned for its own reads (``sglang_drafter``)."""
    modules = {}
    saved = dict(PARSERS)
    try:
        for name in (CONFIG, EAGLE3):
            edits = [(t, r) for m, t, r in MUTANTS[mutant][1] if m == name] if mutant else []
            modules[name] = (
                mutated_module(name, edits) if edits else importlib.import_module(name)
            )
        parsers = {k: v for k, v in PARSERS.items() if saved.get(k) is not v}
    finally:
        PARSERS.clear()
        PARSERS.update(saved)
    return modules[CONFIG], modules[EAGLE3], parsers


def prototype_config(folder: Path) -> LlamaConfig:
    """What the patched tree's get_config gives, written here for 0.5.23 as released: the
    decoder layer's keys, the draft vocabulary, the layer ids as SGLang counts them (k - 1),
    the norm flags at the top level."""
    saved = json.loads((folder / "config.json").read_text())
    fields = dict(saved["transformer_layer_config"])
    fields.pop("model_type", None)
    fields.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=saved["draft_vocab_size"],
        tie_word_embeddings=False,
        dtype="float32",
    )
    ids = saved["eagle_aux_hidden_state_layer_ids"]
    if ids is not None:
        fields["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in ids]
    for key in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        fields[key] = saved[key]
    return LlamaConfig(**fields)


def sglang_drafter(folder: Path, prototype: bool, mutant: str | None):
    config_module, eagle3, parsers = sglang_modules(mutant)
    if prototype:
        config = prototype_config(folder)
    else:
        with mock.patch.dict(PARSERS, parsers):
            config = config_module.get_config(str(folder), trust_remote_code=False)
    with one_cpu_rank():
        model = eagle3.LlamaForCausalLMEagle3(config).eval()
    unloaded = load_over_nan(model, safetensors_weights_iterator([str(folder / "model.safetensors")]))
    return config, model, unloaded


def sglang_forward(model, config, aux, input_ids, mode: ForwardMode):
    """The real LlamaForCausalLMEagle3.forward on one sequence of ``len(input_ids)`` new
    tokens (no prefix): (logits, the hidden states the next draft step reads, KV rows
    written)."""
    # select_index None: the logits of every token (the draft-extend graph selects)
    output, kv_pool = forward_one_sequence(
        model, input_ids, mode, kv_heads=config.num_key_value_heads, head_dim=config.head_dim,
        layers=1, spec_info=SimpleNamespace(hidden_states=aux, select_index=None),
    )
    keys = kv_pool.get_key_buffer(0)
    written = int((keys.abs().sum(dim=(1, 2)) != 0).sum())
    return output.next_token_logits, output.hidden_states, written


def main():
    # What a scheduler publishes (server args on the CPU, one rank), as upstream's layer
    # tests do; the groups themselves are one_cpu_rank's.
    publish_build_topology(device="cpu", tp_size=1, pp_size=1)
    run_one = functools.partial(
        run_case, reference=lambda folder, case: torch.load(folder / REFERENCE),
        drafter=sglang_drafter, forward=sglang_forward,
        modes=(ForwardMode.DRAFT_EXTEND_V2, ForwardMode.EXTEND),
    )
    header = {
        "sglang_file": sglang.__file__,
        "torch": torch.__version__,
        "import_seconds": round(time.time() - START, 1),
    }
    probe_main(sys.argv[1:], MUTANTS, run_one, header)


if __name__ == "__main__":
    main()
