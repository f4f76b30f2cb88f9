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

    def __init__(self, file: str):
        super().__init__()
        self.file = file
        self.findings: list[Finding] = []
        self._scope: list[str] = []

    @classmethod
    def applies_to(cls, file: str) -> bool:
        return cls.files is None or file in cls.files

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


def _run(rule_type: type[Rule], file: str, module: cst.Module) -> tuple[cst.Module, Rule]:
    rule = rule_type(file)
    new_module = MetadataWrapper(module, unsafe_skip_copy=True).visit(rule)
    rule.finish(new_module)
    return new_module, rule


def rewrite_source(file: str, text: str, rules: Sequence[type[Rule]]) -> FileResult:
    """Rewrite one file. Findings come from each rule run on the original module."""
    original = _parse(file, text)
    applicable = [r for r in rules if r.applies_to(file)]
    findings: list[Finding] = []
    for rule_type in applicable:
        findings.extend(_run(rule_type, file, original)[1].findings)
    module = original
    for rule_type in applicable:
        module = _run(rule_type, file, module)[0]
    findings.sort(key=lambda f: (f.line, f.scope, f.label))
    return FileResult(file, text, module.code, findings)


def check_source(file: str, text: str, rules: Sequence[type[Rule]]) -> list[Finding]:
    """Findings only: what ``rewrite_source`` would report, without rewriting."""
    original = _parse(file, text)
    findings: list[Finding] = []
    for rule_type in rules:
        if rule_type.applies_to(file):
            findings.extend(_run(rule_type, file, original)[1].findings)
    findings.sort(key=lambda f: (f.line, f.scope, f.label))
    return findings


def needs_work(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status != Finding.ROUTED]
