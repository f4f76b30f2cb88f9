"""The cases of the speculators oracle, shared by the library's side
(``speculators_reference.py``, in ``.venv``) and SGLang's (``speculators_oracle_probe.py`` for
0.5.11, ``speculators_oracle_probe_0_5_23.py`` in ``.venv-0.5.23``, which has no
``speculators``): the drafter's sizes, the norm variants, the aux layers, and the helpers both
SGLang sides use. Needs torch only."""

from __future__ import annotations

import importlib
import math
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
