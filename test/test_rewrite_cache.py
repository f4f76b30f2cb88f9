"""``rewrite_tree`` rewrites files over the cores and keeps each file's rewrite in the cache:
the results are the same bytes and findings as one process computing them afresh, and a
second run takes them from the cache without running the rules."""

from __future__ import annotations

from sglang_eagle_sizing import concerns, patch
from sglang_eagle_sizing.families.release_0_5_11 import concerns as concerns_0_5_11
from sglang_eagle_sizing.tree import SglangTree


def _results(report: patch.TreeReport) -> list[tuple]:
    return [(r.file, r.old_text, r.new_text, r.findings) for r in report.results]


def test_parallel_and_cached_rewrites_equal_one_process(tree, tmp_path, monkeypatch):
    sglang = SglangTree.locate(tree)
    monkeypatch.setenv("SGLANG_EAGLE_SIZING_CACHE", str(tmp_path / "one"))
    monkeypatch.setenv(patch.JOBS_ENV, "1")
    alone = _results(patch.rewrite_tree(sglang))
    monkeypatch.setenv("SGLANG_EAGLE_SIZING_CACHE", str(tmp_path / "many"))
    monkeypatch.setenv(patch.JOBS_ENV, "2")
    seen = []
    parallel = _results(patch.rewrite_tree(sglang, progress=lambda d, t: seen.append((d, t))))
    assert parallel == alone
    assert seen[-1] == (len(alone), len(alone)) and len(seen) == len(alone)

    def never(*args):
        raise AssertionError("the rules ran although every file is cached")

    monkeypatch.setattr(patch, "rewrite_source", never)
    assert _results(patch.rewrite_tree(sglang)) == alone
    # another set of concerns is another entry
    with concerns.only(concerns_0_5_11.prefix(1)):
        try:
            patch.rewrite_tree(sglang)
        except AssertionError as exc:
            assert "the rules ran" in str(exc)
        else:
            raise AssertionError("a rewrite with other concerns came from the cache")


def test_a_rewrite_serves_every_set_of_concerns_that_answers_the_same(tree, tmp_path, monkeypatch):
    """A series rewrites a file again only when a concern its rules ask about lands; what it
    reuses is what the rules write afresh for that set of concerns."""
    sglang = SglangTree.locate(tree)
    monkeypatch.setenv(patch.JOBS_ENV, "1")
    monkeypatch.setenv("SGLANG_EAGLE_SIZING_CACHE", str(tmp_path / "fresh"))
    with concerns.only(concerns_0_5_11.prefix(2)):
        fresh = _results(patch.rewrite_tree(sglang))
    monkeypatch.setenv("SGLANG_EAGLE_SIZING_CACHE", str(tmp_path / "series"))
    with concerns.only(concerns_0_5_11.prefix(1)):
        patch.rewrite_tree(sglang)
    ran = []
    rewrite_source = patch.rewrite_source
    monkeypatch.setattr(patch, "rewrite_source", lambda file, *a: ran.append(file) or rewrite_source(file, *a))
    with concerns.only(concerns_0_5_11.prefix(2)):
        reused = _results(patch.rewrite_tree(sglang))
    assert reused == fresh
    # the parser's files again, the others (the CUDA-graph runners, the scheduler) reused
    assert "speculative/spec_info.py" in ran
    assert "managers/scheduler.py" not in ran
    assert 0 < len(ran) < len(fresh)
