"""Small structural helpers the rules share: reading expressions, building black-formatted code."""

from __future__ import annotations

import contextlib
import contextvars
import textwrap
from collections.abc import Iterator

import black
import libcst as cst

#: SGLang formats with black's defaults.
LINE_LENGTH = 88
#: the line length of the tree being rewritten (its pyproject.toml's black/ruff setting)
_LINE_LENGTH: contextvars.ContextVar[int] = contextvars.ContextVar(
    "line_length", default=LINE_LENGTH
)


@contextlib.contextmanager
def line_length(length: int | None) -> Iterator[None]:
    """Format what the rules insert at ``length`` columns (``None``: black's 88) inside."""
    token = _LINE_LENGTH.set(length or LINE_LENGTH)
    try:
        yield
    finally:
        _LINE_LENGTH.reset(token)

_EMPTY_MODULE = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    """Source of a node, on one logical line where the node allows it."""
    return _EMPTY_MODULE.code_for_node(node)


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def same_expression(node: cst.CSTNode, source: str) -> bool:
    """Whether ``node`` is the expression ``source``, whitespace and parentheses aside."""
    try:
        other = cst.parse_expression(source)
    except cst.ParserSyntaxError:
        return False
    return node.deep_equals(other) or _normal(node) == _normal(other)


def _normal(node: cst.CSTNode) -> str:
    return "".join(code_of(node).split())


def keyword_arg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def mentions_hidden_width(node: cst.CSTNode) -> bool:
    """Whether an expression reads a hidden width: ``*hidden_size*`` names or attributes."""
    found = False

    class _Visitor(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            nonlocal found
            if "hidden_size" in n.value:
                found = True

    node.visit(_Visitor())
    return found


def call_name(node: cst.CSTNode) -> str | None:
    """``torch.zeros`` for ``torch.zeros(...)``, else None."""
    if isinstance(node, cst.Call):
        return dotted(node.func)
    return None


def black_format(source: str, column: int) -> str:
    """Format statements as black would at indentation ``column``."""
    mode = black.Mode(line_length=max(_LINE_LENGTH.get() - column, 20))
    return black.format_str(textwrap.dedent(source), mode=mode)


class _BareBlankLines(cst.CSTTransformer):
    """Blank lines carry no indentation (no trailing whitespace once placed in a block)."""

    def leave_EmptyLine(self, original_node, updated_node):
        if updated_node.comment is None:
            return updated_node.with_changes(indent=False, whitespace=cst.SimpleWhitespace(""))
        return updated_node


def statements(source: str, column: int = 0) -> list[cst.BaseStatement]:
    """Parse black-formatted statements, ready to be placed at indentation ``column``."""
    module = cst.parse_module(black_format(source, column)).visit(_BareBlankLines())
    return list(module.body)


def statement(source: str, column: int = 0) -> cst.BaseStatement:
    (only,) = statements(source, column)
    return only


def with_comment(stmt: cst.BaseStatement, *lines: str) -> cst.BaseStatement:
    """Put ``# line`` comments right above a statement (after its existing leading lines)."""
    comments = [cst.EmptyLine(comment=cst.Comment("# " + line)) for line in lines]
    return stmt.with_changes(leading_lines=[*stmt.leading_lines, *comments])


def has_comment(stmt: cst.BaseStatement, text: str) -> bool:
    return any(
        line.comment is not None and text in line.comment.value
        for line in getattr(stmt, "leading_lines", ())
    )


class _ReadNames(cst.CSTVisitor):
    """Names an expression or statement reads (not the names it assigns, attribute names or
    keyword names)."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.read.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        if isinstance(node.target, cst.Name):
            return False  # a plain local assigned, not read
        return True


def names_read(node: cst.CSTNode) -> set[str]:
    reader = _ReadNames()
    node.visit(reader)
    return reader.read


def local_assigned(stmt: cst.CSTNode) -> str | None:
    """``x`` for a one-statement line ``x = <expression>``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
        ):
            return small.targets[0].target.value
    return None


class _DropLocals(cst.CSTTransformer):
    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names
        self.dropped: list[str] = []

    def leave_IndentedBlock(self, original_node, updated_node):
        body = [
            s
            for s in updated_node.body
            if not (local_assigned(s) in self.names and not self._is_kept(s))
        ]
        if not body or len(body) == len(updated_node.body):
            return updated_node
        for s in updated_node.body:
            if s not in body:
                self.dropped.append(local_assigned(s))
        return updated_node.with_changes(body=body)

    def _is_kept(self, stmt: cst.SimpleStatementLine) -> bool:
        # A read of a hidden width or dtype, or of attributes only (no call that could do
        # work of the fork's own): the local goes; anything else stays.
        value = stmt.body[0].value
        if mentions_hidden_width(value) or "dtype" in code_of(value):
            return False
        return _calls(value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function's locals are its own


def _calls(node: cst.CSTNode) -> bool:
    found = False

    class _Visitor(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            nonlocal found
            found = True

        def visit_Await(self, n: cst.Await) -> None:
            nonlocal found
            found = True

    node.visit(_Visitor())
    return found


def drop_unused_locals(
    function: cst.FunctionDef, names: set[str]
) -> cst.FunctionDef:
    """Remove ``name = <hidden width or dtype read, or attribute read>`` lines of
    ``function`` for each of ``names`` the function no longer reads: the local fed only an
    expression a rule replaced. A local the function still reads anywhere, or one whose value
    calls anything else, stays."""
    unread = {n for n in names if n not in names_read(function.body)}
    if not unread:
        return function
    dropper = _DropLocals(unread)
    body = function.body.visit(dropper)
    return function.with_changes(body=body)
