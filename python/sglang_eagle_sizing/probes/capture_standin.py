"""A stand-in instance of an SGLang model class on which its own ``set_eagle3_layers_to_capture``
runs, and what that call captured. Imports nothing of this package: probes running in a
release's environment (``capture_rules_probe.py``, ``probes/report_probe.py``, the
0.5.11 ``report``) load this file by path.

The stand-in is ``cls.__new__(cls)`` with ``torch.nn.Module.__init__``: no weights, no
``__init__``. It holds ``config``, ``pp_group`` (the last rank) and, for every
``self.model = X(...)`` / ``self.language_model = X(...)`` in the class's own ``__init__``
(read from its source), a stand-in of ``X`` built the same way with ``X``'s config argument
(``config.text_config`` for a multimodal class) and ``layers``, a ``ModuleList`` of
``num_hidden_layers`` empty modules, so a method that flags ``layers[i]`` runs as it would.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace

#: the attributes an outer class keeps its decoder stack (or the text model) in
INNER = ("model", "language_model")
METHOD = "set_eagle3_layers_to_capture"


class StandInError(Exception):
    """The stand-in could not be built: the message says what was read where."""


def _function_tree(function) -> ast.FunctionDef:
    source = textwrap.dedent(inspect.getsource(function))
    return ast.parse(source).body[0]


def _defining(cls, name: str):
    """(class, function) of ``cls``'s MRO that defines ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass, vars(klass)[name]
    return None, None


def _resolve_name(node, function, owner, locals_: dict):
    """The class ``node`` (the callee of ``self.model = node(...)``) names, or None."""
    globals_ = getattr(function, "__globals__", {})
    if isinstance(node, ast.Name):
        if node.id in locals_:
            return locals_[node.id]
        return globals_.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id == "self":
            return getattr(owner, node.attr, None)
        base = globals_.get(node.value.id)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _class_of(node, function, owner, locals_: dict):
    """The ``nn.Module`` class ``node`` names; a method or function of the class named
    instead (``self._init_model``) gives the class its ``return X(...)`` builds."""
    import torch

    named = _resolve_name(node, function, owner, locals_)
    if inspect.isclass(named):
        return named if issubclass(named, torch.nn.Module) else None
    if inspect.isfunction(named):
        try:
            tree = _function_tree(named)
        except (OSError, TypeError, SyntaxError):
            return None
        for sub in ast.walk(tree):
            if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call):
                klass = _resolve_name(
                    sub.value.func, named, owner, _local_classes(tree, named, owner)
                )
                if inspect.isclass(klass) and issubclass(klass, torch.nn.Module):
                    return klass
    return None


def _local_classes(tree: ast.FunctionDef, function, owner) -> dict:
    """Names a class is bound to inside a function: parameter defaults, imports in its body
    and plain assignments of a class (``cls = X if ... else Y`` takes ``X``)."""
    import importlib

    found = {}
    try:
        for name, parameter in inspect.signature(function).parameters.items():
            if inspect.isclass(parameter.default):
                found[name] = parameter.default
    except (TypeError, ValueError):
        pass
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                try:
                    found.setdefault(
                        alias.asname or alias.name,
                        getattr(importlib.import_module(node.module), alias.name),
                    )
                except Exception:  # noqa: BLE001, S112
                    continue  # an import the CPU build lacks
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            value = node.value.body if isinstance(node.value, ast.IfExp) else node.value
            klass = _resolve_name(value, function, owner, {})
            if inspect.isclass(klass):
                found.setdefault(node.targets[0].id, klass)
    return found


def inner_classes(cls) -> dict[str, tuple]:
    """``{attribute: (class, config expression or None)}`` for ``self.<attribute> = X(...)``
    in the ``__init__`` of ``cls`` and of the classes it inherits from (the most derived
    first, a parameter's default taken from the most derived ``__init__`` that has it); an
    attribute assigned something this cannot name maps to ``(None, what was assigned)``.
    """
    import torch

    inits = [
        vars(k)["__init__"]
        for k in cls.__mro__
        if "__init__" in vars(k)
        and k not in (torch.nn.Module, object)
        and inspect.isfunction(vars(k)["__init__"])
    ]
    trees, locals_ = [], {}
    for init in inits:
        try:
            tree = _function_tree(init)
        except (OSError, TypeError, SyntaxError):
            continue
        trees.append((init, tree))
        for name, value in _local_classes(tree, init, cls).items():
            locals_.setdefault(name, value)
    found: dict[str, tuple] = {}
    for init, tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target = node.targets[0]
            if not (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and target.attr in INNER
            ):
                continue
            value = node.value
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            if not isinstance(value, ast.Call):
                found.setdefault(target.attr, (None, ast.unparse(value)))
                continue
            klass = _class_of(value.func, init, cls, locals_)
            if klass is None or "Missing" in klass.__name__:
                found.setdefault(target.attr, (None, ast.unparse(value.func)))
                continue
            config_arg = next(
                (k.value for k in value.keywords if k.arg == "config"), None
            )
            if config_arg is None and value.args:
                config_arg = value.args[0]
            expression = None if config_arg is None else ast.unparse(config_arg)
            if found.get(target.attr, (None,))[0] is None:
                found[target.attr] = (klass, expression)
    return found


def _config_for(expression: str | None, config):
    """The inner class's config: ``expression`` (from the outer ``__init__``) evaluated with
    ``config`` for its root name, or ``config`` itself."""
    if not expression:
        return config
    root = expression.split(".")[0].split("(")[0]
    try:
        return eval(
            expression, {}, {root: config, "self": SimpleNamespace(config=config)}
        )
    except Exception:  # noqa: BLE001  an expression of run-time state
        return getattr(config, "text_config", None) or config


def _num_layers(config) -> int | None:
    for holder in (config, getattr(config, "text_config", None)):
        value = getattr(holder, "num_hidden_layers", None)
        if isinstance(value, int):
            return value
    return None


def _set(obj, name: str, value) -> None:
    try:
        setattr(obj, name, value)
    except (AttributeError, TypeError):
        pass  # a property of the class: left to the class


def pp_group():
    return SimpleNamespace(
        is_last_rank=True, is_first_rank=True, rank_in_group=0, world_size=1
    )


def build(cls, config, depth: int = 0):
    """A stand-in instance of ``cls`` (see the module's doc)."""
    import torch

    if depth > 3:
        raise StandInError(f"{cls.__name__}: inner models nested deeper than 3")
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    _set(obj, "config", config)
    _set(obj, "pp_group", pp_group())
    for attribute, (klass, expression) in inner_classes(cls).items():
        if klass is None:
            # built at run time from something the source does not name: the call fails
            # (and says so) only if the method reads it
            obj.__dict__.setdefault("_standin_unresolved", {})[attribute] = expression
            continue
        inner = build(klass, _config_for(expression, config), depth + 1)
        setattr(obj, attribute, inner)
    num_layers = _num_layers(config)
    if num_layers is not None and not any(a in vars(obj)["_modules"] for a in INNER):
        # the decoder stack itself (an inner model, or a class called directly)
        _set(
            obj,
            "layers",
            torch.nn.ModuleList(torch.nn.Module() for _ in range(num_layers)),
        )
        _set(obj, "start_layer", 0)
        _set(obj, "end_layer", num_layers)
    return obj


def _parallel_override():
    """The tree's own parallel-state override (0.5.23's ``get_parallel().override``), for
    methods that read ``get_parallel().pp_group``; nothing on trees without one."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        return None
    try:
        return get_parallel().override(pp_group=pp_group())
    except Exception:  # noqa: BLE001  a tree whose override takes no pp_group
        return None


@contextmanager
def tree_state(obj=None):
    """The parallel state a last pipeline rank sees: 0.5.23's ``get_parallel().override``,
    and 0.5.11's module-level ``get_pp_group`` in each stand-in's model module."""
    import sys
    from unittest import mock

    with ExitStack() as stack:
        override = _parallel_override()
        if override is not None:
            stack.enter_context(override)
        if obj is not None:
            modules = {type(o).__module__ for _, o in _walk(obj)}
            for name in sorted(modules):
                module = sys.modules.get(name)
                if module is not None and callable(
                    getattr(module, "get_pp_group", None)
                ):
                    stack.enter_context(
                        mock.patch.object(module, "get_pp_group", pp_group)
                    )
        yield


def _walk(obj, path: str = ""):
    yield path or "self", obj
    for attribute in INNER:
        inner = vars(obj).get("_modules", {}).get(attribute)
        if inner is not None:
            yield from _walk(
                inner, f"{path}.{attribute}" if path else f"self.{attribute}"
            )


def read_back(obj) -> dict:
    """Where the call set ``layers_to_capture`` and what: the holder of the decoder stack
    first; and the layers it flagged ``_is_layer_to_capture``."""
    holders = [(path, o) for path, o in _walk(obj) if "layers_to_capture" in vars(o)]
    if not holders:
        unresolved = {
            p: vars(o).get("_standin_unresolved")
            for p, o in _walk(obj)
            if vars(o).get("_standin_unresolved")
        }
        raise StandInError(
            "the call set layers_to_capture on no module"
            + (f" (not built: {unresolved})" if unresolved else "")
        )
    holders.sort(key=lambda item: "layers" not in vars(item[1]).get("_modules", {}))
    path, holder = holders[0]
    layers = vars(holder).get("_modules", {}).get("layers")
    flagged = (
        None
        if layers is None
        else [
            i
            for i, layer in enumerate(layers)
            if getattr(layer, "_is_layer_to_capture", False)
        ]
    )
    return {
        "captured": [int(i) for i in holder.layers_to_capture],
        "holder": holder,
        "on": path,
        "holder_class": type(holder).__name__,
        "flagged": flagged,
    }


def capture(obj, call) -> dict:
    """``call(obj)`` under the tree's parallel override, then ``read_back``."""
    with tree_state(obj):
        call(obj)
    return read_back(obj)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


def final_boundary(holder_cls) -> str:
    """Whether ``holder_cls.forward`` can hand the final hidden state (index L) to the
    drafter, read from its source: a ``... in self.layers_to_capture`` test on something other
    than the layer loop's index (``self.end_layer``, ``len(self.layers)``) says yes."""
    owner, forward = _defining(holder_cls, "forward")
    if forward is None:
        return "unknown: no forward"
    try:
        tree = _function_tree(forward)
    except (OSError, TypeError, SyntaxError) as exc:
        return f"unknown: {one_line(exc)}"
    loop_names = {
        n.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.For, ast.comprehension))
        for n in ast.walk(node.target)
        if isinstance(n, ast.Name)
    }
    outside = []
    flag_test = False
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute) and node.attr == "_is_layer_to_capture"
        ) or (isinstance(node, ast.Constant) and node.value == "_is_layer_to_capture"):
            flag_test = True
        membership = isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In) for op in node.ops
        )
        if membership and "layers_to_capture" in ast.unparse(node.comparators[0]):
            left = node.left
            if not (isinstance(left, ast.Name) and left.id in loop_names):
                outside.append(ast.unparse(node))
    where = f"{owner.__name__}.forward"
    if not flag_test and "_is_layer_to_capture" in inspect.getsource(owner):
        flag_test = True  # the flag set on each layer, read by a helper of the class
    if outside:
        return f"yes ({where} tests `{outside[0]}`)"
    if flag_test:
        return f"no ({where} captures at a layer's entry, flagged per layer; there is no layer L)"
    return f"no ({where} tests the layer loop's index only)"
