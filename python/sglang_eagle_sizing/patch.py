"""Run the rules over an SGLang tree: what ``check``, ``diff`` and ``apply`` share."""

from __future__ import annotations

from dataclasses import dataclass, field

from .engine import FileResult, Finding, FindingsCache, check_source, rewrite_source
from .rules import RULES
from .sites import SITES, Site
from .tree import SglangTree

SITE_LABELS = frozenset({"decode", "extend"})


@dataclass
class TreeReport:
    tree: SglangTree
    findings: list[Finding] = field(default_factory=list)
    #: inventory sites the tree does not hold (another version, or edited by hand)
    missing: list[Site] = field(default_factory=list)
    #: the rewritten files (empty for ``check``)
    results: list[FileResult] = field(default_factory=list)

    @property
    def unrouted(self) -> list[Finding]:
        return [f for f in self.findings if f.status == Finding.UNROUTED]

    @property
    def unknown(self) -> list[Finding]:
        return [f for f in self.findings if f.status == Finding.UNKNOWN]

    @property
    def routed(self) -> bool:
        return not (self.unrouted or self.unknown or self.missing)

    @property
    def changed(self) -> list[FileResult]:
        return [r for r in self.results if r.changed]


def _missing(findings: list[Finding]) -> list[Site]:
    seen = {(f.file, f.scope) for f in findings if f.label in SITE_LABELS}
    return [site for site in SITES if site.key not in seen]


def check_tree(tree: SglangTree, cache: FindingsCache | None = None) -> TreeReport:
    """What each rule finds in the tree, rewriting nothing; ``cache`` reuses the findings of
    files whose bytes it has seen."""
    findings: list[Finding] = []
    for file in tree.files():
        findings.extend(check_source(file, tree.read(file), RULES, cache))
    return TreeReport(tree, findings, _missing(findings))


def rewrite_tree(tree: SglangTree) -> TreeReport:
    report = TreeReport(tree)
    for file in tree.files():
        result = rewrite_source(file, tree.read(file), RULES)
        report.results.append(result)
        report.findings.extend(result.findings)
    report.missing = _missing(report.findings)
    return report
