"""Run the rules over an SGLang tree: what ``check``, ``diff``, ``apply`` and ``pr`` share.

Besides SGLang's own files, a patch on a checkout adds the fork's tests: every ``*.py`` under
``inserted_tests/`` (this package's data), at its path from the checkout root. A test file the
checkout already has is left as it is (the fork owns it once added; presence is enough); an
installed package has no ``test/`` folder and gets none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import fork_test_slices
from .concerns import E2E_TEST, all_enabled, enabled
from .engine import (
    FileResult,
    Finding,
    FindingsCache,
    check_source,
    rewrite_source,
    unified_diff,
)
from .rules import RULES
from .rules.contract import MODEL_CONFIG, release_model_config
from .syntax import line_length
from .sites import SITES, Site
from .transaction import FileChange
from .tree import SglangTree, TreeError

SITE_LABELS = frozenset({"decode", "extend"})

#: the fork's tests, laid out from the checkout root (``test/registered/...``)
INSERTED_TESTS = Path(__file__).resolve().parent / "inserted_tests"


def inserted_test_files() -> dict[str, bytes]:
    """The test files the patch adds to a checkout: ``{path from the checkout root: bytes}``;
    under ``concerns.only``, what the concerns enabled add of them (``fork_test_slices``)."""
    if not INSERTED_TESTS.is_dir():
        return {}
    files = {
        path.relative_to(INSERTED_TESTS).as_posix(): path.read_bytes()
        for path in sorted(INSERTED_TESTS.rglob("*.py"))
        if "__pycache__" not in path.parts and path.is_file()
    }
    if all_enabled():
        return files
    staged = {}
    for key, data in files.items():
        if key == fork_test_slices.CPU_TEST:
            data = fork_test_slices.slice_cpu_test(data.decode("utf-8")).encode("utf-8")
        elif not enabled(E2E_TEST):
            data = b""
        if data:
            staged[key] = data
    return staged


@dataclass
class TreeReport:
    tree: SglangTree
    findings: list[Finding] = field(default_factory=list)
    #: inventory sites the tree does not hold (another version, or edited by hand)
    missing: list[Site] = field(default_factory=list)
    #: the rewritten files (empty for ``check``)
    results: list[FileResult] = field(default_factory=list)
    #: the fork's test files the checkout lacks: ``{path from the root: bytes}``
    tests_to_add: dict[str, bytes] = field(default_factory=dict)
    #: the fork's test files the checkout has (edited or not)
    tests_present: list[str] = field(default_factory=list)

    @property
    def unrouted(self) -> list[Finding]:
        return [f for f in self.findings if f.status == Finding.UNROUTED]

    @property
    def sites_to_route(self) -> list[Finding]:
        """The sizing sites not routed yet (each idle input or buffer one site)."""
        return [f for f in self.unrouted if f.label in SITE_LABELS]

    @property
    def supporting_changes(self) -> list[Finding]:
        """Changes the sites need that are not sites: helpers, contracts, the aux-flag
        parser in each worker, annotations, the draft runner."""
        return [f for f in self.unrouted if f.label not in SITE_LABELS]

    @property
    def unknown(self) -> list[Finding]:
        return [f for f in self.findings if f.status == Finding.UNKNOWN]

    @property
    def routed(self) -> bool:
        return not (self.unrouted or self.unknown or self.missing or self.tests_to_add)

    @property
    def changed(self) -> list[FileResult]:
        return [r for r in self.results if r.changed]

    def changes(self) -> list[FileChange]:
        """What ``apply`` writes: the rewritten files, then the test files to add."""
        out = [
            FileChange(
                self.tree.key(r.file),
                r.old_text.encode("utf-8"),
                r.new_text.encode("utf-8"),
            )
            for r in self.changed
        ]
        out += [FileChange(key, None, data) for key, data in self.tests_to_add.items()]
        return out

    def diff(self) -> str:
        """The unified diff of ``changes()``, files named from the tree's root (``git apply``
        or ``patch -p1`` there writes what ``apply`` writes)."""
        text = "".join(r.unified_diff(self.tree.key(r.file)) for r in self.changed)
        for key, data in self.tests_to_add.items():
            text += unified_diff("", data.decode("utf-8"), "/dev/null", "b/" + key)
        return text


def _missing(findings: list[Finding]) -> list[Site]:
    seen = {(f.file, f.scope) for f in findings if f.label in SITE_LABELS}
    return [site for site in SITES if site.key not in seen]


def collect_tests(report: TreeReport) -> None:
    """Sort the fork's test files into present and to add (a checkout only)."""
    if not report.tree.takes_tests:
        return
    for key, data in inserted_test_files().items():
        if report.tree.holds(key):
            report.tests_present.append(key)
        else:
            report.tests_to_add[key] = data


def _release(tree: SglangTree):
    """What the rules write depends on of the release besides the files they rewrite."""
    try:
        text = tree.read(MODEL_CONFIG)
    except (OSError, TreeError):
        text = None
    return release_model_config(text)


def check_tree(tree: SglangTree, cache: FindingsCache | None = None) -> TreeReport:
    """What each rule finds in the tree, rewriting nothing; ``cache`` reuses the findings of
    files whose bytes it has seen."""
    findings: list[Finding] = []
    with line_length(tree.formatter_line_length()), _release(tree):
        for file in tree.files():
            findings.extend(check_source(file, tree.read(file), RULES, cache))
    report = TreeReport(tree, findings, _missing(findings))
    collect_tests(report)
    return report


def rewrite_tree(tree: SglangTree) -> TreeReport:
    report = TreeReport(tree)
    with line_length(tree.formatter_line_length()), _release(tree):
        for file in tree.files():
            result = rewrite_source(file, tree.read(file), RULES)
            report.results.append(result)
            report.findings.extend(result.findings)
    report.missing = _missing(report.findings)
    collect_tests(report)
    return report
