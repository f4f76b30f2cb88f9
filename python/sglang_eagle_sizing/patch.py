"""Run the rules over an SGLang tree: what ``check``, ``diff``, ``apply`` and ``pr`` share.

Besides SGLang's own files, a patch on a checkout adds the fork's tests: every ``*.py`` under
``inserted_tests/`` (this package's data), at its path from the checkout root (the tests under
``test/registered/``, the harness they share under ``python/sglang/test/``). A test file the
checkout already has is left as it is (the fork owns it once added; presence is enough); an
installed package has no ``test/`` folder and gets none.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_eagle_sizing import concerns
from sglang_eagle_sizing.engine import (
    FileResult,
    Finding,
    FindingsCache,
    RewriteError,
    cache_root,
    check_source,
    git_header,
    rewrite_source,
    tool_fingerprint,
    unified_diff,
)
from sglang_eagle_sizing.families import Family, family_named
from sglang_eagle_sizing.syntax import line_length
from sglang_eagle_sizing.transaction import FileChange
from sglang_eagle_sizing.tree import SglangTree, TreeError

SITE_LABELS = frozenset({"decode", "extend"})

#: a folder of fork tests read in place of a family's own (``{family name: folder}``; tests
#: point a family at stand-ins)
INSERTED_TESTS: dict[str, Path] = {}


def inserted_test_files(family: Family, release: str | None = None) -> dict[str, bytes]:
    """The test files the patch adds to a checkout: ``{path from the checkout root: bytes}``;
    under ``concerns.only``, what the concerns enabled add of them (the family's
    ``sites.test_files``)."""
    folder = INSERTED_TESTS.get(family.name, family.inserted_tests)
    if not folder.is_dir():
        return {}
    files = {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*.py"))
        if "__pycache__" not in path.parts and path.is_file()
    }
    return family.test_files(files, release)


@dataclass
class TreeReport:
    tree: SglangTree
    findings: list[Finding] = field(default_factory=list)
    #: inventory sites the tree does not hold (another version, or edited by hand)
    missing: list = field(default_factory=list)
    #: the rewritten files (empty for ``check``)
    results: list[FileResult] = field(default_factory=list)
    #: the fork's test files the checkout lacks: ``{path from the root: bytes}``
    tests_to_add: dict[str, bytes] = field(default_factory=dict)
    #: the fork's test files the checkout has (edited or not)
    tests_present: list[str] = field(default_factory=list)
    #: modules the patch adds to SGLang that the tree lacks: ``{path from the root: bytes}``
    modules_to_add: dict[str, bytes] = field(default_factory=dict)
    #: what the release does not have of the family's concerns, one line each
    notes: list[str] = field(default_factory=list)

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
        return not (
            self.unrouted
            or self.unknown
            or self.missing
            or self.tests_to_add
            or self.modules_to_add
        )

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
        out += [FileChange(key, None, data) for key, data in self.files_to_add().items()]
        return out

    def files_to_add(self) -> dict[str, bytes]:
        """The new files: modules the patch adds to SGLang, then the fork's tests."""
        return {**self.modules_to_add, **self.tests_to_add}

    def diff(self) -> str:
        """The unified diff of ``changes()``, files named from the tree's root (``git apply``
        or ``patch -p1`` there writes what ``apply`` writes)."""
        text = ""
        for r in self.changed:
            key = self.tree.key(r.file)
            text += git_header(key, False) + r.unified_diff(key)
        for key, data in self.files_to_add().items():
            text += git_header(key, True)
            text += unified_diff("", data.decode("utf-8"), "/dev/null", "b/" + key)
        return text


def _missing(findings: list[Finding], family: Family) -> list:
    seen = {(f.file, f.scope) for f in findings if f.label in SITE_LABELS}
    return [site for site in family.sites if site.key not in seen]


def collect_tests(report: TreeReport, release: str | None = None) -> None:
    """Sort the modules the patch adds, and the fork's test files (a checkout only), into
    present and to add. A module or test file the tree has is the fork's: left as it is."""
    tree = report.tree
    for file, text in tree.family.new_modules.items():
        # holds, not the working tree: a checkout read at its release tag (``pr --series`` on
        # a patched checkout) has the module only if the tag has it
        if not tree.holds(tree.key(file)):
            report.modules_to_add[tree.key(file)] = text.encode("utf-8")
    if not tree.takes_tests:
        return
    for key, data in inserted_test_files(tree.family, release).items():
        if report.tree.holds(key):
            report.tests_present.append(key)
        else:
            report.tests_to_add[key] = data


def _release_text(tree: SglangTree) -> str | None:
    """What the rules write depends on of the release besides the files they rewrite
    (``Family.release_text``)."""

    def read(file: str) -> str:
        try:
            return tree.read(file)
        except TreeError as error:
            raise OSError(str(error)) from error

    return tree.family.release_text(read)


def check_tree(tree: SglangTree, cache: FindingsCache | None = None) -> TreeReport:
    """What each rule finds in the tree, rewriting nothing; ``cache`` reuses the findings of
    files whose bytes it has seen."""
    findings: list[Finding] = []
    release = _release_text(tree)
    if cache is not None and release is not None:
        # what a file's rules find depends on the release's facts too
        salt = hashlib.sha256(release.encode("utf-8")).hexdigest()
        cache = FindingsCache(cache.folder, f"{cache.fingerprint}\0{salt}")
    with line_length(tree.formatter_line_length()), tree.family.release(release):
        for file in tree.files():
            findings.extend(
                check_source(file, tree.read(file), tree.family.rules, cache)
            )
    report = TreeReport(tree, findings, _missing(findings, tree.family))
    report.notes = tree.family.release_notes(release)
    collect_tests(report, release)
    return report


def rewrite_tree(tree: SglangTree, progress=None) -> TreeReport:
    """What the rules write for every file of the tree. A file whose bytes (with the same
    line length, concerns and tool) were rewritten before comes from the rewrite cache
    (``RewriteCache``); the others are rewritten in parallel, one process per core.
    ``progress``: called with (files done, files) as they finish."""
    report = TreeReport(tree)
    length = tree.formatter_line_length()
    current = concerns.current()
    enabled_now = None if current is None else tuple(sorted(current))
    release = _release_text(tree)
    files = tree.files()
    texts = {file: tree.read(file) for file in files}
    cache = RewriteCache(length, release, tree.family)
    done: dict[str, FileResult] = {}
    for file in files:
        cached = cache.get(file, texts[file], enabled_now)
        if cached is not None:
            done[file] = cached
    todo = [f for f in files if f not in done]
    settings = (length, enabled_now, release, tree.family.name)
    rewritten = _rewrite_all(
        todo, texts, settings, progress, len(files) - len(todo), len(files)
    )
    for result, asked in rewritten:
        done[result.file] = result
        cache.put(result, asked)
    for file in files:
        report.results.append(done[file])
        report.findings.extend(done[file].findings)
    report.missing = _missing(report.findings, tree.family)
    report.notes = tree.family.release_notes(release)
    collect_tests(report, release)
    return report


# -- rewriting files in parallel ------------------------------------------------------
#: ``SGLANG_EAGLE_SIZING_JOBS``: how many processes rewrite files (default: the cores)
JOBS_ENV = "SGLANG_EAGLE_SIZING_JOBS"


def _jobs(count: int) -> int:
    try:
        wanted = int(os.environ.get(JOBS_ENV, "0"))
    except ValueError:
        wanted = 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(count, wanted or cores or 1))


def _rewrite_one(job: tuple[str, str, tuple]):
    """A file's ``FileResult`` with the concerns the rules asked about (``concerns.recording``),
    or the ``RewriteError`` it raised as (file, line, reason) (an exception with its own
    ``__init__`` does not cross processes). ``job``: the file, its text, and (line length,
    concerns, the text of the family's release file, the family) to rewrite it with."""
    file, text, (length, enabled_now, release, family_name) = job
    family = family_named(family_name)
    with contextlib.ExitStack() as stack:
        stack.enter_context(line_length(length))
        stack.enter_context(family.release(release))
        if enabled_now is not None:
            stack.enter_context(concerns.only(enabled_now))
        try:
            with concerns.recording() as asked:
                result = rewrite_source(file, text, family.rules)
            return result, dict(asked)
        except RewriteError as exc:
            return (exc.file, exc.line, exc.reason)


def _quiet_worker() -> None:
    """A rewriting process leaves Ctrl-C to the command (which ends the pool) and dies at
    once of SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _rewrite_all(todo, texts, settings, progress, start, total) -> list[FileResult]:
    """The rewritten files: in this process when one core, else largest first over the
    cores. A ``RewriteError`` is raised for the first file (in ``todo``'s order) that has one,
    as a run in one process would."""
    jobs = [(f, texts[f], settings) for f in todo]
    count = start
    results = {}
    if _jobs(len(jobs)) <= 1:
        outcomes = map(_rewrite_one, jobs)
        pool = None
    else:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(
            _jobs(len(jobs)), initializer=_quiet_worker
        )
        by_size = sorted(jobs, key=lambda job: -len(job[1]))
        outcomes = pool.imap_unordered(_rewrite_one, by_size)
    try:
        for outcome in outcomes:
            if len(outcome) == 3:
                file, line, reason = outcome
                results[file] = RewriteError(file, line, reason)
                if pool is None:
                    raise results[file]
            else:
                results[outcome[0].file] = outcome
            count += 1
            if progress:
                progress(count, total)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    for file in todo:
        if isinstance(results[file], RewriteError):
            raise results[file]
    return [results[file] for file in todo]


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    """The tool's fingerprint, read once per process (a series makes 16 caches)."""
    return tool_fingerprint()


class RewriteCache:
    """What the rules wrote for a file, per (tool fingerprint, file, its bytes, line length,
    release), one JSON file each under ``$SGLANG_EAGLE_SIZING_CACHE/rewrite``: a second
    ``diff``, the ``apply`` after a ``diff``, ``pr`` and its series reuse it. A file holds one
    rewrite per answers the rules got about the concerns (``concerns.recording``): a rewrite
    serves every set of concerns that answers the same, so ``pr --series`` rewrites a file
    only when a concern it asks about lands. Best effort, like ``FindingsCache``: unreadable
    or unwritable is a miss."""

    def __init__(self, length: int | None, release: str | None, family: Family):
        self.folder = cache_root() / "rewrite"
        release_key = hashlib.sha256((release or "").encode()).hexdigest() if release else None
        self.salt = f"{_fingerprint()}\0{length}\0{release_key}\0{family.name}\0"

    def _path(self, file: str, text: str) -> Path:
        key = hashlib.sha256(f"{self.salt}{file}\0".encode() + text.encode("utf-8"))
        return self.folder / (key.hexdigest() + ".json")

    def _variants(self, path: Path) -> list[dict]:
        try:
            variants = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return variants if isinstance(variants, list) else []

    def get(
        self, file: str, text: str, enabled_now: tuple[str, ...] | None
    ) -> FileResult | None:
        for variant in self._variants(self._path(file, text)):
            try:
                if concerns.answers_hold(variant["asked"], enabled_now):
                    findings = [Finding(**f) for f in variant["findings"]]
                    return FileResult(file, text, variant["new_text"], findings)
            except (TypeError, KeyError, AttributeError):
                return None
        return None

    def put(self, result: FileResult, asked: dict[str, bool]) -> None:
        path = self._path(result.file, result.old_text)
        variants = [v for v in self._variants(path) if v.get("asked") != asked]
        variants.append(
            {
                "asked": asked,
                "new_text": result.new_text,
                "findings": [asdict(f) for f in result.findings],
            }
        )
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(variants, handle)
                os.replace(tmp, path)
            except OSError:
                os.unlink(tmp)
                raise
