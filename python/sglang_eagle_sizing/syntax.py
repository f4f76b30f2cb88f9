"""Small structural helpers the rules share: reading expressions, building black-formatted code."""

from __future__ import annotations

import ast
import contextlib
import contextvars
import re
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
    return "".join(code_of(unparenthesized(node)).split())


def unparenthesized(node: cst.CSTNode) -> cst.CSTNode:
    """``node`` without the parentheses around it (``(a.b)`` is ``a.b``)."""
    if getattr(node, "lpar", None):
        return node.with_changes(lpar=[], rpar=[])
    return node


def keyword_argument(name: str, value: cst.BaseExpression, **changes) -> cst.Arg:
    """``name=value``, black's way (no spaces around ``=``); ``changes``: the ``Arg``'s other
    fields (its comma, the whitespace after it)."""
    no_space = cst.SimpleWhitespace("")
    return cst.Arg(
        value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space),
        **changes,
    )


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
    """Format statements as black would at indentation ``column``; then wrap the comments
    and docstrings black leaves alone, where a line of theirs is too long."""
    width = max(_LINE_LENGTH.get() - column, 20)
    formatted = black.format_str(textwrap.dedent(source), mode=black.Mode(line_length=width))
    return wrap_prose(formatted, width)


def _fill(words: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        words, width, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )


def _wrap_comment_runs(lines: list[str], width: int) -> None:
    """Rewrap each run of whole-line comments (same indentation) that has a line over
    ``width``, as one paragraph."""
    index = 0
    while index < len(lines):
        match = re.match(r"( *)# ", lines[index])
        if match is None:
            index += 1
            continue
        indent = match.group(1)
        end = index
        while end < len(lines) and lines[end].startswith(indent + "# "):
            end += 1
        run = lines[index:end]
        if any(len(line) > width for line in run):
            words = " ".join(line[len(indent) + 2 :].strip() for line in run)
            run = _fill(words, width, indent + "# ", indent + "# ")
            lines[index:end] = run
        index += len(run)


def _wrap_docstrings(text: str, lines: list[str], width: int) -> None:
    """Rewrap each paragraph (blank-line separated; ``- `` items one by one) of a docstring
    that has a line over ``width``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    spans = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            spans.append((body[0].lineno - 1, body[0].end_lineno))
    for start, end in sorted(spans, reverse=True):
        if all(len(line) <= width for line in lines[start:end]):
            continue
        indent = re.match(r" *", lines[start]).group(0)
        wrapped: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            items: list[list[str]] = []
            for line in paragraph:
                if line.strip().startswith("- ") or not items:
                    items.append([line])
                else:
                    items[-1].append(line)
            for item in items:
                if all(len(line) <= width for line in item):
                    wrapped.extend(item)
                    continue
                rest = indent + ("  " if item[0].strip().startswith("- ") else "")
                words = " ".join(line.strip() for line in item)
                wrapped.extend(_fill(words, width, indent, rest))
            paragraph.clear()

        for line in lines[start:end]:
            if line.strip() in ("", '"""'):
                flush()
                wrapped.append(line)
            else:
                paragraph.append(line)
        flush()
        lines[start:end] = wrapped


#: a line that is one string literal (``"..."`` or ``f"..."``), maybe followed by a comma
_STRING_LINE = re.compile(r'( *)(f?)"((?:[^"\\]|\\.)*)"(,?)')


def _split_points(body: str, formatted: bool) -> list[int]:
    """Indices of the spaces in a literal's body a line may break after (not inside an
    f-string's ``{...}``)."""
    points, depth, index = [], 0, 0
    while index < len(body):
        pair = body[index : index + 2]
        if formatted and pair in ("{{", "}}"):
            index += 2
            continue
        char = body[index]
        if formatted and char in "{}":
            depth += 1 if char == "{" else -1
        elif char == " " and depth == 0:
            points.append(index)
        index += 1
    return points


def _has_placeholder(piece: str) -> bool:
    return "{" in piece.replace("{{", "").replace("}}", "")


def _rewrap_strings(run: list[str], width: int) -> list[str]:
    """Consecutive lines of string literals (one implicit concatenation, the last maybe
    with a comma), filled again up to ``width`` columns where their spaces allow; an ``f``
    prefix only on the pieces with a placeholder."""
    parts = [_STRING_LINE.fullmatch(line).groups() for line in run]
    indent, comma = parts[0][0], parts[-1][3]
    formatted = any(prefix == "f" for _, prefix, _, _ in parts)
    body = "".join(
        text if prefix == "f" or not formatted else text.replace("{", "{{").replace("}", "}}")
        for _, prefix, text, _ in parts
    )
    room = width - len(indent) - len("f" if formatted else "") - 2
    pieces = []
    while len(body) > room:
        fits = [i for i in _split_points(body, formatted) if i + 1 <= room and i + 1 < len(body)]
        if not fits:
            break
        pieces.append(body[: fits[-1] + 1])
        body = body[fits[-1] + 1 :]
    pieces.append(body)
    lines = []
    for piece in pieces:
        if formatted and not _has_placeholder(piece):
            piece, formatted_piece = piece.replace("{{", "{").replace("}}", "}"), False
        else:
            formatted_piece = formatted
        lines.append(f'{indent}{"f" if formatted_piece else ""}"{piece}"')
    lines[-1] += comma
    return lines


def _split_long_strings(text: str, lines: list[str], width: int) -> None:
    """Fill again each string literal (or implicit concatenation) that has its lines to
    itself, inside brackets, where one of them is too long (black leaves strings whole)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    statements = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    spans = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Constant, ast.JoinedStr))
            and (isinstance(node, ast.JoinedStr) or isinstance(node.value, str))
            and id(node) not in statements
        ):
            rows = range(node.lineno - 1, node.end_lineno)
            if all(_STRING_LINE.fullmatch(lines[row]) for row in rows) and any(
                len(lines[row]) > width for row in rows
            ):
                spans.add((rows.start, rows.stop))
    for start, stop in sorted(spans, reverse=True):
        lines[start:stop] = _rewrap_strings(lines[start:stop], width)


def wrap_prose(text: str, width: int) -> str:
    """``text`` (black-formatted statements) with its whole-line comments, docstrings and
    string literals wrapped at ``width`` where a line of theirs is longer (black wraps code
    only)."""
    lines = text.split("\n")
    if all(len(line) <= width for line in lines):
        return text
    _split_long_strings(text, lines, width)
    text = "\n".join(lines)
    _wrap_docstrings(text, lines, width)
    _wrap_comment_runs(lines, width)
    return "\n".join(lines)


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


def statements_with_comments(source: str, column: int = 0) -> list[cst.BaseStatement]:
    """``statements``, keeping the comment lines above the first one (a module would take
    them as its header)."""
    return statements("pass\n" + source.lstrip("\n"), column)[1:]


def statement(source: str, column: int = 0) -> cst.BaseStatement:
    (only,) = statements(source, column)
    return only


def with_comment(
    stmt: cst.BaseStatement, *lines: str, column: int | None = None
) -> cst.BaseStatement:
    """Put ``# line`` comments right above a statement (after its existing leading lines);
    at indentation ``column``, rewrapped as one paragraph when a line would pass the tree's
    line length."""
    if column is not None:
        width = _LINE_LENGTH.get() - column
        if any(len(line) + 2 > width for line in lines):
            lines = tuple(line[2:] for line in _fill(" ".join(lines), width, "# ", "# "))
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
        if isinstance(node.target, cst.Tuple):  # `a, b = ...`: a and b are assigned
            for element in node.target.elements:
                if not isinstance(element.value, cst.Name):
                    element.value.visit(self)
            return False
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

    def leave_AssignTarget(self, original_node, updated_node):
        # `pool, model_config = ...`: a name no longer read becomes `_`.
        target = updated_node.target
        if not isinstance(target, cst.Tuple):
            return updated_node
        elements = [
            e.with_changes(value=cst.Name("_"))
            if isinstance(e.value, cst.Name) and e.value.value in self.names
            else e
            for e in target.elements
        ]
        return updated_node.with_changes(target=target.with_changes(elements=elements))

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


# -- small helpers both families' rules use ------------------------------------------


def contains(node: cst.CSTNode, predicate) -> bool:
    """Whether ``predicate`` holds for ``node`` or a node inside it."""
    found = False

    class _Visitor(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if predicate(n):
                found = True
            return not found

    node.visit(_Visitor())
    return found


def assigned(stmt: cst.CSTNode) -> str | None:
    """``self.x`` for ``self.x = ...`` or ``self.x: T = ...``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return dotted(small.targets[0].target)
        if isinstance(small, cst.AnnAssign):
            return dotted(small.target)
    return None


def assigns(stmt: cst.CSTNode, target: str) -> bool:
    """Whether ``stmt`` is the one statement ``target = ...``."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Assign)
        and len(stmt.body[0].targets) == 1
        and dotted(stmt.body[0].targets[0].target) == target
    )


def flat(node: cst.CSTNode) -> str:
    """``node``'s code without any whitespace."""
    return "".join(code_of(node).split())


def line_is(stmt: cst.CSTNode, source: str) -> bool:
    """Whether ``stmt`` is the one-line statement ``source``, whitespace aside."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and flat(stmt.body[0]) == "".join(source.split())
    )
