"""The ``speculators`` library's side of the oracle: for each case of ``speculators_cases``, a
tiny drafter built by the library (``Eagle3DraftModel``, random weights, norm weights away
from 1), saved with its own ``save_pretrained``, and its own ``forward`` on one causal
document.

Imported by the 0.5.11 probe (one process, the library and SGLang side by side). For SGLang
0.5.23, whose environment has no ``speculators``, run it as a script in ``.venv``:

    python speculators_reference.py WORKDIR [--case NAME ...]

which writes each case's checkpoint folder under WORKDIR (``speculators_cases.case_folder``)
with ``reference.pt`` beside ``config.json``: the inputs (``input_ids``, ``aux``), the
library's outputs (``logits``, ``carried``) and the target ids its ``t2d`` marks
(``target_ids``). Prints ``REFERENCE-JSON {...}`` (the cases written, the library's version).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from pathlib import Path

START = time.time()

import torch  # noqa: E402
from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from speculators_cases import (  # noqa: E402
    DRAFT_VOCAB,
    HIDDEN,
    REFERENCE,
    TOKENS,
    VARIANTS,
    VOCAB,
    case_folder,
    chosen_cases,
)
from transformers import LlamaConfig  # noqa: E402


def library_drafter(variant: str, aux_ids: list[int] | None) -> Eagle3DraftModel:
    """A tiny drafter of the library's, random weights (norm weights around 1, not 1)."""
    torch.manual_seed(0)
    layer = LlamaConfig(
        hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_hidden_layers=1, vocab_size=VOCAB,
        max_position_embeddings=256, rms_norm_eps=1e-6,
    )
    layer._attn_implementation = "eager"  # not flex attention: the CPU, a dense causal mask
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=DRAFT_VOCAB,
        eagle_aux_hidden_state_layer_ids=aux_ids,
        **VARIANTS[variant],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
        ),
    )
    model = Eagle3DraftModel(config).eval()
    # A pruned draft vocabulary: the target ids of the 128 draft tokens, through the
    # library's own loader of the mappings (t2d marks them, d2t holds the offsets).
    target_ids = torch.randperm(VOCAB)[:DRAFT_VOCAB].sort().values
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[target_ids] = True
    model.load_vocab_mappings(t2d, target_ids - torch.arange(DRAFT_VOCAB))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.5 * torch.randn_like(param))
            else:
                param.copy_(0.1 * torch.randn_like(param))
    return model


def library_forward(model: Eagle3DraftModel, aux: torch.Tensor, input_ids: torch.Tensor):
    """The library's forward on one causal document: (first step's logits, the hidden state
    it carries into the second step), both [tokens, ...]."""
    n = input_ids.shape[0]
    logits, layer_inputs = [], []

    def on_lm_head(module, args, output):
        logits.append(output.detach().clone())

    def on_layer(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        layer_inputs.append(hidden.detach().clone())

    hooks = [
        model.lm_head.register_forward_hook(on_lm_head),
        model.layers[0].register_forward_pre_hook(on_layer, with_kwargs=True),
    ]
    try:
        with torch.no_grad():
            model(
                hidden_states=aux[None],
                input_ids=input_ids[None],
                document_ids=torch.zeros((1, n), dtype=torch.long),
                position_ids=torch.arange(n)[None],
                ttt_steps=2,
            )
    finally:
        for hook in hooks:
            hook.remove()
    assert len(logits) == 2 and len(layer_inputs) == 2
    # The second step's layer reads cat([embeds, carried hidden state]).
    return logits[0][0], layer_inputs[1][0][:, model.hidden_size:]


def reference_case(folder: Path, case) -> dict:
    """Save the case's drafter under ``folder`` with the library's ``save_pretrained`` and
    run the library's forward: the inputs, its outputs, the target ids of the draft
    vocabulary, and the library's model."""
    _, variant, aux_count, aux_ids, architectures = case
    library = library_drafter(variant, aux_ids)
    library.save_pretrained(folder)
    if architectures is not None:
        saved = json.loads((folder / "config.json").read_text())
        saved["architectures"] = architectures
        (folder / "config.json").write_text(json.dumps(saved, indent=2))
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, VOCAB, (TOKENS,), generator=generator)
    aux = torch.randn((TOKENS, aux_count * HIDDEN), generator=generator)
    logits, carried = library_forward(library, aux, input_ids)
    return {
        "input_ids": input_ids,
        "aux": aux,
        "logits": logits,
        "carried": carried,
        "target_ids": library.t2d.nonzero().flatten(),
        "library": library,
    }


def main():
    args = sys.argv[1:]
    work = Path(args.pop(0))
    cases = chosen_cases([args[i + 1] for i, arg in enumerate(args) if arg == "--case"])
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # tiny matrices: threads only contend (2 shared cores in CI)
    written = []
    for case in cases:
        folder = case_folder(work, case[0])
        reference = reference_case(folder, case)
        del reference["library"]
        torch.save(reference, folder / REFERENCE)
        written.append(case[0])
    print("REFERENCE-JSON " + json.dumps({
        "cases": written,
        "speculators": importlib.metadata.version("speculators"),
        "torch": torch.__version__,
        "seconds": round(time.time() - START, 1),
    }))


if __name__ == "__main__":
    main()
