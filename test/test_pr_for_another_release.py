"""``pr --series`` for a release other than the one its sections were measured on: each cover
letter says which release the series is for and where its figures come from, and a pull
request whose concerns the release does not have is not written (``write_pull_requests``)."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_eagle_sizing import pr, series
from sglang_eagle_sizing.families import AFTER_REFACTOR


def test_a_letter_for_another_release_says_where_its_figures_come_from():
    line = pr.measured_on_line("0.5.19", "0.5.23")
    assert line.startswith("This series is for SGLang 0.5.19: the same fix, written in 0.5.19's code.\n")
    assert "were run on v0.5.23; run them on 0.5.19 before merging." in line
    assert pr.measured_on_line("0.5.23", "0.5.23") == ""
    assert pr.measured_on_line(None, "0.5.23") == ""


def test_a_pull_request_of_nothing_is_not_written(tmp_path, monkeypatch):
    """On a release where Gemma-3 has nothing to fix (0.5.16), its pull request is left out,
    the others numbered without a gap and their letters naming the release."""
    requests = AFTER_REFACTOR.pull_requests
    skipped = next(r for r in requests if len(r.concerns) == 1 and "gemma" in r.name)
    steps = [
        SimpleNamespace(patch=SimpleNamespace(concern=c), files=["f"])
        for r in requests if r is not skipped for c in r.concerns
    ]
    monkeypatch.setattr(series, "steps", lambda tree, *a: steps)
    monkeypatch.setattr(series, "write_patches", lambda own, place, *a: (place.mkdir(parents=True) or []))
    monkeypatch.setattr(pr, "cover_letter", lambda request, own, requests, sections, release, measured: f"{release} {measured}")
    tree = SimpleNamespace(
        family=SimpleNamespace(
            pull_requests=requests, known_version="0.5.23", cover_letter=lambda request: ""
        ),
        version=SimpleNamespace(number="0.5.16"),
    )
    pr.write_pull_requests(tree, tmp_path, "A <a@example.com>")
    kept = [r for r in requests if r is not skipped]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        series.request_folder(n, r) for n, r in enumerate(kept, start=1)
    )
    letters = [(p / series.COVER_LETTER).read_text() for p in tmp_path.iterdir()]
    assert letters == ["0.5.16 0.5.23"] * len(kept)
