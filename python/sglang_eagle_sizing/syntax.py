"""Small structural helpers the rules share: reading expressions, building black-formatted code."""

from __future__ import annotations

import textwrap

import black
import libcst as cst

#: SGLang formats with black's defaults.
LINE_LENGTH = 88

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
    mode = black.Mode(line_length=max(LINE_LENGTH - column, 20))
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
