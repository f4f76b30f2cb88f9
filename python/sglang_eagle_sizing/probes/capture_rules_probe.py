"""What every model class of one SGLang tree captures for EAGLE-3, by calling its own
``set_eagle3_layers_to_capture`` the way the tree's model runner does. Run by
``scripts/capture_rules_table.py`` in the tree's environment with the tree first on
``sys.path``; imports nothing of this package but ``capture_standin.py``, by path.

    python capture_rules_probe.py CASES_JSON [MODEL_FILE ...]

``CASES_JSON``: ``{"num_layers": L, "target": DIR, "cases": {name: {"draft": DIR,
"declared": ids}}}``. Per case the tree's own code turns the drafter's config into what the
runner hands the model (0.5.23: ``resolve_spec_aux_hidden_state_config``, then
``configure_aux_hidden_state_capture`` with every parameter taken from that struct's field of
the same name; 0.5.9-0.5.11: ``ModelRunner``'s own EAGLE-3 block of its ``__init__``, then
its ``init_aux_hidden_state_capture``), called on a stand-in of each class
(``capture_standin.build``). Prints ``CAPTURE-RULES {...}``.
"""

import ast
import importlib
import importlib.util
import inspect
import json
import logging
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

MARK = "CAPTURE-RULES "
HERE = Path(__file__).resolve().parent


def _standin_module():
    spec = importlib.util.spec_from_file_location(
        "capture_standin", HERE / "capture_standin.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["capture_standin"] = module
    spec.loader.exec_module(module)
    return module


standin = _standin_module()


def model_files(models_dir: Path) -> list[str]:
    """The model files that define ``set_eagle3_layers_to_capture``, by parsing each."""
    found = []
    for path in sorted(models_dir.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        if any(
            isinstance(n, ast.FunctionDef) and n.name == standin.METHOD
            for n in ast.walk(tree)
        ):
            found.append(path.stem)
    return found


def _classes_in_source(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        n.name
        for n in tree.body
        if isinstance(n, ast.ClassDef)
        and any(
            isinstance(f, ast.FunctionDef) and f.name == standin.METHOD for f in n.body
        )
    ]


# -- what the runner hands the model, per family -------------------------------------------
def _server_args(target: str, draft: str):
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=target,
        device="cpu",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=draft,
        skip_tokenizer_init=True,
    )


def configure_call(struct):
    """(call on a model, what it passes): 0.5.23's ``configure_aux_hidden_state_capture``
    with every parameter but ``model`` taken from ``struct``'s field of the same name (the
    ``SpecAuxHiddenStateConfig`` the runner resolved)."""
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture,
    )

    parameters = inspect.signature(configure_aux_hidden_state_capture).parameters
    kwargs = {name: getattr(struct, name) for name in parameters if name != "model"}

    def call(model):
        configure_aux_hidden_state_capture(model=model, **kwargs)

    return call, {k: v for k, v in kwargs.items() if k.startswith("eagle")}


def resolve_struct(server_args, model_config):
    """The ``SpecAuxHiddenStateConfig`` a 0.5.23 target runner resolves (in the tree's
    context)."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return resolve_spec_aux_hidden_state_config(
        server_args=server_args,
        model_config=model_config,
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        is_draft_worker=False,
    )


def resolver_0_5_23(target: str, draft: str):
    """(call on a model, what the runner passes) for a 0.5.23-family tree."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context

    server_args = _server_args(target, draft)
    context = create_context(
        server_args, role="capture-rules", ranks=SpawnRanks(world_rank=0)
    )
    with use_context(context):
        struct = resolve_struct(server_args, ModelConfig.from_server_args(server_args))
    return configure_call(struct)


def capture_of(model_class, hf_config, call) -> dict:
    """What ``call`` (the runner's) makes a stand-in of ``model_class`` holding ``hf_config``
    capture: ``captured_hidden_states`` (indices into output_hidden_states), where it was set
    and whether the class's forward captures the final boundary."""
    obj = standin.build(model_class, hf_config)
    got = standin.capture(obj, call)
    holder = got.pop("holder")
    return {
        "captured_hidden_states": got["captured"],
        "target_class": model_class.__name__,
        "set_on": f"{got['on']} ({got['holder_class']})",
        "final_boundary": standin.final_boundary(type(holder)),
    }


#: what a patched 0.5.23 model class declares: a classmethod giving the hidden-state indices
#: (into transformers' ``output_hidden_states``) its ``set_eagle3_layers_to_capture`` puts in
#: ``layers_to_capture``, and whether its forward captures the last layer's output (index L)
DECLARED = "get_eagle3_layers_to_capture"
FINAL = "eagle3_captures_final_hidden_state"
#: the path of hidden-state indices beside it: the class captures exactly those it is handed
CAPTURE = "set_eagle3_hidden_states_to_capture"


def declared_rule(model_class, hf_config, layer_ids, hidden_state_ids=None) -> dict | None:
    """What ``model_class`` declares it captures for ``layer_ids`` (the ids the runner
    passes; None: the class's default layers), asked of the class with the target's config:
    nothing is built; for ``hidden_state_ids`` (indices the runner hands its
    ``set_eagle3_hidden_states_to_capture``), those. None: the class declares nothing."""
    if hidden_state_ids is not None:
        owner, _ = standin._defining(model_class, CAPTURE)
        if owner is None:
            return None
        return {
            "method": f"{owner.__name__}.{CAPTURE}",
            "captures_final_hidden_state": getattr(model_class, FINAL, False) is True,
            "captured_hidden_states": [int(i) for i in hidden_state_ids],
            "error": None,
        }
    method = getattr(model_class, DECLARED, None)
    if method is None:
        return None
    owner, _ = standin._defining(model_class, DECLARED)
    out = {
        "method": f"{(owner or model_class).__name__}.{DECLARED}",
        "captures_final_hidden_state": getattr(model_class, FINAL, False) is True,
        "captured_hidden_states": None,
        "error": None,
    }
    try:
        out["captured_hidden_states"] = [int(i) for i in method(hf_config, layer_ids)]
    except Exception as exc:  # noqa: BLE001  the class's own refusal, said as it is
        out["error"] = standin.one_line(exc)
    return out


def capture_method(model_class) -> str | None:
    """``Owner.set_eagle3_layers_to_capture``: the class of ``model_class``'s MRO whose method
    the runner calls (None: no class defines it)."""
    owner, _ = standin._defining(model_class, standin.METHOD)
    return None if owner is None else f"{owner.__name__}.{standin.METHOD}"


def _runner_parts(source: str) -> tuple[ast.If, ast.FunctionDef]:
    """From a 0.5.9-0.5.11 ``model_runner.py``: the outermost ``if`` of ``ModelRunner`` that
    sets ``self.eagle_aux_hidden_state_layer_ids``, and its ``init_aux_hidden_state_capture``.
    """
    module = ast.parse(source)
    runner = next(
        n
        for n in module.body
        if isinstance(n, ast.ClassDef) and n.name == "ModelRunner"
    )
    methods = [n for n in runner.body if isinstance(n, ast.FunctionDef)]
    setter = next(m for m in methods if m.name == "init_aux_hidden_state_capture")
    for method in methods:
        for node in ast.walk(method):
            if isinstance(node, ast.If) and any(
                isinstance(t, ast.Attribute)
                and t.attr == "eagle_aux_hidden_state_layer_ids"
                for sub in ast.walk(node)
                if isinstance(sub, ast.Assign)
                for t in sub.targets
            ):
                return node, setter
    raise LookupError("ModelRunner sets no eagle_aux_hidden_state_layer_ids")


def runner_0_5_11(source, filename, namespace, server_args, build_model_config, target):
    """(call on a model, what the runner passes): ``ModelRunner``'s own EAGLE-3 block of a
    0.5.9-0.5.11 ``model_runner.py`` (``source``), run on a stand-in runner whose
    ``_build_model_config`` is ``build_model_config``, then its own
    ``init_aux_hidden_state_capture``; ``namespace``: the module's globals; ``server_args``:
    what the block reads as ``server_args``."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    block, setter = _runner_parts(source)
    runner = SimpleNamespace(
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        is_draft_worker=False,
        eagle_use_aux_hidden_state=False,
        eagle_aux_hidden_state_layer_ids=None,
        dflash_use_aux_hidden_state=False,
        model_config=target,
        _build_model_config=build_model_config,
    )
    code = compile(ast.Module(body=[block], type_ignores=[]), filename, "exec")
    exec(code, namespace, {"self": runner, "server_args": server_args})  # noqa: S102
    functions: dict = {}
    code = compile(ast.Module(body=[setter], type_ignores=[]), filename, "exec")
    exec(code, namespace, functions)  # noqa: S102
    passed = {
        "eagle_use_aux_hidden_state": runner.eagle_use_aux_hidden_state,
        "eagle_aux_hidden_state_layer_ids": runner.eagle_aux_hidden_state_layer_ids,
    }

    def call(model):
        runner.model = model
        functions["init_aux_hidden_state_capture"](runner)

    return call, passed


def resolver_0_5_11(target: str, draft: str):
    """(call on a model, what the runner passes) for the 0.5.9-0.5.11 tree on ``sys.path``."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor import model_runner

    server_args = _server_args(target, draft)

    def build_model_config(_server_args, **kwargs):
        return ModelConfig.from_server_args(server_args, **kwargs)

    return runner_0_5_11(
        Path(model_runner.__file__).read_text(encoding="utf-8"),
        model_runner.__file__,
        dict(vars(model_runner)),
        server_args,
        build_model_config,
        ModelConfig.from_server_args(server_args),
    )


def resolver(target: str, draft: str):
    try:
        importlib.import_module(
            "sglang.srt.model_executor.model_runner_components.attention_backend_setup"
        )
    except ImportError:
        return resolver_0_5_11(target, draft)
    return resolver_0_5_23(target, draft)


# -- the classes -----------------------------------------------------------------------------
def stand_in_config(num_layers: int, architecture: str):
    text = SimpleNamespace(num_hidden_layers=num_layers, architectures=[architecture])
    return SimpleNamespace(
        num_hidden_layers=num_layers, text_config=text, architectures=[architecture]
    )


#: the class contract the 0.5.23 patch declares: what a class captures, from its config
CONTRACT = "get_eagle3_layers_to_capture"
FINAL_FLAG = "eagle3_captures_final_hidden_state"


def declared_by(cls, config, passed) -> dict:
    """What ``cls`` declares it captures for the ids the runner passed (its contract, read
    from the config alone), or what asking raised."""
    layer_ids = passed.get("eagle_aux_hidden_state_layer_ids")
    try:
        return {"declared": list(getattr(cls, CONTRACT)(config, layer_ids))}
    except Exception as exc:  # noqa: BLE001  what the classmethod raised
        return {"declared_raises": standin.one_line(exc)}


def contract_module():
    """The patched 0.5.23 tree's ``eagle3_draft_config`` when it checks each class's capture
    before load (``check_eagle3_capture``), else None."""
    try:
        module = importlib.import_module("sglang.srt.speculative.eagle3_draft_config")
    except ImportError:
        return None
    return module if hasattr(module, "check_eagle3_capture") else None


def class_call(module, cls, config, draft: str, num_layers: int):
    """(call on a model, what it passes) for ``cls`` on a tree that resolves the ids per
    target class before load: the ids its contract gives for the drafter's hidden-state
    indices handed as they are, checked by ``check_eagle3_capture``; the refusal's text
    where it refuses."""
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture,
    )
    from sglang.srt.utils.hf_transformers_utils import get_config

    try:
        draft_hf_config = get_config(draft, trust_remote_code=False)
        parsed = module.parse_eagle3_draft_config(draft_hf_config=draft_hf_config)
        layer_ids = parsed.aux_hidden_state_layer_ids
        indices = getattr(parsed, "aux_hidden_state_indices", None)
        module.check_eagle3_capture(
            cls,
            config,
            num_layers,
            layer_ids,
            draft_hf_config=draft_hf_config,
            declared=layer_ids if indices is None else indices,
            hidden_state_ids=indices,
        )
    except Exception as exc:  # noqa: BLE001  the tree's refusal
        return standin.one_line(exc), None
    fields = {
        "eagle_use_aux_hidden_state": parsed.use_aux_hidden_state,
        "eagle_aux_hidden_state_layer_ids": layer_ids,
        "eagle_aux_hidden_state_indices": indices,
    }

    def call(model):
        configure_aux_hidden_state_capture(
            model=model,
            **fields,
            dflash_use_aux_hidden_state=False,
            dflash_target_layer_ids=None,
            is_dspark=False,
        )

    return call, fields


def class_rows(
    file: str,
    calls: dict,
    num_layers: int,
    passed: dict | None = None,
    drafts: dict | None = None,
) -> list[dict]:
    import sglang

    path = Path(sglang.__file__).parent / "srt" / "models" / f"{file}.py"
    try:
        module = importlib.import_module(f"sglang.srt.models.{file}")
    except Exception as exc:  # noqa: BLE001
        # an import the CPU build cannot do: every class of the file unknown
        reason = f"import sglang.srt.models.{file}: {standin.one_line(exc)}"
        return [
            {"file": file, "class": name, "unknown": reason}
            for name in _classes_in_source(path)
        ]
    entry = getattr(module, "EntryClass", [])
    entry = set(entry if isinstance(entry, (list, tuple)) else [entry])
    rows = []
    for name, cls in vars(module).items():
        if not (
            inspect.isclass(cls)
            and cls.__module__ == module.__name__
            and cls.__name__ == name  # not an alias (EntryClass = X)
            and hasattr(cls, standin.METHOD)
        ):
            continue
        row = {
            "file": file,
            "class": name,
            "registered": cls in entry,
            "unknown": None,
            "cells": {},
            "declares": hasattr(cls, CONTRACT),
            "final_flag": bool(getattr(cls, FINAL_FLAG, False)),
        }
        owner, _ = standin._defining(cls, standin.METHOD)
        row["method_of"] = f"{owner.__module__.rsplit('.', 1)[-1]}.{owner.__name__}"
        holder_cls = None
        per_class = contract_module() if drafts else None
        for case, call in calls.items():
            case_passed = (passed or {}).get(case)
            if per_class is not None:
                call, case_passed = class_call(
                    per_class,
                    cls,
                    stand_in_config(num_layers, name),
                    drafts[case],
                    num_layers,
                )
            if isinstance(call, str):
                row["cells"][case] = {"refused": call}
                continue
            try:
                obj = standin.build(cls, stand_in_config(num_layers, name))
            except Exception as exc:  # noqa: BLE001  any failure is the row's reason
                row["unknown"] = f"stand-in: {standin.one_line(exc)}"
                break
            try:
                got = standin.capture(obj, call)
            except Exception as exc:  # noqa: BLE001  what the class's method raised
                row["cells"][case] = {"raises": standin.one_line(exc)}
                continue
            holder_cls = type(got.pop("holder"))
            if row["declares"] and isinstance(case_passed, dict):
                got.update(declared_by(cls, obj.config, case_passed))
            row["cells"][case] = got
        if row["unknown"] is None and holder_cls is None:
            first = next(iter(row["cells"].values()), {})
            row["unknown"] = (
                first.get("raises") or first.get("refused") or "no case ran"
            )
            unresolved = standin.inner_classes(cls)
            named = {a: e for a, (k, e) in unresolved.items() if k is None}
            if named:
                row["unknown"] += "; not built: " + ", ".join(
                    f"self.{a} = {e}(...) (a class chosen at run time)"
                    for a, e in named.items()
                )
        row["final_boundary"] = (
            None if holder_cls is None else standin.final_boundary(holder_cls)
        )
        rows.append(row)
    return rows


def probe(cases_path: str, only: list[str]) -> dict:
    import sglang

    spec = json.loads(Path(cases_path).read_text())
    calls, passed = {}, {}
    for case, entry in spec["cases"].items():
        try:
            calls[case], passed[case] = resolver(spec["target"], entry["draft"])
        except Exception as exc:  # noqa: BLE001
            # a drafter the tree refuses (or cannot read)
            calls[case] = passed[case] = f"{standin.one_line(exc)}"
    files = model_files(Path(sglang.__file__).parent / "srt" / "models")
    rows = []
    for file in files:
        if only and file not in only:
            continue
        rows.extend(
            class_rows(
                file,
                calls,
                spec["num_layers"],
                passed,
                {case: entry["draft"] for case, entry in spec["cases"].items()},
            )
        )
    return {
        "version": getattr(sglang, "__version__", None),
        "root": str(Path(sglang.__file__).parent),
        "files": files,
        "passed": passed,
        "rows": rows,
    }


def main() -> None:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    with open(
        os.devnull, "w"
    ) as quiet:  # SGLang logs to stdout: keep it for the JSON line
        stdout, sys.stdout = sys.stdout, quiet
        try:
            result = probe(sys.argv[1], sys.argv[2:])
        finally:
            sys.stdout = stdout
    print(MARK + json.dumps(result))


if __name__ == "__main__":
    main()
