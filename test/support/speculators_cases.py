"""The cases of the speculators oracle, shared by the library's side
(``speculators_reference.py``, in ``.venv``) and SGLang's (``speculators_oracle_probe.py`` for
0.5.11, ``speculators_oracle_probe_0_5_23.py`` in ``.venv-0.5.23``, which has no
``speculators``): the drafter's sizes, the norm variants, the aux layers, and the helpers both
SGLang sides use. Needs torch only."""

from __future__ import annotations

import importlib
import json
import math
import os
import time
import traceback
import types
from pathlib import Path

import torch

#: the norm variants of the speculators format: the config flags each sets
VARIANTS = {
    "default": {},
    "norm_before_residual": {"norm_before_residual": True},
    "norm_before_fc": {"norm_before_fc": True},
    "fc_norm": {"fc_norm": True},
    "norm_output": {"norm_output": True},
}
#: aux layer ids declared at the top level of the checkpoint's config, by count
AUX_IDS = {3: [2, 5, 8], 4: [1, 3, 5, 7]}
#: (case name, variant, aux count, the aux ids the config declares (None: it declares none,
#: which is 3 to the library), architectures written in config.json (None: as saved))
CASES = [(f"{v}/{n}", v, n, AUX_IDS[n], None) for v in VARIANTS for n in AUX_IDS] + [
    # the architecture name early speculators releases wrote
    ("default/3 Eagle3Speculator", "default", 3, AUX_IDS[3], ["Eagle3Speculator"]),
    ("default/3 no aux ids", "default", 3, None, None),
]

#: the drafter: hidden 64, 4 heads of 16 (2 KV heads), target vocab 256, draft vocab 128
HIDDEN, VOCAB, DRAFT_VOCAB = 64, 256, 128
TOKENS = 6

#: what the library's side writes next to each checkpoint: the inputs and its outputs
REFERENCE = "reference.pt"


def case_folder(work: Path, name: str) -> Path:
    return work / name.replace("/", "-").replace(" ", "-")


def chosen_cases(names: list[str]) -> list[tuple]:
    """The cases named (all of ``CASES`` when none is); an unknown name is an error."""
    unknown = sorted(set(names) - {case[0] for case in CASES})
    if unknown:
        raise SystemExit(f"unknown case {unknown[0]!r}; known: {', '.join(c[0] for c in CASES)}")
    return [case for case in CASES if not names or case[0] in names]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    difference = (a - b).abs().max().item()
    return difference if math.isfinite(difference) else float("inf")


def mutated_module(name: str, edits: list[tuple[str, str]]) -> types.ModuleType:
    """``name`` executed from its source with each (text, replacement) made once."""
    original = importlib.import_module(name)
    source = Path(original.__file__).read_text()
    for text, replacement in edits:
        count = source.count(text)
        if count != 1:
            raise SystemExit(f"mutant: {text!r} occurs {count} times in {name}")
        source = source.replace(text, replacement)
    module = types.ModuleType(name)
    module.__file__ = original.__file__
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


# -- SGLang's side, both releases: each probe passes its own SGLang calls ---------------------
def load_over_nan(model, weights) -> list[str]:
    """``model.load_weights(weights)`` over parameters all set to NaN first: the names of the
    parameters it did not write (NaN whatever memory the allocator handed back)."""
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(float("nan"))
    model.load_weights(weights)
    return [n for n, p in model.named_parameters() if torch.isnan(p).any()]


def run_case(work: Path, case, prototype: bool, mutants: list[str], *, reference, drafter,
             forward, modes) -> dict:
    """One case against the library: ``reference(folder, case)`` gives the inputs and the
    library's outputs; for the tree, then each mutant, ``drafter(folder, prototype, mutant)``
    gives (config, model, unloaded parameters) and ``forward(model, config, aux, input_ids,
    mode)`` (logits, carried hidden states, KV rows written) in each of ``modes``: the
    draft-extend mode (every token's logits), then extend (the last token's)."""
    name, variant, aux_count, _, _ = case
    folder = case_folder(work, name)
    wanted = reference(folder, case)
    input_ids, aux = wanted["input_ids"], wanted["aux"]
    want_logits, want_carried = wanted["logits"], wanted["carried"]
    result = {
        "variant": variant,
        "aux": aux_count,
        "saved": sorted(json.loads((folder / "config.json").read_text())["architectures"]),
        "reference_scale": {
            "logits": want_logits.abs().max().item(),
            "carried": want_carried.abs().max().item(),
        },
        "mutants": {},
    }
    for mutant in [None, *mutants]:
        try:
            config, model, unloaded = drafter(folder, prototype, mutant)
            every, last = (forward(model, config, aux, input_ids, mode) for mode in modes)
        except Exception as exc:  # reported: a mutant may make loading or the forward fail
            got = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            if os.environ.get("PROBE_TRACEBACK"):
                traceback.print_exc()
        else:
            got = {
                "logits": max(max_diff(every[0], want_logits),
                              max_diff(last[0], want_logits[-1:])),
                "carried": max(max_diff(every[1], want_carried),
                               max_diff(last[1], want_carried)),
                "kv_rows_written": [every[2], last[2]],
                "unloaded": unloaded,
                "fc_in_features": model.model.fc.in_features,
                # SGLang's draft-to-target token map (from d2t) against the target ids the
                # library's t2d marks
                "hot_token_ids_match": torch.equal(model.get_hot_token_id(), wanted["target_ids"]),
            }
        if mutant is None:
            result.update(got)
        else:
            result["mutants"][mutant] = got
    return result


def probe_main(args: list[str], mutants_known: dict, run_one, header: dict) -> None:
    """The probes' command line (``WORKDIR [--prototype] [--case NAME ...] [--mutant NAME ... |
    --all-mutants]``): ``run_one(work, case, prototype, mutants)`` on each case chosen, printed
    as ``PROBE-JSON {...}`` after ``header``."""
    start = time.time()
    work = Path(args.pop(0))
    prototype = "--prototype" in args
    mutants = [args[i + 1] for i, arg in enumerate(args) if arg == "--mutant"]
    if "--all-mutants" in args:
        mutants = list(mutants_known)
    unknown = sorted(set(mutants) - set(mutants_known))
    if unknown:
        raise SystemExit(f"unknown mutant {unknown[0]!r}; known: {', '.join(mutants_known)}")
    cases = chosen_cases([args[i + 1] for i, arg in enumerate(args) if arg == "--case"])
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # tiny matrices: threads only contend (2 shared cores in CI)
    out = {
        **header,
        "mutant_descriptions": {name: mutants_known[name][0] for name in mutants},
        "cases": {},
    }
    for case in cases:
        out["cases"][case[0]] = run_one(work, case, prototype, mutants)
    out["seconds"] = round(out.get("import_seconds", 0) + time.time() - start, 1)
    print("PROBE-JSON " + json.dumps(out))
