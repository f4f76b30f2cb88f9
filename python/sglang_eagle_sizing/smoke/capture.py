"""What a served target captured for its EAGLE-3 drafter, as transformers counts hidden states.

The stand-ins' recorder (``standin_hooks.record_aux_hidden_states``) saves, in the server, the
aux hidden states of the target's first prefills (``EXTEND``) with their tokens and positions.
Each prompt of the first batch is cut out of that record (positions from 0), and each captured
chunk (one per aux layer, ``hidden_size`` wide) is matched with transformers' hidden states of
the same weights on the same tokens: ``output_hidden_states[k]`` (0: the embeddings, ``k``: the
output of layer ``k - 1``) and the last layer's output before the final norm, which transformers
does not return (its ``hidden_states[L]`` is after the norm) and which a model that captures
"the final boundary" (GPT-OSS in 0.5.23) hands on. Labels: ``k``, and ``"L-pre"`` (``L`` the
number of layers) for the last layer's output before the norm; and, where a layer has a
``post_feedforward_layernorm`` (Gemma), ``"mlp-branch-of-layer-i"``: that norm's output, not a
hidden state (what Gemma-3's SGLang model hands on, docs/smoke-classes.md).

A chunk is named by the hidden state it is closest to, and only if it is close (``MATCH``,
relative to the state's RMS) and the next closest is much farther: otherwise ``None``.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: a chunk equals a hidden state when their largest difference is below this share of the
#: state's RMS (float32 kernels differ by about 1e-6)
MATCH = 1e-3


def oracle(target_dir: Path, tokens: list[int]) -> list[tuple[str, torch.Tensor]]:
    """``(label, state)`` for transformers' hidden states of ``tokens`` (float32, CPU):
    ``output_hidden_states`` and the last layer's output before the final norm."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    layers = model.model.layers
    raw = {}

    def keep(_module, _inputs, output):
        raw["last"] = output[0] if isinstance(output, tuple) else output

    handles = [layers[-1].register_forward_hook(keep)]
    # not a hidden state: a layer's MLP branch after its own norm (Gemma's
    # post_feedforward_layernorm), what a model that keeps the residual apart could hand on
    branches = {}
    for i, layer in enumerate(layers):
        norm = getattr(layer, "post_feedforward_layernorm", None)
        if norm is not None:
            handles.append(
                norm.register_forward_hook(
                    lambda _m, _i, output, i=i: branches.__setitem__(i, output[0])
                )
            )
    try:
        with torch.no_grad():
            out = model(torch.tensor([tokens]), output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()
    states = [(str(k), s[0]) for k, s in enumerate(out.hidden_states)]
    last = raw["last"]
    states.append((f"{len(layers)}-pre", last[0] if last.dim() == 3 else last))
    states += [(f"mlp-branch-of-layer-{i}", b) for i, b in sorted(branches.items())]
    return states


def _match(chunk, states) -> tuple[str | None, float]:
    """The label of the state ``chunk`` equals, and the largest difference from it."""
    scored = sorted(
        (
            (float((chunk - s).abs().max()) / max(float(s.pow(2).mean().sqrt()), 1e-12), label)
            for label, s in states
            if s.shape == chunk.shape
        ),
    )
    if not scored:
        return None, float("nan")
    best, label = scored[0]
    # a tie with another state (equal states: a layer that changed nothing) names the first
    if best > MATCH:
        return None, best
    return label, best


def captured_states(aux_dir: Path, target_dir: Path, prompts, hidden: int) -> dict:
    """What the server's target captured for each prompt of ``prompts`` found in its first
    recorded prefill: ``{"captured": [label, ...] (the first prompt's), "per_prompt": ...,
    "max_diff": float}``, or ``{"error": ...}`` when nothing was recorded."""
    import torch

    files = sorted(Path(aux_dir).glob("aux-*.pt"), key=lambda p: p.stat().st_mtime)
    if not files:
        return {"error": "no prefill with aux hidden states was recorded"}
    record = torch.load(files[0])
    ids, positions = record["input_ids"].tolist(), record["positions"].tolist()
    aux = record["aux"]
    chunks_all = [c for part in aux for c in part.split(hidden, dim=-1)]
    starts = [i for i, p in enumerate(positions) if p == 0] + [len(positions)]
    per_prompt, worst = [], 0.0
    for begin, end in pairwise(starts):
        tokens = ids[begin:end]
        if tuple(tokens) not in {tuple(p) for p in prompts}:
            continue
        states = oracle(target_dir, tokens)
        labels = []
        for chunk in chunks_all:
            label, diff = _match(chunk[begin:end], states)
            labels.append(label)
            if label is not None:
                worst = max(worst, diff)
        per_prompt.append({"tokens": tokens, "captured": labels})
    if not per_prompt:
        return {"error": f"no prompt of the batch in the recorded prefill ({len(ids)} tokens)"}
    return {
        "captured": per_prompt[0]["captured"],
        "consistent": all(p["captured"] == per_prompt[0]["captured"] for p in per_prompt),
        "prompts": len(per_prompt),
        "max_diff": worst,
    }


def meant_states(drafter, target) -> list[str] | None:
    """The hidden states a drafter's ids name where they are indices (a speculators drafter's,
    and ids at the top level of a config: vLLM's key), as labels: the index as given
    (``models.hidden_state_of``), on every class; the index ``L`` (the target's layer count) is
    ``"L-pre"`` (``"4-pre"`` for 4 layers), the last layer's output before the final norm, as
    ``capture.py`` labels it and vLLM captures it for the
    speculators library (its ``launch_vllm.py --include-last-layer``). None for SGLang's ids in
    ``eagle_config`` (SpecForge's), whose meaning is the class's own rule in each release (what
    the unpatched release captures), and without ids."""
    from sglang_eagle_sizing.smoke.models import hidden_state_of, ids_meaning

    if drafter is None or drafter.aux_layer_ids is None:
        return None
    if ids_meaning(drafter) != "speculators":
        return None
    states = [hidden_state_of(i, "speculators") for i in drafter.aux_layer_ids]
    return [f"{k}-pre" if k == target.num_layers else str(k) for k in states]
