"""The fork's tests as a release takes them (``sites.test_files``): the test files are written
for 0.5.23; a release without what a method needs loses the method, one without a model file's
capture loses its rows, and one whose runtime looks older (``sites.RUNTIME_IDIOMS``) gets the
stand-ins in its own idiom:

- no ``SpawnRanks`` (before 0.5.21): ``publish(server_args, role=...)`` without ``ranks=``;
- no ``snapshot_context`` (before 0.5.19): a test's published context is cleared after it
  (``self.addCleanup(reset_context)``), not saved and put back;
- parallel groups as ``parallel_state``'s globals (before 0.5.21): each
  ``with get_parallel().override(<x>_group=..., ...):`` also patches those globals, in a
  ``with mock.patch.multiple(parallel_state, ...):`` inside it;
- a KV index translator that fills the rows itself (0.5.20-0.5.21): the stand-in's
  ``pack_read_stream=lambda plan, **kwargs: ...`` is ``fill_packed_read_stream=lambda
  **kwargs: ...`` (the same keywords, no plan).
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from sglang_eagle_sizing.syntax import keyword_argument

#: the facts of ``sites.RUNTIME_IDIOMS`` this module writes for
RUNTIME_FACTS = ("spawn_ranks", "snapshot_context", "groups_in_context", "packs_read_plans")
#: a group of the runtime context, and the ``parallel_state`` global that held it before
GROUP_GLOBALS = {"tp_group": "_TP", "attn_tp_group": "_ATTN_TP", "pp_group": "_PP"}
RUNTIME_CONTEXT = "sglang.srt.runtime_context"


def for_release(data: bytes, methods: set[str], models: set[str], older: set[str]) -> bytes:
    """``data`` without the test methods ``methods`` and the class-table rows of the model
    files ``models``, in the idiom of a runtime without the facts ``older``."""
    module = cst.parse_module(data.decode("utf-8"))
    rewrite = _ForRelease(methods, models, older)
    module = module.visit(rewrite)
    if rewrite.patched_groups:
        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, "unittest", "mock")
        AddImportsVisitor.add_needed_import(context, "sglang.srt.distributed", "parallel_state")
        module = AddImportsVisitor(context).transform_module(module)
    return module.code.encode("utf-8")


def _names_model(value: cst.CSTNode, models: set[str]) -> bool:
    return isinstance(value, cst.SimpleString) and value.evaluated_value in models


def _dropping(items, drop) -> list:
    """``items`` (arguments or imported names) without those ``drop`` says, the last kept
    taking the comma and whitespace of the last one given (a trailing comma stays one)."""
    items = list(items)
    kept = [item for item in items if not drop(item)]
    if kept and items and kept[-1] is not items[-1]:
        kept[-1] = kept[-1].with_changes(comma=items[-1].comma)
    return kept


class _ForRelease(cst.CSTTransformer):
    def __init__(self, methods: set[str], models: set[str], older: set[str]):
        super().__init__()
        self.methods = methods
        self.models = models
        self.older = older
        #: a ``with`` got its ``parallel_state`` patch (the imports it needs are added)
        self.patched_groups = False

    def leave_FunctionDef(self, original_node, updated_node):
        if original_node.name.value in self.methods:
            return cst.RemovalSentinel.REMOVE
        return updated_node

    # -- class tables: ``(("<model file>", ...), ...)`` or ``{"<model file>": [...]}`` -----
    def leave_Tuple(self, original_node, updated_node):
        kept = [
            e
            for e in updated_node.elements
            if not (
                isinstance(e.value, cst.Tuple)
                and e.value.elements
                and _names_model(e.value.elements[0].value, self.models)
            )
        ]
        if len(kept) == len(updated_node.elements):
            return updated_node
        return updated_node.with_changes(elements=kept)

    def leave_Dict(self, original_node, updated_node):
        kept = [
            e
            for e in updated_node.elements
            if not (isinstance(e, cst.DictElement) and _names_model(e.key, self.models))
        ]
        if len(kept) == len(updated_node.elements):
            return updated_node
        return updated_node.with_changes(elements=kept)

    # -- ``publish`` without ranks (no ``SpawnRanks``) -------------------------------------
    def leave_Call(self, original_node, updated_node):
        if "packs_read_plans" in self.older and _keyword(updated_node, "pack_read_stream"):
            return _filling_translator(updated_node)
        if "snapshot_context" in self.older and _restores_context(updated_node):
            return updated_node.with_changes(args=[cst.Arg(cst.Name("reset_context"))])
        if "spawn_ranks" not in self.older or not (
            isinstance(updated_node.func, cst.Name) and updated_node.func.value == "publish"
        ):
            return updated_node
        args = _dropping(
            updated_node.args, lambda a: a.keyword is not None and a.keyword.value == "ranks"
        )
        return updated_node.with_changes(args=args)

    def leave_ImportFrom(self, original_node, updated_node):
        if (
            not {"spawn_ranks", "snapshot_context"} & self.older
            or isinstance(updated_node.names, cst.ImportStar)
            or _dotted(updated_node.module) != RUNTIME_CONTEXT
        ):
            return updated_node
        names = updated_node.names
        if "spawn_ranks" in self.older:
            names = _dropping(names, lambda a: a.evaluated_name == "SpawnRanks")
        if "snapshot_context" in self.older and any(
            a.evaluated_name == "restore_context" for a in names
        ):
            names = [
                a.with_changes(name=cst.Name("reset_context"))
                if a.evaluated_name == "restore_context"
                else a
                for a in _dropping(names, lambda a: a.evaluated_name == "snapshot_context")
            ]
        return updated_node.with_changes(names=names)

    # -- parallel groups as ``parallel_state``'s globals -----------------------------------
    def leave_With(self, original_node, updated_node):
        if "groups_in_context" not in self.older:
            return updated_node
        groups = [
            (GROUP_GLOBALS[arg.keyword.value], arg.value)
            for item in updated_node.items
            if _overrides_context(item.item)
            for arg in item.item.args
            if arg.keyword is not None and arg.keyword.value in GROUP_GLOBALS
        ]
        if not groups:
            return updated_node
        patch = cst.Call(
            func=cst.parse_expression("mock.patch.multiple"),
            args=[
                cst.Arg(cst.Name("parallel_state")),
                *(keyword_argument(name, value) for name, value in groups),
            ],
        )
        self.patched_groups = True
        inner = cst.With(items=[cst.WithItem(patch)], body=updated_node.body)
        return updated_node.with_changes(body=cst.IndentedBlock(body=[inner]))


def _restores_context(call: cst.Call) -> bool:
    """``<test>.addCleanup(restore_context, snapshot_context())``."""
    return (
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "addCleanup"
        and [a.value.value if isinstance(a.value, cst.Name) else None for a in call.args][:1]
        == ["restore_context"]
    )


def _keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _filling_translator(call: cst.Call) -> cst.Call:
    """The translator stand-in ``SimpleNamespace(pack_read_stream=lambda plan, **kw: ...)``
    as 0.5.20-0.5.21 read it: ``fill_packed_read_stream=lambda **kw: ...`` and no
    translation (``is_translating=False``)."""
    args = []
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "pack_read_stream":
            params = arg.value.params
            arg = arg.with_changes(
                keyword=cst.Name("fill_packed_read_stream"),
                value=arg.value.with_changes(params=params.with_changes(params=params.params[1:])),
            )
        args.append(arg)
    # one keyword a line, as the call is laid out: the new one last, before the ``)``
    last = args[-1]
    flag = keyword_argument(
        "is_translating",
        cst.Name("False"),
        # black's trailing comma, before the ``)``'s line
        comma=cst.Comma(whitespace_after=last.whitespace_after_arg)
        if isinstance(last.comma, cst.MaybeSentinel)
        else last.comma,
        whitespace_after_arg=cst.SimpleWhitespace("")
        if isinstance(last.comma, cst.MaybeSentinel)
        else last.whitespace_after_arg,
    )
    args[-1] = last.with_changes(
        comma=cst.Comma(whitespace_after=call.whitespace_before_args),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    return call.with_changes(args=[*args, flag])


def _overrides_context(node: cst.CSTNode) -> bool:
    """``get_parallel().override(...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "override"
        and isinstance(node.func.value, cst.Call)
        and isinstance(node.func.value.func, cst.Name)
        and node.func.value.func.value == "get_parallel"
    )


def _dotted(node: cst.CSTNode | None) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""
