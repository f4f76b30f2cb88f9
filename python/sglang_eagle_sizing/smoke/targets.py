"""The tiny target a smoke case serves, whatever its class: Llama, Qwen2/3 and Step-3.5 are
``models.py``'s, the classes with a capture rule or architecture of their own ``classes.py``'s."""

from __future__ import annotations

from pathlib import Path

from sglang_eagle_sizing.smoke import classes, models


def build_target(spec: models.TargetSpec, folder: Path) -> Path:
    if not spec.own_class:
        return models.build_target(spec, folder)
    if spec.craft != "shift":
        raise ValueError(f"{spec.architecture}: only the shift craft")
    return classes.build_class_target(spec, folder)
