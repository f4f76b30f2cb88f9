"""The drift corpus (test/support/drift.py): each way a fork differs from the release near the
sites, rewritten file by file as ``apply`` does, with the outcome it must get: routed, with the
AST of the pristine patch once the fork's own additions are taken out and the fork's statements
in their order; or refused naming file:line. The same variants as git checkouts, next to ``git
apply`` of the pristine diff: scripts/drift_corpus.py (its table is in docs/robustness.md)."""

from __future__ import annotations

import sys

import pytest
from conftest import SUPPORT
from sglang_eagle_sizing.engine import Finding, RewriteError, rewrite_source
from sglang_eagle_sizing.families.release_0_5_11.rules import RULES
from sglang_eagle_sizing.families.release_0_5_11.sites import SITE_FILES

sys.path.insert(0, str(SUPPORT))
import drift  # noqa: E402


@pytest.fixture(scope="session")
def release_files(pristine) -> dict[str, str]:
    return {file: (pristine / "srt" / file).read_text() for file in SITE_FILES}


class _Lazy(dict):
    """Each site file as the patch leaves the pristine release, computed once when asked."""

    def __init__(self, release_files):
        super().__init__()
        self.release_files = release_files

    def __missing__(self, file):
        self[file] = rewrite_source(file, self.release_files[file], RULES).new_text
        return self[file]


@pytest.fixture(scope="session")
def pristine_patch(release_files) -> dict[str, str]:
    return _Lazy(release_files)


@pytest.fixture(scope="session")
def pristine_sites(release_files) -> dict[str, list[tuple[str, str]]]:
    from sglang_eagle_sizing.engine import check_source

    class Sites(dict):
        def __missing__(self, file):
            self[file] = _sizing(check_source(file, release_files[file], RULES))
            return self[file]

    return Sites()


def _sizing(findings: list[Finding]) -> list[tuple[str, str]]:
    return sorted((f.scope, f.label) for f in findings if f.label in ("decode", "extend"))


#: the whole-tree reformatting is the script's (it costs a minute here)
SAMPLED = [v for v in drift.VARIANTS if not v.name.endswith("-all")]


@pytest.mark.parametrize("variant", SAMPLED, ids=lambda v: v.name)
def test_drift_variant(variant, release_files, pristine_patch, pristine_sites):
    changed = variant.edit(dict(release_files))
    assert changed and all(changed[f] != release_files[f] for f in changed), "the variant changes nothing"
    if variant.outcome == "refused":
        file, culprit, reason = variant.refusal
        text = changed[file]
        line = next(i for i, l in enumerate(text.splitlines(), 1) if culprit in l)
        # the first culprit in the file (upper-most) is the one named
        try:
            result = rewrite_source(file, text, RULES)
        except RewriteError as exc:
            assert str(exc).startswith(f"{file}:{line}: ") and reason in str(exc), str(exc)
            return
        unknown = [f for f in result.findings if f.status == Finding.UNKNOWN]
        assert [(f.file, f.line) for f in unknown] == [(file, line)], result.findings
        assert reason in unknown[0].scope and result.new_text == text
        return
    for file, text in sorted(changed.items()):
        result = rewrite_source(file, text, RULES)
        expected = pristine_patch[file]
        # the file's sizing sites are all found and routed, none unknown
        assert not [f for f in result.findings if f.status == Finding.UNKNOWN], result.findings
        assert _sizing(result.findings) == pristine_sites[file]
        imports = variant.name != "import-per-name"
        assert drift.fork_free(result.new_text, variant.renames, imports) == drift.fork_free(
            expected, imports=imports
        ), f"{file}: not the pristine patch once the fork's lines are out"
        if not imports:
            names = drift.imported_names(result.new_text)
            assert len(names) == len(set(names)) and set(drift.imported_names(expected)) <= set(names)
        old_order, new_order = drift.fork_statements(text, result.new_text)
        assert old_order == new_order, f"{file}: a statement moved relative to the fork's"
