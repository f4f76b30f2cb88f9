"""What one SGLang tree of the 0.5.23 family computes for a drafter/target pair, from its own
code: run by ``report`` (``report/release_0_5_23.py``) in that family's environment, with the
tree first on ``sys.path``. It imports nothing of this package.

    python report_probe.py DRAFT TARGET ALGORITHM

Prints ``REPORT-JSON {...}``. What it runs, all on the CPU and from config folders (no weights):

- ``ServerArgs`` as a server builds them (the tree's argument resolution, its hooks included),
  and the draft ``ModelConfig`` the draft runner gets (``from_server_args``,
  ``is_draft_model=True``);
- ``get_draft_recurrent_hidden_state_spec_from_config`` (the width and dtype every idle input,
  the draft CUDA-graph buffer and the PD metadata buffer take), and
  ``get_draft_input_from_target_hidden_dim`` on a stand-in runner holding that config (the
  extend buffers' width);
- the drafter's ``fc``, built on the meta device from the draft config (no decoder layers):
  ``LlamaModel`` of ``models/llama_eagle3.py``, or ``_get_eagle_aux_layer_count`` of
  ``models/kimi_k25_eagle3.py``;
- the target's capture: ``resolve_spec_aux_hidden_state_config`` (what the target runner
  resolves), then ``configure_aux_hidden_state_capture`` with it on a stand-in of the target's
  own class (``capture_rules_probe.py`` / ``capture_standin.py`` of this package's folder,
  loaded by path; inner ``model`` / ``language_model`` built as the class's ``__init__``
  builds them): the layers whose input it captures, which are the indices into transformers'
  ``output_hidden_states``; and what the class declares it captures, if it declares it
  (``get_eagle3_layers_to_capture`` of a patched tree, asked of the class: ``declared``).

A target config with a ``quantization_config`` is read from a scratch copy without it (the
report reads configs; the CPU build registers no mxfp4), and ``adaptations`` says so; so is an
``auto_map`` whose remote code is not in the folder.

A ``ValueError`` the tree raises while reading the pair (a drafter it refuses) is the
``refusal``; the values it could not compute are ``None``.
"""

import argparse
import copy
import json
import logging
import os
import sys
import tempfile
import warnings
from types import SimpleNamespace


def _dtype(value):
    return None if value is None else str(value)


def _fc(draft, server_args):
    """(in_features, which model) of the drafter's fc, or (None, None) for another drafter."""
    import torch

    from sglang.srt.runtime_context import get_parallel

    architecture = (draft.hf_config.architectures or [""])[0]
    if architecture == "LlamaForCausalLMEagle3":
        from sglang.srt.models.llama_eagle3 import LlamaModel

        config = copy.deepcopy(draft.hf_config)
        config.num_hidden_layers = 0  # fc does not depend on the decoder layers
        group = SimpleNamespace(rank_in_group=0, world_size=1)
        with torch.device("meta"), get_parallel().override(tp_group=group, attn_tp_group=group):
            return LlamaModel(config).fc.in_features, "models/llama_eagle3.py LlamaModel.__init__"
    if "Eagle3" in architecture and "Kimi" in architecture:
        from sglang.srt.models.kimi_k25_eagle3 import _get_eagle_aux_layer_count

        hidden = getattr(draft.hf_config, "target_hidden_size", None) or draft.hidden_size
        return (
            hidden * _get_eagle_aux_layer_count(draft.hf_config),
            "models/kimi_k25_eagle3.py Eagle3MLAModel.__init__",
        )
    return None, None


def _capture_rules():
    """``capture_rules_probe.py`` (the capture-rules table's probe, with its stand-in builder
    ``capture_standin.py``), by path: one implementation of the target's capture."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().with_name("capture_rules_probe.py")
    spec = importlib.util.spec_from_file_location("capture_rules_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _captured(server_args, target):
    """The runner's resolved aux-state config and what the target class captures with it:
    ``configure_aux_hidden_state_capture`` (every parameter from the struct's field of the
    same name) on a stand-in of the target's own class (``capture_standin.py``)."""
    from sglang.srt.models.registry import ModelRegistry

    rules = _capture_rules()
    struct = rules.resolve_struct(server_args, target)
    out = {
        "eagle_use_aux_hidden_state": struct.eagle_use_aux_hidden_state,
        "layer_ids": struct.eagle_aux_hidden_state_layer_ids,
        # hidden-state indices handed as they are (a patched 0.5.23 tree's top-level ids)
        "hidden_state_ids": getattr(struct, "eagle_aux_hidden_state_indices", None),
        "captured_hidden_states": None,
    }
    if not struct.eagle_use_aux_hidden_state:
        return out
    call, _ = rules.configure_call(struct)
    model_class, _ = ModelRegistry.resolve_model_cls(target.hf_config.architectures)
    out["target_class"] = model_class.__name__
    out["capture_method"] = rules.capture_method(model_class)
    out["declared"] = rules.declared_rule(
        model_class,
        target.hf_config,
        struct.eagle_aux_hidden_state_layer_ids,
        out["hidden_state_ids"],
    )
    try:
        out.update(rules.capture_of(model_class, target.hf_config, call))
    except ValueError as exc:  # the runner's start-up refusal
        out["refusal"] = " ".join(str(exc).split())
    except Exception as exc:  # noqa: BLE001
        # the class's own refusal, or what stopped it
        out["capture_error"] = rules.standin.one_line(exc)
    return out


#: the suffixes of a drafter's architecture over its base model's (configs.HEAD_SUFFIXES)
HEAD_SUFFIXES = ("Eagle3", "Eagle", "NextN", "MTP")


def _known_model_types() -> set:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return set(CONFIG_MAPPING_NAMES)


def _model_type_for(architecture: str):
    """transformers' model type of ``architecture`` (or of its base, without a drafter's
    suffix), or None."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    by_class = {cls: kind for kind, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
    for suffix in ("", *HEAD_SUFFIXES):
        if suffix and not architecture.endswith(suffix):
            continue
        base = architecture[: -len(suffix)] if suffix else architecture
        if base in by_class:
            return by_class[base]
    return None


def _readable(folder: str, scratch: str, name: str) -> tuple[str, list[str]]:
    """The config folder, or a scratch copy of it that the CPU build reads, and what was left
    out or derived: a ``quantization_config`` (the report reads configs, not weights; the CPU
    build registers no mxfp4), an ``auto_map`` whose remote code is not in the folder
    (transformers would ask for ``trust_remote_code``), a ``model_type`` transformers does not
    know (derived from the architecture, as the 0.5.11 report's ``configs.load_pair`` does). A
    speculators-format config is left as it is: the tree reads that format itself."""
    import shutil
    from pathlib import Path

    config_path = Path(folder) / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    notes = []
    quantization = config.pop("quantization_config", None)
    if quantization is not None:
        method = quantization.get("quant_method", "?") if isinstance(quantization, dict) else "?"
        notes.append(
            f"{config_path}: quantization_config ({method}) left out of a scratch copy; the "
            "report reads configs, not weights"
        )
    auto_map = config.get("auto_map")
    if isinstance(auto_map, dict) and "speculators_config" not in config:
        missing = sorted(
            {ref.split(".")[0] + ".py" for ref in auto_map.values() if isinstance(ref, str)}
            - {p.name for p in Path(folder).iterdir()}
        )
        if missing:
            del config["auto_map"]
            notes.append(
                f"{config_path}: auto_map left out of a scratch copy (its remote code "
                f"{', '.join(missing)} is not here)"
            )
    model_type = config.get("model_type")
    if "speculators_config" not in config and model_type not in _known_model_types():
        architecture = (config.get("architectures") or [""])[0]
        derived = _model_type_for(architecture)
        if derived is not None:
            config["model_type"] = derived
            given = (
                "no model_type"
                if model_type is None
                else f"model_type {model_type!r} (transformers does not know it)"
            )
            notes.append(
                f"{config_path}: {given} -> {derived!r} (from architecture {architecture})"
            )
    if not notes:
        return folder, []
    copy = Path(scratch) / name
    shutil.copytree(folder, copy)
    (copy / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(copy), notes


def probe(draft_path: str, target_path: str, algorithm: str) -> dict:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.eagle_utils import (
        get_draft_input_from_target_hidden_dim,
        get_draft_recurrent_hidden_state_spec_from_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    out = {"refusal": None}
    spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
    scratch = tempfile.TemporaryDirectory(prefix="report-probe-")
    given = {}
    notes = []
    for name in ("draft", "target"):
        path = draft_path if name == "draft" else target_path
        readable, changed = _readable(path, scratch.name, name)
        given[readable] = path
        notes += changed
        if name == "draft":
            draft_path = readable
        else:
            target_path = readable
    out["adaptations"] = notes
    try:
        server_args = ServerArgs(
            model_path=target_path,
            device="cpu",
            speculative_algorithm=algorithm,
            speculative_draft_model_path=draft_path,
            skip_tokenizer_init=True,
        )
        context = create_context(server_args, role="report", ranks=SpawnRanks(world_rank=0))
        with use_context(context):
            target = ModelConfig.from_server_args(server_args)
            draft = ModelConfig.from_server_args(
                server_args, model_path=draft_path, is_draft_model=True
            )
            out["target_dtype"] = _dtype(target.dtype)
            out["target_hidden_size"] = target.hidden_size
            out["target_num_layers"] = getattr(
                target.hf_text_config, "num_hidden_layers", None
            )
            out["draft_dtype"] = _dtype(draft.dtype)
            out["server_dtype"] = server_args.dtype
            width, dtype = get_draft_recurrent_hidden_state_spec_from_config(
                draft, spec_algorithm
            )
            out["recurrent"] = {"width": width, "dtype": _dtype(dtype)}
            out["carries_draft_hidden_states"] = spec_algorithm.carries_draft_hidden_states()
            runner = SimpleNamespace(model_config=draft, spec_algorithm=spec_algorithm)
            # the extend buffers exist for the EAGLE family only (the draft-extend runner
            # skips STANDALONE, the prefill runner asks is_eagle())
            out["extend"] = {
                "width": get_draft_input_from_target_hidden_dim(runner)
                if spec_algorithm.is_eagle()
                else None,
                "dtype": _dtype(draft.dtype) if spec_algorithm.is_eagle() else None,
            }
            fc_width, fc_site = _fc(draft, server_args)
            out["fc"] = {"width": fc_width, "site": fc_site, "dtype": _dtype(draft.dtype)}
            if spec_algorithm.is_eagle3():
                out.update(_captured(server_args, target))
    except ValueError as exc:
        # named as the user gave it, not as the scratch copy
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        for readable, path in given.items():
            message = message.replace(readable, path)
        out["refusal"] = message
    finally:
        scratch.cleanup()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("algorithm")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    # SGLang logs to stdout: keep it for the JSON line only
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            result = probe(args.draft, args.target, args.algorithm)
        finally:
            sys.stdout = stdout
    print("REPORT-JSON " + json.dumps(result))


if __name__ == "__main__":
    main()
