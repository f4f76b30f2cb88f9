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
- the ``speculators`` format (``speculators_config``; ``Eagle3Speculator``, ``Eagle3DraftModel``):
  converted to the ``LlamaForCausalLMEagle3`` config the patched tree serves for it, by that
  tree's own ``speculators_eagle3_to_llama_config`` (beside its ``get_config``);
  what it refuses (a layer type other than llama, more than one layer) is a ``ConfigError``
  with its message, which names the key. SGLang 0.5.11 itself does not read the format.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HEAD_SUFFIXES = ("Eagle3", "Eagle", "NextN", "MTP")

SPECULATORS_ARCHITECTURES = ("Eagle3Speculator", "Eagle3DraftModel")

#: (a config dict, its path) -> the config dict SGLang loads in its place.
Converter = Callable[[dict, str], dict]


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
    #: keys a config does not set, whose default (transformers', SGLang's) was taken, one
    #: line each
    defaults: list[str] = field(default_factory=list)


#: keys that decide a hidden-state size or dtype; one a config lacks takes a default
DEFAULTED_KEYS = ("hidden_size", "num_hidden_layers", "torch_dtype")


def precheck(folder: str | Path) -> dict:
    """The folder's config.json, read without importing SGLang or transformers: a
    ``ConfigError`` naming the file and key if it is not a JSON object or names no
    architecture (SGLang picks the model class by ``architectures[0]``)."""
    path = Path(folder) / "config.json"
    config = _read(Path(folder))
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: not a JSON object")
    architectures = config.get("architectures")
    if "architectures" not in config:
        raise ConfigError(
            f"{path}: no architectures (SGLang picks the model class by architectures[0])"
        )
    if (
        not isinstance(architectures, list)
        or not architectures
        or not all(isinstance(a, str) and a for a in architectures)
    ):
        raise ConfigError(
            f"{path}: architectures={architectures!r} is not a non-empty list of class names"
        )
    return config


def _defaults(path: Path, raw: dict, model_config) -> list[str]:
    """One line for each ``DEFAULTED_KEYS`` entry ``raw`` does not set (top level or under
    ``text_config``), with the value the loaded config took instead."""
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    found = []
    for key in DEFAULTED_KEYS:
        if key in raw or key in text or (key == "torch_dtype" and ("dtype" in raw or "dtype" in text)):
            continue
        if key == "torch_dtype":
            value = str(getattr(model_config, "dtype", "?")).replace("torch.", "")
            found.append(f"{path}: no torch_dtype; SGLang builds the model in {value}")
            continue
        value = getattr(model_config.hf_text_config, key, None)
        found.append(
            f"{path}: no {key}; it takes the default of {type(model_config.hf_text_config).__name__}"
            f" (transformers): {value}"
        )
    return found


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


def is_speculators(config: dict) -> bool:
    architectures = config.get("architectures") or []
    return "speculators_config" in config or any(a in SPECULATORS_ARCHITECTURES for a in architectures)


def _adapt(
    folder: Path, config: dict, quantization_supported, patched: Path | None = None
) -> tuple[dict, list[str]]:
    """The config as it can load, and what was changed (empty: loads as it is).
    ``patched``: the ``srt`` folder whose reader converts the speculators format."""
    path = folder / "config.json"
    notes: list[str] = []
    config = dict(config)
    if is_speculators(config):
        speculators = speculators_converter(patched) if patched is not None else None
        if speculators is None:
            raise ConfigError(
                f"{path}: architectures={config.get('architectures')!r} is the speculators "
                f"format, which only a patched tree reads ({patched or 'no tree'} has no "
                "speculators_eagle3_to_llama_config)"
            )
        try:
            config = speculators(config, str(path))
        except (ValueError, KeyError, TypeError) as exc:
            message = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
            raise ConfigError(
                f"{message} (the patched tree's speculators_eagle3_to_llama_config)"
            ) from None
        notes.append(
            f"{path}: the speculators format, read by the patched tree's "
            f"speculators_eagle3_to_llama_config as {(config.get('architectures') or ['?'])[0]} "
            "(SGLang 0.5.11 does not read the format: its values are for that config)"
        )
    architectures = config.get("architectures") or []
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
                f"{path}: "
                + ("no model_type" if model_type is None else f"model_type={model_type!r}")
                + " is unknown to transformers and "
                f"architectures={architectures!r} names no architecture it knows"
            )
        config["model_type"] = derived
        given = "no model_type" if model_type is None else f"model_type {model_type!r}"
        notes.append(f"{path}: {given} -> {derived!r} (from architecture {architectures[0]})")
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


def speculators_converter(srt: Path) -> Converter | None:
    """The speculators-format reader of the tree whose ``srt`` folder is given (its own
    ``speculators_eagle3_to_llama_config``, beside ``get_config``), as a function giving the
    config dict SGLang loads; None when that tree has none (0.5.11)."""
    import hashlib
    import importlib
    import importlib.util
    import sys

    from sglang_eagle_sizing.families.release_0_5_11.sites import GET_CONFIG_FILES

    found = [
        (file, (srt / file).read_bytes())
        for file in GET_CONFIG_FILES
        if (srt / file).is_file()
        and b"def speculators_eagle3_to_llama_config(" in (srt / file).read_bytes()
    ]
    if not found:
        return None
    (file, text), path = found[0], srt / found[0][0]
    # A module of the installed package under a private name: the file's relative imports
    # resolve, and the installed module is left alone.
    package = "sglang.srt." + str(Path(file).parent).replace("/", ".")
    name = f"{package}._sglang_eagle_sizing_{hashlib.sha256(text).hexdigest()[:16]}"
    module = sys.modules.get(name)
    if module is None:
        importlib.import_module(package)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    to_llama = module.speculators_eagle3_to_llama_config
    return lambda config, path: to_llama(config, path).to_dict()


def load_pair(
    draft_folder: str | Path, target_folder: str | Path, patched: Path | None = None
) -> LoadedPair:
    """Both configs as ``ModelConfig``s (draft with ``is_draft_model=True``).

    ``patched``: the ``srt`` folder of the patched tree, whose own reader converts a
    speculators-format config (default: the installed tree's, if it has one)."""
    from sglang.srt.configs.model_config import ModelConfig

    if patched is None:
        import sglang

        patched = Path(sglang.__file__).parent / "srt"
    draft_folder, target_folder = Path(draft_folder), Path(target_folder)
    notes: list[str] = []
    defaults: list[str] = []
    loaded = []
    scratch = Path(tempfile.mkdtemp(prefix="sglang-eagle-sizing-"))
    try:
        for name, folder in (("draft", draft_folder), ("target", target_folder)):
            raw = _read(folder)
            config, changed = _adapt(folder, raw, _quantization_supported, patched)
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
                loaded[-1].hf_config.name_or_path = str(folder)
            defaults += _defaults(folder / "config.json", config, loaded[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return LoadedPair(loaded[0], loaded[1], draft_folder, target_folder, notes, defaults)
