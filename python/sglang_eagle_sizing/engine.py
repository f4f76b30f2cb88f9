"""The rewrite engine: runs the rules over one file, or over a tree, and collects findings.

The engine knows nothing of EAGLE; the rules (``rules/``) and the site list (``sites.py``) do.
A rule is a libcst transformer that rewrites what it owns and records a ``Finding`` for each
place it looked at: ``routed`` (already right), ``unrouted`` (it rewrote it) or ``unknown``
(a sizing site it cannot classify). A place a rule owns but cannot rewrite raises
``RewriteError``.

``check`` runs every rule on the original module, so line numbers are the file's own; ``apply``
and ``diff`` chain the rules, each on the output of the one before.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider


class RewriteError(Exception):
    """A place the rules own but cannot rewrite; nothing is written."""

    def __init__(self, file: str, line: int, message: str):
        super().__init__(f"{file}:{line}: {message}")
        self.file = file
        self.line = line


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


class Rule(cst.CSTTransformer):
    """Base of every rule: tracks the enclosing ``Class.method`` and reports findings."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    #: files (relative to ``srt/``) the rule reads; ``None``: every file
    files: ClassVar[frozenset[str] | None] = None
    #: the rule only runs on a file whose text holds one of these (a cheap pre-filter;
    #: what the rule matches is still decided by structure)
    needles: ClassVar[tuple[str, ...]] = ()
    #: run on the chained output even when it found nothing to do in the original
    #: (it acts on what the other rules wrote)
    follows_others: ClassVar[bool] = False

    def __init__(self, file: str):
        super().__init__()
        self.file = file
        self.findings: list[Finding] = []
        self._scope: list[str] = []

    @classmethod
    def applies_to(cls, file: str, text: str = "") -> bool:
        if cls.files is not None and file not in cls.files:
            return False
        return not cls.needles or any(needle in text for needle in cls.needles)

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
    def line_of(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def column_of(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.column

    def report(self, node: cst.CSTNode, label: str, status: str, scope: str | None = None):
        self.findings.append(
            Finding(self.file, self.line_of(node), scope or self.scope, label, status)
        )

    def fail(self, node: cst.CSTNode, message: str) -> RewriteError:
        return RewriteError(self.file, self.line_of(node), message)

    # -- end of module ----------------------------------------------------------------
    def finish(self, module: cst.Module) -> None:
        """Called after the visit; rules that must find something raise here if they did not."""


@dataclass
class FileResult:
    file: str
    old_text: str
    new_text: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def unified_diff(self, prefix: str = "") -> str:
        name = prefix + self.file
        return "".join(
            difflib.unified_diff(
                self.old_text.splitlines(keepends=True),
                self.new_text.splitlines(keepends=True),
                fromfile="a/" + name,
                tofile="b/" + name,
            )
        )


def _parse(file: str, text: str) -> cst.Module:
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise RewriteError(file, exc.raw_line, f"cannot parse: {exc.message}") from None


def _run(rule_type: type[Rule], file: str, wrapper: MetadataWrapper) -> tuple[cst.Module, Rule]:
    rule = rule_type(file)
    new_module = wrapper.visit(rule)
    rule.finish(new_module)
    return new_module, rule


def _check(file: str, text: str, rules: Sequence[type[Rule]]) -> tuple[cst.Module, dict[type[Rule], list[Finding]]]:
    original = _parse(file, text)
    # One wrapper: positions are computed once and shared by every rule.
    wrapper = MetadataWrapper(original, unsafe_skip_copy=True)
    found = {
        rule_type: _run(rule_type, file, wrapper)[1].findings
        for rule_type in rules
        if rule_type.applies_to(file, text)
    }
    return original, found


def _sorted(found: dict[type[Rule], list[Finding]]) -> list[Finding]:
    findings = [f for rule_findings in found.values() for f in rule_findings]
    return sorted(findings, key=lambda f: (f.line, f.scope, f.label))


def check_source(file: str, text: str, rules: Sequence[type[Rule]]) -> list[Finding]:
    """What each rule finds in the original file, without rewriting it."""
    return _sorted(_check(file, text, rules)[1])


def rewrite_source(file: str, text: str, rules: Sequence[type[Rule]]) -> FileResult:
    """Rewrite one file: chain the rules that found work (and those that follow others)."""
    module, found = _check(file, text, rules)
    if any(f.status == Finding.UNKNOWN for f in _sorted(found)):
        return FileResult(file, text, text, _sorted(found))
    work = [r for r, findings in found.items() if any(f.status != Finding.ROUTED for f in findings)]
    if work:
        for rule_type in rules:
            if rule_type in work or rule_type.follows_others:
                module = _run(rule_type, file, MetadataWrapper(module, unsafe_skip_copy=True))[0]
    return FileResult(file, text, module.code, _sorted(found))


def needs_work(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status != Finding.ROUTED]
