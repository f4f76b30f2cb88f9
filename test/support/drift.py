"""The drift corpus: ways a fork's tree differs from the 0.5.11 release near the sites, each
made by a small edit of the release's files, with the outcome ``apply`` must get.

A variant is a function from the release's site files (``{path from srt/: text}``) to the files
it changes. Fork lines are recognisable: every statement, keyword argument, decorator or ``if``
a variant adds names something ``fork``; ``fork_free`` strips them (and undoes the variant's
renames), so a routed variant's patched files must then parse to the same AST as the pristine
patch. ``fork_statements`` lists a file's fork statements per function, in order, between the
statements the patch left unchanged, so their order is compared statement by statement.

Used by test/test_drift.py (file by file, in-process) and scripts/drift_corpus.py (each variant
a git checkout: ``git apply`` of the pristine diff against ``sglang-eagle-sizing apply .``, the
table in docs/robustness.md).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import black

Files = dict[str, str]

EAGLE = "speculative/eagle_worker.py"
EAGLE_V2 = "speculative/eagle_worker_v2.py"
MULTI = "speculative/multi_layer_eagle_worker.py"
#: the two v1 workers whose extend idle input the rule moves out of its ``if``
EXTEND_IDLE_FILES = (EAGLE, MULTI)
EXTEND_IDLE_CALL = "batch.spec_info = EagleDraftInput.create_idle_input("
EXTEND_METHOD = "forward_draft_extend_after_decode"
#: the formatter runs over these (the speculative/ site files and scheduler.py)
FORMATTED = (
    "managers/scheduler.py",
    "speculative/eagle_draft_cuda_graph_runner.py",
    "speculative/eagle_draft_extend_cuda_graph_runner.py",
    "speculative/eagle_info.py",
    EAGLE,
    EAGLE_V2,
    "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py",
    MULTI,
    "speculative/multi_layer_eagle_worker_v2.py",
)


@dataclass(frozen=True)
class Variant:
    name: str
    #: what the fork did, as the docs table says it
    drift: str
    edit: Callable[[Files], Files]
    #: ``routed``, or ``refused`` with ``refusal``: (file from srt/, a line of that file's
    #: text the refusal names, a fragment of its reason)
    outcome: str = "routed"
    refusal: tuple[str, str, str] | None = None
    #: names the variant renamed, mapped back for the AST comparison
    renames: dict[str, str] = field(default_factory=dict)


# -- editing helpers ------------------------------------------------------------------------
def _statement_at(tree: ast.AST, line: int) -> ast.stmt:
    """The innermost statement spanning ``line``."""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno >= best.lineno and node.end_lineno <= best.end_lineno:
                best = node
    assert best is not None, line
    return best


def _indent(text: str, line: int) -> str:
    source = text.splitlines()[line - 1]
    return source[: len(source) - len(source.lstrip())]


def insert_around(
    text: str, needle: str, before: str | None, after: str | None, within: str = ""
) -> str:
    """Put ``before`` / ``after`` (one statement each) around every statement holding
    ``needle`` on its first line (in the method ``within``, if given), at its indentation."""
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    span = range(1, len(lines) + 1)
    if within:
        method = next(
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == within
        )
        span = range(method.lineno, method.end_lineno + 1)
    starts = [i + 1 for i, line in enumerate(lines) if needle in line and i + 1 in span]
    assert starts, needle
    for start in reversed(starts):
        stmt = _statement_at(tree, start)
        indent = _indent(text, stmt.lineno)
        if after is not None:
            lines.insert(stmt.end_lineno, f"{indent}{after}\n")
        if before is not None:
            lines.insert(stmt.lineno - 1, f"{indent}{before}\n")
    return "".join(lines)


def replace_once(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


#: the first line of each sizing site's statement in 0.5.11, per file (the idle-input
#: assignments and the buffer allocations)
SITE_NEEDLES = {
    EAGLE: ("spec_info = EagleDraftInput.create_idle_input(",),
    EAGLE_V2: ("spec_info = EagleDraftInput.create_idle_input(",),
    "speculative/multi_layer_eagle_worker_v2.py": (
        "spec_info = EagleDraftInput.create_idle_input(",
    ),
    MULTI: ("spec_info = EagleDraftInput.create_idle_input(",),
    "speculative/eagle_info.py": (
        "return EagleVerifyOutput(",
        "draft_input = EagleDraftInput.create_idle_input(",
    ),
}


def _logging(before: bool, after: bool, skip_extend: bool = True) -> Callable[[Files], Files]:
    def edit(files: Files) -> Files:
        out = {}
        for file, needles in SITE_NEEDLES.items():
            text = files[file]
            for needle in needles:
                lines = text.splitlines()
                for number, line in reversed(list(enumerate(lines, 1))):
                    if needle not in line:
                        continue
                    tree = ast.parse(text)
                    stmt = _statement_at(tree, number)
                    extend = file in EXTEND_IDLE_FILES and any(
                        isinstance(n, ast.FunctionDef)
                        and n.name == EXTEND_METHOD
                        and n.lineno <= number <= n.end_lineno
                        for n in ast.walk(tree)
                    )
                    indent = _indent(text, stmt.lineno)
                    body = text.splitlines(keepends=True)
                    if after and not (extend and skip_extend):
                        body.insert(stmt.end_lineno, f'{indent}logger.debug("fork: after")\n')
                    if before:
                        body.insert(stmt.lineno - 1, f'{indent}logger.debug("fork: before")\n')
                    text = "".join(body)
            out[file] = text
        return out

    return edit


#: the workers: what the test formats (the script formats all of FORMATTED)
WORKERS = (EAGLE, EAGLE_V2, MULTI, "speculative/multi_layer_eagle_worker_v2.py")


def _black(length: int, formatted: tuple[str, ...] = WORKERS) -> Callable[[Files], Files]:
    def edit(files: Files) -> Files:
        mode = black.Mode(line_length=length)
        return {file: black.format_str(files[file], mode=mode) for file in formatted}

    return edit


def _renamed_locals(files: Files) -> Files:
    out = {}
    for file in EXTEND_IDLE_FILES:
        text = re.sub(r"\binput_is_idle\b", "was_idle", files[file])
        out[file] = re.sub(r"\bhidden_size = \(", "width = (", text).replace(
            "hidden_size=hidden_size,", "hidden_size=width,"
        )
    return out


def _fork_flag_after_extend_idle(files: Files) -> Files:
    return {
        file: insert_around(
            files[file], EXTEND_IDLE_CALL, None, "batch.spec_info.fork_flag = True", EXTEND_METHOD
        )
        for file in EXTEND_IDLE_FILES
    }


def _line_inside_extend_if(files: Files) -> Files:
    return {
        file: insert_around(
            files[file], EXTEND_IDLE_CALL, 'logger.debug("fork: all finished")', None, EXTEND_METHOD
        )
        for file in EXTEND_IDLE_FILES
    }


def _extra_kwarg(files: Files) -> Files:
    out = {}
    for file in (EAGLE, EAGLE_V2, MULTI):
        lines = files[file].splitlines(keepends=True)
        for index in reversed(range(len(lines))):
            if "EagleDraftInput.create_idle_input(" in lines[index]:
                indent = _indent(files[file], index + 2)
                lines.insert(index + 1, f"{indent}fork_trace=True,\n")
        out[file] = "".join(lines)
    return out


def _comments_and_decorators(files: Files) -> Files:
    out = {}
    for file in (EAGLE, MULTI):
        text = insert_around(
            files[file], EXTEND_IDLE_CALL, "# fork: our idle input", None, EXTEND_METHOD
        )
        out[file] = replace_once(
            text,
            "    def forward_draft_extend_after_decode(",
            "    @fork_traced\n    def forward_draft_extend_after_decode(",
        )
    return out


def _idle_input_call(text: str, method: str) -> tuple[int, int]:
    """Offset and line of ``batch.spec_info = EagleDraftInput.create_idle_input(`` in
    ``method``."""
    start = text.index(f"    def {method}(")
    call = text.index("batch.spec_info = EagleDraftInput.create_idle_input(", start)
    return call, text.count("\n", 0, call) + 1


def _site_under_extra_if(files: Files) -> Files:
    text = files[EAGLE]
    call, line = _idle_input_call(text, "_draft_preprocess_idle")
    stmt = _statement_at(ast.parse(text), line)
    lines = text.splitlines(keepends=True)
    indent = _indent(text, stmt.lineno)
    block = ["    " + l if l.strip() else l for l in lines[stmt.lineno - 1 : stmt.end_lineno]]
    lines[stmt.lineno - 1 : stmt.end_lineno] = [f"{indent}if fork_enabled:\n", *block]
    return {EAGLE: "".join(lines)}


def _import_style(files: Files) -> Files:
    """The eagle_info names the worker imports, one ``from`` import per name."""
    text = files[EAGLE]
    match = re.search(
        r"^from sglang\.srt\.speculative\.eagle_info import \(([^)]*)\)\n", text, re.M
    )
    assert match, "eagle_info import"
    names = [n.strip() for n in match.group(1).replace("\n", " ").split(",") if n.strip()]
    single = "".join(f"from sglang.srt.speculative.eagle_info import {n}\n" for n in names)
    return {EAGLE: text[: match.start()] + single + text[match.end() :]}


def _width_local(files: Files) -> Files:
    text = files[EAGLE]
    call, line = _idle_input_call(text, "_draft_preprocess_idle")
    indent = _indent(text, line)
    end = text.index(")", text.index("hidden_size=", call))
    width = re.search(r"hidden_size=([^,\n]+),", text[call:end + 2]).group(1)
    text = text[:call] + text[call:].replace(f"hidden_size={width},", "hidden_size=width,", 1)
    text = text[:call] + f"width = {width}\n{indent}" + text[call:]
    return {EAGLE: text}


def _v2_idle_in_helper(files: Files) -> Files:
    text = files[EAGLE_V2]
    call, line = _idle_input_call(text, "forward_batch_generation")
    stmt = _statement_at(ast.parse(text), line)
    lines = text.splitlines(keepends=True)
    indent = _indent(text, stmt.lineno)
    moved = [l[len(indent):] if l.strip() else l for l in lines[stmt.lineno - 1 : stmt.end_lineno]]
    target = moved[0].split(" = ", 1)[0]
    moved[0] = moved[0].replace(f"{target} = ", "return ", 1)
    lines[stmt.lineno - 1 : stmt.end_lineno] = [f"{indent}{target} = self._fork_idle_input()\n"]
    helper = "\n    def _fork_idle_input(self):\n" + "".join("        " + l if l.strip() else l for l in moved)
    next_def = "".join(lines).index("\n    def ", "".join(lines).index("class EAGLEWorkerV2") + 1)
    text = "".join(lines)
    return {EAGLE_V2: text[: next_def + 1] + helper + text[next_def:]}


VARIANTS: tuple[Variant, ...] = (
    Variant("black-79", "the four EAGLE workers reformatted by black at 79 columns", _black(79)),
    Variant("black-120", "the four EAGLE workers reformatted by black at 120 columns", _black(120)),
    Variant(
        "black-79-all",
        "speculative/ site files and scheduler.py reformatted by black at 79 columns (script only)",
        _black(79, FORMATTED),
    ),
    Variant(
        "renamed-locals",
        "locals at the extend sites renamed (`input_is_idle`, the width local)",
        _renamed_locals,
        renames={"was_idle": "input_is_idle"},
    ),
    Variant(
        "logging-around-sites",
        "a logging line before and after every idle-input site (after: but for the two "
        "extend idle inputs)",
        _logging(before=True, after=True),
    ),
    Variant(
        "statement-after-extend-idle",
        "a statement of the fork's right after the extend idle input, in its `if`",
        _fork_flag_after_extend_idle,
        outcome="refused",
        refusal=(EAGLE, "batch.spec_info.fork_flag = True", "would run before the idle input exists"),
    ),
    Variant(
        "edit-inside-extend-if",
        "a statement of the fork's before the extend idle input, inside the `if` the rule "
        "restructures",
        _line_inside_extend_if,
    ),
    Variant(
        "extra-kwarg",
        "an extra keyword argument on every idle-input call of the workers",
        _extra_kwarg,
    ),
    Variant(
        "comments-and-decorators",
        "a comment above the extend idle input, a decorator on its method",
        _comments_and_decorators,
    ),
    Variant(
        "site-under-extra-if",
        "the decode idle input of `_draft_preprocess_idle` under an extra `if`",
        _site_under_extra_if,
    ),
    Variant(
        "import-per-name",
        "eagle_worker.py imports the eagle_info names one `from` import each",
        _import_style,
    ),
    Variant(
        "width-in-a-local",
        "the decode idle input's hidden size read into a local first",
        _width_local,
        renames={},
    ),
    Variant(
        "v2-idle-in-helper",
        "the v2 decode idle input moved into a helper method",
        _v2_idle_in_helper,
        outcome="refused",
        refusal=(EAGLE_V2, "return EagleDraftInput.create_idle_input(", "_fork_idle_input"),
    ),
)


# -- comparing ------------------------------------------------------------------------------
def _is_fork(node: ast.AST) -> bool:
    return "fork" in ast.unparse(node)


class _Strip(ast.NodeTransformer):
    """Remove what a variant added (see the module docstring) and undo its renames."""

    def __init__(self, renames: dict[str, str]):
        self.renames = renames

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                kept: list[ast.stmt] = []
                for stmt in value:
                    if isinstance(stmt, ast.If) and _is_fork(stmt.test) and not stmt.orelse:
                        kept.extend(self.visit(s) for s in stmt.body)
                        continue
                    stmt = self.visit(stmt)
                    if not (isinstance(stmt, (ast.Expr, ast.Assign)) and _is_fork(stmt)):
                        kept.append(stmt)
                setattr(node, name, kept)
            elif isinstance(value, ast.AST):
                setattr(node, name, self.visit(value))
            elif isinstance(value, list):
                setattr(node, name, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.decorator_list = [d for d in node.decorator_list if not _is_fork(d)]
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.keywords = [k for k in node.keywords if not (k.arg or "").startswith("fork")]
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.renames.get(node.id, node.id)
        return node


def fork_free(text: str, renames: dict[str, str] | None = None, imports: bool = True) -> str:
    """The AST of ``text`` without the fork's additions, dumped (``imports=False``: without
    its import statements either)."""
    tree = _Strip(renames or {}).visit(ast.parse(text))
    if not imports:
        tree.body = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    return ast.dump(tree)


def imported_names(text: str) -> list[str]:
    return sorted(
        alias.asname or alias.name
        for node in ast.parse(text).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    )


def _key(code: str) -> str:
    """An idle input is one statement before and after its routing."""
    return "<idle input>" if "create_idle_input(" in code else code


def fork_statements(before: str, after: str) -> tuple[list, list]:
    """Per function, the fork's statements and the statements the patch left unchanged, in
    source order, for the file before and after the patch: equal lists mean no fork statement
    moved relative to the code around it."""

    def order(text: str) -> list[tuple[str, str]]:
        out = []
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stmts = sorted(
                    (s for s in ast.walk(node) if isinstance(s, (ast.Expr, ast.Assign, ast.AugAssign, ast.Return))),
                    key=lambda s: (s.lineno, s.col_offset),
                )
                out.extend((node.name, _key(ast.unparse(s))) for s in stmts)
        return out

    old, new = order(before), order(after)
    common = set(old) & set(new)
    return [s for s in old if s in common], [s for s in new if s in common]
