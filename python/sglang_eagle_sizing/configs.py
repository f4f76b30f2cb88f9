"""Load a drafter/target pair of config folders as SGLang ``ModelConfig``s, on the CPU, offline.

Some real configs do not load as they are in SGLang 0.5.11 on a machine without a GPU or the
network. Where the obstacle has nothing to do with hidden sizes, the loader adapts a temporary
copy and says exactly what it changed; where it cannot, it raises ``ConfigError`` naming the
file and the key. The original folders are never modified.

- ``auto_map`` naming remote code that is not in the folder: dropped (transformers knows the
  architecture natively).
- ``model_type`` missing, or unknown to transformers: taken from the architecture
  (``DeepseekV3ForCausalLMNextN`` -> ``deepseek_v3``, ``LlamaForCausalLMEagle3`` -> ``llama``).
- ``quantization_config`` that SGLang rejects on this platform (e.g. ``mxfp4``): dropped;
  weight quantization does not change hidden sizes.
- the ``speculators`` format (``Eagle3Speculator``): not a model SGLang 0.5.11 loads; error.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HEAD_SUFFIXES = ("Eagle3", "Eagle", "NextN", "MTP")


class ConfigError(Exception):
    """A config folder that cannot be loaded; the message names the file and key."""


@dataclass
class LoadedPair:
    draft: object  # sglang ModelConfig
    target: object  # sglang ModelConfig
    draft_path: Path
    target_path: Path
    #: what was changed in a temporary copy so that the config loads, one line each
    adaptations: list[str] = field(default_factory=list)


def _read(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None


def _known_model_types() -> set[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return set(CONFIG_MAPPING_NAMES)


def _model_type_for(architecture: str) -> str | None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    by_class = {cls: model_type for model_type, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
    for suffix in ("", *HEAD_SUFFIXES):
        base = architecture[: -len(suffix)] if suffix and architecture.endswith(suffix) else architecture
        if base in by_class:
            return by_class[base]
    return None


def _adapt(folder: Path, config: dict, quantization_supported) -> tuple[dict, list[str]]:
    """The config as it can load, and what was changed (empty: loads as it is)."""
    path = folder / "config.json"
    notes: list[str] = []
    config = dict(config)
    architectures = config.get("architectures") or []
    if "speculators_config" in config or "Eagle3Speculator" in architectures:
        raise ConfigError(
            f"{path}: architectures={architectures!r} is the speculators format, which "
            "SGLang 0.5.11 does not load (no model_type for transformers); convert the "
            "drafter to a LlamaForCausalLMEagle3 config first"
        )
    auto_map = config.get("auto_map")
    if isinstance(auto_map, dict):
        missing = sorted(
            {ref.split(".")[0] + ".py" for ref in auto_map.values() if isinstance(ref, str)}
            - set(os.listdir(folder))
        )
        if missing:
            del config["auto_map"]
            notes.append(f"{path}: dropped auto_map (remote code {', '.join(missing)} is not here)")
    model_type = config.get("model_type")
    if model_type not in _known_model_types():
        derived = _model_type_for(architectures[0]) if architectures else None
        if derived is None:
            raise ConfigError(
                f"{path}: model_type={model_type!r} is unknown to transformers and "
                f"architectures={architectures!r} names no architecture it knows"
            )
        config["model_type"] = derived
        notes.append(
            f"{path}: model_type {model_type!r} -> {derived!r} (from architecture {architectures[0]})"
        )
    quantization = config.get("quantization_config")
    if isinstance(quantization, dict) and not quantization_supported(quantization.get("quant_method")):
        del config["quantization_config"]
        notes.append(
            f"{path}: dropped quantization_config (quant_method="
            f"{quantization.get('quant_method')!r} is not available on this platform; "
            "it does not change hidden sizes)"
        )
    return config, notes


def _quantization_supported(method) -> bool:
    from sglang.srt.layers.quantization import QUANTIZATION_METHODS

    return method in QUANTIZATION_METHODS


def load_pair(draft_folder: str | Path, target_folder: str | Path) -> LoadedPair:
    """Both configs as ``ModelConfig``s (draft with ``is_draft_model=True``)."""
    from sglang.srt.configs.model_config import ModelConfig

    draft_folder, target_folder = Path(draft_folder), Path(target_folder)
    notes: list[str] = []
    loaded = []
    scratch = Path(tempfile.mkdtemp(prefix="sglang-eagle-sizing-"))
    try:
        for name, folder in (("draft", draft_folder), ("target", target_folder)):
            config, changed = _adapt(folder, _read(folder), _quantization_supported)
            load_from = folder
            if changed:
                load_from = scratch / name
                shutil.copytree(folder, load_from)
                (load_from / "config.json").write_text(json.dumps(config, indent=2))
                notes.extend(changed)
            try:
                loaded.append(ModelConfig(str(load_from), is_draft_model=name == "draft"))
            except Exception as exc:  # transformers/SGLang raise many types; name the file
                raise ConfigError(
                    f"{folder / 'config.json'}: SGLang cannot load it: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}"
                ) from None
            if changed:
                # Report the original folder, not the scratch copy, in SGLang's errors.
                loaded[-1].model_path = str(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return LoadedPair(loaded[0], loaded[1], draft_folder, target_folder, notes)
