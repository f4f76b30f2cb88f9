"""What serving a drafter/target pair would do on each tree, from what the report computed
(both release families): the capture rule of the target class, and one verdict per tree
(``serves``, ``fails at the first request in fc (...)``, ``refused at start-up (...)``,
``fails at start-up (...)``).

Nothing here runs SGLang: each verdict is derived from the values the trees' own code gave
(the refusal, the draft model's dtype, the hidden states the class captures and whether its
forward reaches the last layer's output, the ``fc``'s in-features), against the target's
dtype, hidden size and layer count.
"""

from __future__ import annotations

import re

#: the capture rule's kinds: the class's declaration (a patched 0.5.23 tree's
#: ``get_eagle3_layers_to_capture``), a patched tree's class without one, the release's
DECLARED, UNDECLARED, RELEASED = "declared", "undeclared", "released"

#: torch's names of dtypes in its mismatch errors (``c10::Half != c10::BFloat16``)
_TORCH_NAMES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "Float"}

_INVALID_KEY = re.compile(r"Invalid ([\w.]+)=")


def short(dtype: str | None) -> str | None:
    return None if dtype is None else dtype.replace("torch.", "")


def capture_rule(values: dict, patched: bool) -> dict | None:
    """The capture rule of ``values``' target class (None: the pair captures nothing):
    on a patched tree the class's declaration if it has one, else ``undeclared`` with the
    release's behaviour (its ``set_eagle3_layers_to_capture`` on a stand-in); on a released
    tree ``released``, the same method on a stand-in. ``values``: one tree's side of the
    report, with ``declared`` and ``capture_method`` from the probe."""
    if not values.get("eagle_use_aux_hidden_state") or not values.get("target_class"):
        return None
    declared = values.get("declared") if patched else None
    if declared is not None:
        return {
            "kind": DECLARED,
            "method": declared["method"],
            "captured_hidden_states": declared["captured_hidden_states"],
            "captures_final_hidden_state": declared["captures_final_hidden_state"],
            "error": declared["error"],
        }
    final = values.get("final_boundary")
    return {
        "kind": UNDECLARED if patched else RELEASED,
        "method": values.get("capture_method"),
        "captured_hidden_states": values.get("captured_hidden_states"),
        "captures_final_hidden_state": None if final is None else final.startswith("yes"),
        "error": values.get("capture_error"),
    }


def refused_key(refusal: str) -> str:
    """The key a refusal names (``Invalid eagle_config.eagle_aux_hidden_state_layer_ids=...``),
    else its first clause."""
    found = _INVALID_KEY.search(refusal)
    if found:
        return found.group(1)
    first = refusal.split(". ", 1)[0]
    return first if len(first) <= 120 else first[:117] + "..."


def verdict(
    values: dict,
    *,
    algorithm: str,
    target: dict,
    fc_width: int | None,
    config_dtype: str | None,
) -> str:
    """What serving the pair does on one tree. ``values``: that tree's side (``refusal``,
    ``capture_error``, ``draft_dtype``, ``eagle_use_aux_hidden_state``, ``capture_rule``,
    ``captured_tensor``); ``target``: ``dtype``, ``hidden_size``, ``num_layers``;
    ``fc_width``: the drafter's ``fc`` in-features on that tree (None: no ``fc`` computed);
    ``config_dtype``: the dtype the drafter's own config resolves to."""
    from sglang_eagle_sizing.report.captured_tensors import untrained

    if values.get("refusal"):
        return f"refused at start-up ({refused_key(values['refusal'])})"
    rule = values.get("capture_rule")
    if rule and rule.get("error"):
        return f"fails at start-up ({rule['error']})"
    if values.get("capture_error"):
        return f"fails at start-up ({values['capture_error']})"
    aux = bool(values.get("eagle_use_aux_hidden_state"))
    hidden, layers = target.get("hidden_size"), target.get("num_layers")
    if algorithm == "EAGLE3" and aux and rule and fc_width and hidden and layers:
        captured = rule.get("captured_hidden_states") or []
        final = rule.get("captures_final_hidden_state")
        handed = [i for i in captured if i < layers or (i == layers and final is not False)]
        if len(handed) * hidden != fc_width:
            lost = [i for i in captured if i not in handed]
            why = f"fc takes {fc_width} features, the target hands it {len(handed)} hidden states of {hidden}"
            if lost:
                why += f" (its forward never reaches {lost}: the last layer's output)"
            return f"fails at the first request in fc ({why})"
    draft, theirs = short(values.get("draft_dtype")), short(target.get("dtype"))
    if algorithm in ("EAGLE", "EAGLE3") and draft and theirs and draft != theirs:
        where = "fc" if algorithm == "EAGLE3" and aux else "the draft model"
        names = f"{_TORCH_NAMES.get(theirs, theirs)} != {_TORCH_NAMES.get(draft, draft)}"
        return (
            f"fails at the first request in {where} (the draft model built in its config's "
            f"{draft} reads the target's {theirs} hidden states: {names})"
        )
    own = short(config_dtype)
    served = "serves"
    if algorithm in ("EAGLE", "EAGLE3") and draft and own and draft != own:
        served = f"serves (the draft model built in the target's {draft}, not its config's {own}; one log line)"
    what = untrained(values)  # what the target hands on that the drafter was not trained on
    if what:
        return f"{served}, handing the drafter other states than it was trained on ({what})"
    return served


def captured_text(rule: dict | None, num_layers: int | None = None) -> str:
    """``rule``'s hidden states in words (never ``None``); with the target's layer count, whether
    its forward reaches the last layer's output where the rule names it."""
    if rule is None:
        return "no hidden states (no aux hidden states)"
    if rule.get("error"):
        return f"raises {rule['error']}"
    captured = rule.get("captured_hidden_states")
    if captured is None:
        return "hidden states not computed"
    text = f"hidden states {captured}"
    if num_layers is not None and num_layers in captured:
        final = rule.get("captures_final_hidden_state")
        if final is True:
            text += f" ({num_layers}: the last layer's output, which its forward captures)"
        elif final is False:
            text += f" ({num_layers}: the last layer's output, which its forward never captures)"
        else:
            text += f" ({num_layers}: the last layer's output; whether its forward captures it is unknown)"
    return text


def rule_text(rule: dict | None, target_class: str | None) -> str:
    """How ``rule`` was found, in words: declared by the class, undeclared (the release's
    rule kept), or the release's method on a stand-in."""
    if rule is None:
        return "no capture"
    method = rule.get("method")
    if method is None:
        return f"{target_class} has no set_eagle3_layers_to_capture"
    if rule["kind"] == DECLARED:
        return f"declared by {method}"
    if rule["kind"] == UNDECLARED:
        return (
            f"undeclared ({target_class} has no get_eagle3_layers_to_capture): the release's "
            f"rule, {method} on a stand-in"
        )
    return f"released (the class's method on a stand-in): {method}"


def ids_text(values: dict) -> str:
    """What the runner handed the class: hidden-state indices, or layer ids."""
    if values.get("hidden_state_ids") is not None:
        return f"hidden-state indices {values['hidden_state_ids']} (handed as they are)"
    return f"layer ids {layer_ids_text(values.get('layer_ids'))}"


def layer_ids_text(layer_ids) -> str:
    if layer_ids is None:
        return "none (the class's default layers)"
    return str(layer_ids)


def header(tree: dict) -> str:
    """The report's first line: the release and the tree it judged by."""
    state = "patched" if tree["patched"] else "released"
    return f"report: {tree['described']} ({state})"


def serving_lines(report: dict) -> list[str]:
    """The verdict per tree and, for an EAGLE-3 pair, the target class's capture rule per
    tree: the lines both families print after the pair."""
    from sglang_eagle_sizing.report import captured_tensors

    lines = ["serving (--dtype auto):"]
    for side, label in (("patched", "patched: "), ("pristine", "released:")):
        lines.append(f"  {label} {report[side].get('verdict') or 'not computed'}")
    rules = {side: report[side].get("capture_rule") for side in ("patched", "pristine")}
    if any(rules.values()):
        target_class = report["patched"].get("target_class") or report["pristine"].get(
            "target_class"
        )
        lines.append(
            f"capture rule of the target class {target_class} (hidden states: indices into "
            "transformers' output_hidden_states, 0 the embeddings):"
        )
        for side, label in (("patched", "patched: "), ("pristine", "released:")):
            values = report[side]
            if values.get("refusal") and rules[side] is None:
                lines.append(f"  {label} not reached (refused at start-up)")
                continue
            lines.append(
                f"  {label} {rule_text(rules[side], values.get('target_class'))}; "
                f"{ids_text(values)} -> "
                f"{captured_text(rules[side], report['target'].get('num_layers'))}"
            )
    return lines + captured_tensors.lines(report)
