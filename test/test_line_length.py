"""A fork whose pyproject.toml sets its formatter's line length gets inserted and rewritten code
at that length (and the comments, docstrings and strings apply inserts wrapped at it): its
formatter (black at that length) then changes nothing the patch wrote, and ``check`` still
passes on the formatted tree."""

from __future__ import annotations

import black
import pytest
from conftest import git, run_cli
from sglang_eagle_sizing.families.release_0_5_11.sites import SITE_FILES

SRT = "python/sglang/srt/"


def _format(checkout, length: int) -> dict[str, str]:
    """black at ``length`` over the site files, as the fork's formatter runs; what it changed."""
    changed = {}
    for file in SITE_FILES:
        path = checkout / SRT / file
        text = path.read_text()
        formatted = black.format_str(text, mode=black.Mode(line_length=length))
        if formatted != text:
            path.write_text(formatted)
            changed[file] = formatted
    return changed


@pytest.mark.parametrize(
    "tool, length", [("black", 79), ("ruff", 120)], ids=["black-79", "ruff-120"]
)
def test_inserted_code_follows_the_forks_line_length(checkout, stand_in_tests, monkeypatch, tool, length):
    (checkout / "pyproject.toml").write_text(f"[tool.{tool}]\nline-length = {length}\n")
    _format(checkout, length)  # the fork is formatted at its length
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", f"format at {length}")
    before = {f: set((checkout / SRT / f).read_text().splitlines()) for f in SITE_FILES}
    monkeypatch.chdir(checkout)
    assert run_cli("apply", "-q", ".")[0] == 0
    patched = {f: (checkout / SRT / f).read_text() for f in SITE_FILES}
    added = [line for f in SITE_FILES for line in patched[f].splitlines() if line not in before[f]]
    # the length is the fork's, not black's 88: the start-up block's calls fit on one line at
    # 120 (wider than 88); at 79 no added line is wider than 79: code, comments, docstrings
    # and string literals (black wraps only code; apply wraps the rest)
    wide = [line for line in added if len(line) > 88 and not line.strip().startswith("#")]
    if length > 88:
        assert wide
    else:
        assert [line for line in added if line.strip().startswith("#")]
        assert [line for line in added if line.strip().startswith('"""')]
        assert added and not [line for line in added if len(line) > length], [
            line for line in added if len(line) > length
        ]
    # the fork's formatter has nothing to change in what apply wrote
    reformatted = _format(checkout, length)
    assert sorted(reformatted) == [], {f: _first_change(patched[f], t) for f, t in reformatted.items()}
    code, out, err = run_cli("check", ".")
    assert (code, out) == (0, ""), out + err


def _first_change(old: str, new: str) -> str:
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), 1):
        if a != b:
            return f"line {number}: {a!r} -> {b!r}"
    return "length"
