"""Which tensor a target class hands an EAGLE-3 drafter on each tree, read from the audit
(``data/captured_tensors.json``, written with docs/development/captured-tensors.md by
``scripts/captured_tensors_table.py``): every class of a release that captures aux hidden
states, run on the CPU against transformers' ``output_hidden_states`` of the same weights,
released and patched.

EAGLE-3 drafters (SpecForge's, the speculators library's) are trained on the target's hidden
states, the residual stream ``output_hidden_states`` gives (index ``L``: the last layer's
output before the final norm, as vLLM and the speculators library capture it). A tree that
hands on another tensor still serves, with other inputs than the drafter was trained on: the
report says so per tree, and warns.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "captured_tensors.json"

#: the audit's tensors, in words
DESCRIBED = {
    "hidden-states": "the hidden states (the residual stream, as transformers' output_hidden_states)",
    "hidden-states-arithmetic-differs": (
        "the hidden states, computed otherwise than transformers (beyond float32 noise)"
    ),
    "mlp-branch": "each layer's MLP branch without the residual",
    "other": "none of the hidden states",
}
#: the tensors a drafter trained on the residual stream reads as it was trained
TRAINED_ON = {"hidden-states", "hidden-states-arithmetic-differs"}
#: where upstream discusses a class's captured tensor
THREADS = {
    "Gemma3ForCausalLM": "upstream #39286",
    "Gemma3ForConditionalGeneration": "upstream #39286",
}
#: ``report --json``'s sides, as the audit names its trees
AUDIT_TREE = {"patched": "patched", "pristine": "released"}


@lru_cache(maxsize=1)
def _releases() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))["releases"]


def handed_on(version: str | None, target_class: str | None, side: str) -> dict | None:
    """What ``target_class`` hands the drafter on ``side`` (``patched`` or ``pristine``) of a
    tree of ``version``: ``tensor`` (None: not audited), ``trained_on`` (None: unknown),
    ``audited_on`` and ``described``. None without a target class."""
    if target_class is None:
        return None
    releases = _releases()
    if version not in releases:
        covered = " and ".join(sorted(releases))
        return _unknown(
            f"not audited on {'SGLang ' + version if version else 'a tree of unknown version'}"
            f" (the audit covers SGLang {covered})"
        )
    entries = releases[version].get(target_class)
    if not entries:
        return _unknown(f"not audited: SGLang {version} has no {target_class} that captures")
    found = [entry[AUDIT_TREE[side]] for entry in entries]
    if any(other != found[0] for other in found[1:]):
        files = ", ".join(entry["file"] for entry in entries)
        return _unknown(f"not audited: {files} each define {target_class}, audited apart")
    tensor = found[0]["tensor"]
    if tensor is None:
        return _unknown(f"not audited: {found[0]['why']}")
    return {
        "tensor": tensor,
        "trained_on": tensor in TRAINED_ON,
        "audited_on": version,
        "described": DESCRIBED[tensor],
    }


def _unknown(why: str) -> dict:
    return {"tensor": None, "trained_on": None, "audited_on": None, "described": why}


def attach(sides: dict, version: str | None) -> None:
    """Each side's ``captured_tensor``, for its own target class (none without aux states)."""
    for name, values in sides.items():
        uses_aux = values.get("eagle_use_aux_hidden_state") and not values.get("refusal")
        values["captured_tensor"] = (
            handed_on(version, values.get("target_class"), name) if uses_aux else None
        )


def untrained(values: dict) -> str | None:
    """What a tree hands the drafter that it was not trained on, in words, else None."""
    tensor = values.get("captured_tensor")
    if not tensor or tensor["trained_on"] is not False:
        return None
    return tensor["described"]


def lines(report: dict) -> list[str]:
    """The tensor each tree hands on, and a warning per tree that hands on another than the
    drafter was trained on (nothing when neither tree hands on aux hidden states)."""
    sides = {"patched": "patched: ", "pristine": "released:"}
    tensors = {side: report[side].get("captured_tensor") for side in sides}
    if not any(tensors.values()):
        return []
    target_class = report["patched"].get("target_class") or report["pristine"].get(
        "target_class"
    )
    audited = next((t["audited_on"] for t in tensors.values() if t and t["audited_on"]), None)
    where = f", audited on SGLang {audited} against transformers" if audited else ""
    out = [f"tensor the target class {target_class} hands the drafter{where}:"]
    for side, label in sides.items():
        tensor = tensors[side]
        out.append(f"  {label} {tensor['described'] if tensor else 'none (no aux hidden states)'}")
    thread = THREADS.get(target_class)
    for side, label in (("patched", "patched"), ("pristine", "released")):
        what = untrained(report[side])
        if what:
            out.append(
                f"warning: {label} hands the drafter {what}, not the hidden states EAGLE-3 "
                "drafters are trained on" + (f" ({thread})" if thread else "")
            )
    return out
