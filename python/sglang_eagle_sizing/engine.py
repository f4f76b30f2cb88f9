"""The rewrite engine: runs the rules over one file, or over a tree, and collects findings.

The engine knows nothing of EAGLE; the rules (``rules/``) and the site list (``sites.py``) do.
A rule is a libcst transformer that rewrites what it owns and records a ``Finding`` for each
place it looked at: ``routed`` (already right), ``unrouted`` (it rewrote it) or ``unknown``
(a sizing site it cannot classify). A place a rule owns but cannot rewrite raises
``RewriteError``.

``check`` runs every rule on the original module, so line numbers are the file's own; ``apply``
and ``diff`` chain the rules, each on the output of the one before.

Cost (see ``docs/development/benchmarks.md``): the check pass walks each file once for all rules
(``_CheckWalk``: the rules' own hooks, no node rebuilt, whitespace and operator tokens not
entered); line and column numbers come from one cheap code-generation pass per module, run only
when a rule asks for a position (``_Positions``); and ``FindingsCache`` keeps check results per
(tool fingerprint, file, file sha256) so an unchanged file is not parsed again.

libcst's API is used as published but in one place: ``_Positions`` subclasses its
code-generation state (``libcst._nodes.internal.CodegenState``). Its public equivalent,
``MetadataWrapper(...).resolve(PositionProvider)``, gives the same positions (a test compares
them on every node) at about five times the cost: a cold ``check`` of 0.5.23 took 11.7 s with
it against 6.4 s (same machine, same run). libcst is pinned to the minor release that test
runs on (``pyproject.toml``, ``constraints.txt``).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import libcst as cst
from libcst._nodes.internal import CodegenState

from sglang_eagle_sizing import __version__
from sglang_eagle_sizing.caches import (  # noqa: F401 - re-exported
    CACHE_ENV,
    cache_root,
    default_cache_dir,
)
from sglang_eagle_sizing.concerns import all_enabled, any_enabled


class RewriteError(Exception):
    """A place the rules own but cannot rewrite; nothing is written."""

    def __init__(self, file: str, line: int, message: str):
        super().__init__(f"{file}:{line}: {message}")
        self.file = file
        self.line = line
        #: the message without the place (the CLI names the file from where it runs)
        self.reason = message


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    scope: str
    label: str
    status: str  # "routed" | "unrouted" | "unknown"

    ROUTED: ClassVar[str] = "routed"
    UNROUTED: ClassVar[str] = "unrouted"
    UNKNOWN: ClassVar[str] = "unknown"

    def format(self) -> str:
        return f"{self.file}:{self.line}  {self.scope}  {self.label}"


# -- positions ------------------------------------------------------------------------
_NEWLINE = re.compile(r"\r\n?|\n")


class _SyntacticStart:
    """Context manager of ``record_syntactic_position``: the node starts where its syntax does
    (or where ``start_node`` does), not where its leading whitespace does."""

    __slots__ = ("node", "start", "start_node", "state")

    def __init__(
        self, state: _StartsState, node: cst.CSTNode, start_node: cst.CSTNode | None
    ):
        self.state = state
        self.node = node
        self.start_node = start_node
        self.start = (0, 0)

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, *exc: object) -> bool:
        starts = self.state.starts
        starts[self.node] = (
            starts[self.start_node] if self.start_node is not None else self.start
        )
        return False


class _StartsState(CodegenState):
    """A code-generation state that keeps no text, only the start (line, column) of each node,
    with the same rules as libcst's ``PositionProvider`` (a test compares them)."""

    def __init__(self, module: cst.Module):
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.line = 1
        self.column = 0
        self.starts: dict[cst.CSTNode, tuple[int, int]] = {}
        self._open: list[tuple[int, int]] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        if "\n" in value or "\r" in value:
            segments = _NEWLINE.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])
        else:
            self.column += len(value)

    def pop_trailing_newline(self) -> None:
        pass  # positions only: the text is not kept

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._open.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._open.pop()
        if node not in self.starts:
            self.starts[node] = start

    def record_syntactic_position(  # type: ignore[override]
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> _SyntacticStart:
        return _SyntacticStart(self, node, start_node)


class _Positions:
    """Start positions of the nodes of one module, computed on the first request."""

    def __init__(self, module: cst.Module):
        self._module = module
        self._starts: dict[cst.CSTNode, tuple[int, int]] | None = None

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        if self._starts is None:
            state = _StartsState(self._module)
            self._module._codegen(state)
            self._starts = state.starts
        try:
            return self._starts[node]
        except KeyError:
            raise ValueError(
                f"{type(node).__name__} node is not part of the module visited"
            ) from None


# -- rules ----------------------------------------------------------------------------
class Rule(cst.CSTTransformer):
    """Base of every rule: tracks the enclosing ``Class.method`` and reports findings."""

    #: files (relative to ``srt/``) the rule reads; ``None``: every file
    files: ClassVar[frozenset[str] | None] = None
    #: the rule only runs on a file whose text holds one of these (a cheap pre-filter;
    #: what the rule matches is still decided by structure)
    needles: ClassVar[tuple[str, ...]] = ()
    #: run on the chained output even when it found nothing to do in the original
    #: (it acts on what the other rules wrote)
    follows_others: ClassVar[bool] = False
    #: the concerns (``concerns.ORDER``) the rule writes; it runs when one of them is enabled
    #: (every rule runs outside ``concerns.only``); empty: it serves every concern
    concerns: ClassVar[tuple[str, ...]] = ()
    #: a file of ``files`` holding none of ``needles`` is refused (what the rule looks for
    #: is gone: renamed or moved), not skipped
    needles_required: ClassVar[bool] = False

    def __init__(self, file: str):
        super().__init__()
        self.file = file
        self._reported: list[tuple[cst.CSTNode, str, str, str]] = []
        self._scope: list[str] = []
        self._positions: _Positions | None = None

    @classmethod
    def applies_to(cls, file: str, text: str = "") -> bool:
        if cls.files is not None and file not in cls.files:
            return False
        if cls.concerns and not any_enabled(cls.concerns):
            return False
        if not cls.needles or any(needle in text for needle in cls.needles):
            return True
        if cls.needles_required and cls.files is not None:
            raise RewriteError(
                file,
                1,
                f"{' or '.join(cls.needles)}: not found (the "
                f"{', '.join(cls.concerns) or cls.__name__} change looks for it here)",
            )
        return False

    # -- scope tracking ---------------------------------------------------------------
    @property
    def scope(self) -> str:
        return ".".join(self._scope)

    @property
    def class_name(self) -> str | None:
        return self._scope[0] if self._scope else None

    def visit_ClassDef(self, node: cst.ClassDef) -> bool | None:
        self._scope.append(node.name.value)
        return True

    def leave_ClassDef(self, original_node, updated_node):
        self._scope.pop()
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        self._scope.append(node.name.value)
        return True

    def leave_FunctionDef(self, original_node, updated_node):
        self._scope.pop()
        return updated_node

    # -- reporting --------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> bool | None:
        if self._positions is None:  # visited outside the engine
            self._positions = _Positions(node)
        return True

    def _start(self, node: cst.CSTNode) -> tuple[int, int]:
        if self._positions is None:
            raise RuntimeError(
                f"{type(self).__name__}: positions asked before the module was visited"
            )
        return self._positions.start(node)

    def line_of(self, node: cst.CSTNode) -> int:
        return self._start(node)[0]

    def column_of(self, node: cst.CSTNode) -> int:
        return self._start(node)[1]

    def report(
        self, node: cst.CSTNode, label: str, status: str, scope: str | None = None
    ):
        # The line is looked up when the findings are read: a chained rewrite pass, whose
        # findings nobody reads, then never pays for positions it does not need.
        self._reported.append((node, label, status, scope or self.scope))

    @property
    def findings(self) -> list[Finding]:
        return [
            Finding(self.file, self.line_of(node), scope, label, status)
            for node, label, status, scope in self._reported
        ]

    def fail(self, node: cst.CSTNode, message: str) -> RewriteError:
        return RewriteError(self.file, self.line_of(node), message)

    # -- end of module ----------------------------------------------------------------
    def finish(self, module: cst.Module) -> None:
        """Called after the visit; rules that must find something raise here if they did not."""


# -- the one-pass check walk ----------------------------------------------------------
#: Nodes that hold only whitespace and punctuation: never entered unless a rule has a hook
#: for their type.
_TOKEN_TYPES: tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.ImportStar,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.Asynchronous,
)


class _AttributeOrder(cst.CSTVisitor):
    """Records the order in which libcst visits a node type's attributes: it enters the
    node it is given (``node.visit``) and none of its children."""

    def __init__(self, node: cst.CSTNode) -> None:
        super().__init__()
        self.node = node
        self.order: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node is self.node

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.order.append(attribute)


_ATTRIBUTES: dict[type, tuple[str, ...]] = {}


def _attributes(node: cst.CSTNode) -> tuple[str, ...]:
    """The attributes of ``node`` in libcst's visiting order (learnt once per node type)."""
    kind = type(node)
    order = _ATTRIBUTES.get(kind)
    if order is None:
        recorder = _AttributeOrder(node)
        node.visit(recorder)
        order = _ATTRIBUTES[kind] = tuple(dict.fromkeys(recorder.order))
    return order


_Hook = Callable[..., Any]
#: a node type's plan for a tuple of rules: (visit hooks, leave hooks, attributes with the
#: hooks to call around each)
_Plan = tuple[
    tuple[tuple[Rule, _Hook], ...],
    tuple[tuple[Rule, _Hook], ...],
    tuple[
        tuple[str, tuple[tuple[Rule, _Hook], ...], tuple[tuple[Rule, _Hook], ...]], ...
    ],
]
_OVERRIDES_DISPATCH = (
    "on_visit",
    "on_leave",
    "on_visit_attribute",
    "on_leave_attribute",
)
_NAMES: dict[type, tuple[str, ...]] = {}


def _hook_names(rule_type: type) -> tuple[str, ...]:
    names = _NAMES.get(rule_type)
    if names is None:
        names = _NAMES[rule_type] = tuple(
            n for n in dir(rule_type) if n.startswith(("visit_", "leave_"))
        )
    return names


def _hooked_types(rule_type: type) -> set[str]:
    """Names of the node types a rule has a callback for."""
    return {name.split("_")[1] for name in _hook_names(rule_type)}


class _CheckWalk:
    """Walks the original module once, calling every rule's hooks as libcst would, in libcst's
    order, with ``updated_node`` the original node (the check pass rewrites nothing; a rule's
    return value is dropped). A hook returning ``False`` stops that rule, and only that rule,
    from entering the node's children."""

    #: how a child value is walked: not at all, as one node, or as a sequence of nodes
    SKIP, NODE, SEQUENCE = 0, 1, 2

    def __init__(self, rules: Sequence[Rule]):
        for rule in rules:
            custom = [
                name
                for name in _OVERRIDES_DISPATCH
                if getattr(type(rule), name) is not getattr(cst.CSTTransformer, name)
            ]
            if custom:
                raise TypeError(
                    f"{type(rule).__name__} overrides {custom[0]}; use visit_/leave_ hooks"
                )
        self.rules = tuple(rules)
        hooked: set[str] = set()
        for rule in rules:
            hooked |= _hooked_types(type(rule))
        self._skipped = tuple(t for t in _TOKEN_TYPES if t.__name__ not in hooked)
        self._kinds: dict[type, int] = {}
        self._plans: dict[tuple[type, tuple[Rule, ...]], _Plan] = {}

    def run(self, module: cst.Module) -> None:
        self._walk(module, self.rules)

    def _kind(self, value: object) -> int:
        value_type = type(value)
        kind = self._kinds.get(value_type)
        if kind is None:
            if isinstance(value, cst.CSTNode):
                kind = self.SKIP if isinstance(value, self._skipped) else self.NODE
            elif isinstance(value, (tuple, list)):
                kind = self.SEQUENCE
            else:
                kind = self.SKIP
            self._kinds[value_type] = kind
        return kind

    def _plan(self, node: cst.CSTNode, rules: tuple[Rule, ...]) -> _Plan:
        key = (type(node), rules)
        plan = self._plans.get(key)
        if plan is None:
            name = type(node).__name__

            def hooks(method: str) -> tuple[tuple[Rule, _Hook], ...]:
                found = ((rule, getattr(type(rule), method, None)) for rule in rules)
                return tuple((rule, hook) for rule, hook in found if hook is not None)

            attributes = tuple(
                (
                    attribute,
                    hooks(f"visit_{name}_{attribute}"),
                    hooks(f"leave_{name}_{attribute}"),
                )
                for attribute in _attributes(node)
            )
            plan = self._plans[key] = (
                hooks(f"visit_{name}"),
                hooks(f"leave_{name}"),
                attributes,
            )
        return plan

    def _walk(self, node: cst.CSTNode, rules: tuple[Rule, ...]) -> None:
        visits, leaves, attributes = self._plan(node, rules)
        entering = rules
        if visits:
            stopped = [rule for rule, visit in visits if visit(rule, node) is False]
            if stopped:
                entering = tuple(rule for rule in rules if rule not in stopped)
                attributes = self._plan(node, entering)[2] if entering else ()
        for attribute, visit_hooks, leave_hooks in attributes:
            for rule, hook in visit_hooks:
                hook(rule, node)
            value = getattr(node, attribute)
            kind = self._kind(value)
            if kind == self.NODE:
                self._walk(value, entering)
            elif kind == self.SEQUENCE:
                for child in value:
                    if self._kind(child) == self.NODE:
                        self._walk(child, entering)
            for rule, hook in leave_hooks:
                hook(rule, node)
        for rule, leave in leaves:
            leave(rule, node, node)


# -- files ----------------------------------------------------------------------------
@dataclass
class FileResult:
    file: str
    old_text: str
    new_text: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def unified_diff(self, name: str) -> str:
        """The diff of this file, named ``name`` (its path from where the diff applies)."""
        return unified_diff(self.old_text, self.new_text, "a/" + name, "b/" + name)


NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """A unified diff ``git apply`` and ``patch -p1`` take (``old`` empty and ``old_name``
    ``/dev/null`` for a new file), marking a last line without newline as they expect.
    """
    lines = []
    for line in difflib.unified_diff(
        _lines(old),
        _lines(new),
        fromfile=old_name,
        tofile=new_name,
    ):
        lines.append(line)
        if not line.endswith("\n"):
            lines.append("\n" + NO_NEWLINE)
    return "".join(lines)


def git_header(key: str, new_file: bool) -> str:
    """The ``diff --git`` header of one file's diff: with ``new file mode`` a new file that
    is empty (no hunk) is still created by ``git apply``."""
    header = f"diff --git a/{key} b/{key}\n"
    return header + ("new file mode 100644\n" if new_file else "")


def _lines(text: str) -> list[str]:
    """Lines as git sees them: split at ``\\n`` only (``str.splitlines`` also splits at form
    feeds and other separators a source file may hold inside a line)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _parse(file: str, text: str) -> cst.Module:
    try:
        return _parsed(text)
    except cst.ParserSyntaxError as exc:
        line, message = _python_syntax_error(text, exc)
        raise RewriteError(file, line, f"cannot parse: {message}") from None


def _python_syntax_error(text: str, exc: cst.ParserSyntaxError) -> tuple[int, str]:
    """The line and message Python itself gives for the error (libcst's ``raw_line`` is the
    line its parser stopped at, often the one after), or libcst's where Python compiles it."""
    try:
        compile(text, "<file>", "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
    except SyntaxError as error:
        if error.lineno:
            return error.lineno, f"{error.msg} (Python's message)"
    except (ValueError, MemoryError, RecursionError):
        pass
    return exc.raw_line, exc.message


@functools.lru_cache(maxsize=32)
def _parsed(text: str) -> cst.Module:
    """libcst trees are immutable: the series parses each release file once, not once per
    patch."""
    return cst.parse_module(text)


def _run(
    rule_type: type[Rule], file: str, module: cst.Module
) -> tuple[cst.Module, Rule]:
    """One rewriting pass of one rule (a libcst transform)."""
    rule = rule_type(file)
    rule._positions = _Positions(module)
    new_module = module.visit(rule)
    rule.finish(new_module)
    return new_module, rule


def _check(
    file: str, text: str, rules: Sequence[type[Rule]]
) -> tuple[cst.Module, dict[type[Rule], list[Finding]]]:
    original = _parse(file, text)
    positions = _Positions(original)  # shared: computed at most once for every rule
    applied = [
        rule_type(file) for rule_type in rules if rule_type.applies_to(file, text)
    ]
    for rule in applied:
        rule._positions = positions
    if applied:
        _CheckWalk(applied).run(original)
    for rule in applied:
        rule.finish(original)
    return original, {type(rule): rule.findings for rule in applied}


def _sorted(found: dict[type[Rule], list[Finding]]) -> list[Finding]:
    findings = [f for rule_findings in found.values() for f in rule_findings]
    return sorted(findings, key=lambda f: (f.line, f.scope, f.label))


def check_source(
    file: str,
    text: str,
    rules: Sequence[type[Rule]],
    cache: FindingsCache | None = None,
) -> list[Finding]:
    """What each rule finds in the original file, without rewriting it."""
    if not all_enabled({concern for rule in rules for concern in rule.concerns}):
        cache = None  # the cache holds what every rule finds
    if cache is not None:
        cached = cache.get(file, text)
        if cached is not None:
            return cached
    findings = _sorted(_check(file, text, rules)[1])
    if cache is not None:
        cache.put(file, text, findings)
    return findings


def rewrite_source(file: str, text: str, rules: Sequence[type[Rule]]) -> FileResult:
    """Rewrite one file: chain the rules that found work (and those that follow others)."""
    module, found = _check(file, text, rules)
    if any(f.status == Finding.UNKNOWN for f in _sorted(found)):
        return FileResult(file, text, text, _sorted(found))
    work = [
        r
        for r, findings in found.items()
        if any(f.status != Finding.ROUTED for f in findings)
    ]
    if work:
        for rule_type in rules:
            if rule_type in work or rule_type.follows_others:
                module = _run(rule_type, file, module)[0]
    return FileResult(file, text, module.code, _sorted(found))


# -- the check cache ------------------------------------------------------------------
def tool_fingerprint() -> str:
    """The version and the source of this package: a cache entry made by other rules is never
    read back."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class FindingsCache:
    """``check`` results per (tool fingerprint, file, sha256 of its text), one JSON file each,
    like ruff's cache. Best effort: an unreadable or unwritable cache is a miss, never an error.
    Only findings are kept; a file whose check raises is checked again every time."""

    def __init__(self, folder: Path, fingerprint: str | None = None):
        self.folder = folder
        self.fingerprint = fingerprint or tool_fingerprint()

    def _path(self, file: str, text: str) -> Path:
        key = hashlib.sha256(
            f"{self.fingerprint}\0{file}\0".encode() + text.encode("utf-8")
        )
        return self.folder / (key.hexdigest() + ".json")

    def get(self, file: str, text: str) -> list[Finding] | None:
        try:
            entries = json.loads(self._path(file, text).read_text(encoding="utf-8"))
            return [Finding(**entry) for entry in entries]
        except (OSError, ValueError, TypeError):
            return None

    def put(self, file: str, text: str, findings: list[Finding]) -> None:
        path = self._path(file, text)
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump([asdict(f) for f in findings], handle)
                os.replace(tmp, path)
            except OSError:
                os.unlink(tmp)
                raise
