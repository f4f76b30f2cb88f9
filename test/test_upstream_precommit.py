"""scripts/upstream_precommit.py's filter, on made-up diffs and rewrites: a hook's finding is the
patch's only on a line the patch added or changed, or, for a whole-file finding, when the file
before the patch did not have it. (The hooks themselves are SGLang's pinned tools, installed by
the script from PyPI; CI does not install them: docs/development/upstream-precommit.md is the
full run.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import upstream_precommit as up

DIFF = """\
diff --git a/python/sglang/srt/a.py b/python/sglang/srt/a.py
index 1111111..2222222 100644
--- a/python/sglang/srt/a.py
+++ b/python/sglang/srt/a.py
@@ -3,0 +4,2 @@ def f():
+    x = 1
+    y = 2
@@ -10 +12 @@ def g():
-    return 0
+    return 1
@@ -20,2 +21,0 @@ def h():
-    gone = 1
-    gone = 2
diff --git a/test/new.py b/test/new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/test/new.py
@@ -0,0 +1,3 @@
+import os
+
+print(os.sep)
diff --git a/old.py b/old.py
deleted file mode 100644
--- a/old.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
"""


def test_added_lines_are_the_new_sides_of_the_hunks():
    assert up.added_lines(DIFF) == {"python/sglang/srt/a.py": {4, 5, 12}, "test/new.py": {1, 2, 3}}


BEFORE = "import b\nimport a\n\n\nvalue = f( 1 )\nother = g( 2 )\n"
# isort/black-like rewrite: the import order (lines 1-2) and line 6's spacing
AFTER = "import a\nimport b\n\n\nvalue = f( 1 )\nother = g(2)\n"


def test_a_rewrite_is_kept_only_where_the_patch_wrote():
    blocks = up.rewrite_blocks("m.py", "black-jupyter", BEFORE, AFTER)
    assert {n for b in blocks for n in b.lines} == {1, 2, 6}
    kept = [k for b in blocks if (k := up.keep(b, {6}, [])) is not None]
    assert [(k.path, k.line, k.hook) for k in kept] == [("m.py", 6, "black-jupyter")]
    assert "other = g(2)" in kept[0].message
    # nothing the patch wrote is rewritten: nothing kept
    assert [b for b in blocks if up.keep(b, {3, 4, 5}, [])] == []


def test_a_rewrite_that_also_covers_untouched_lines_says_the_file_before_had_it():
    before_file = "x = [\n    1,\n    2\n]\n"
    after_file = "x = [\n    1,\n    3\n]\n"
    fixed = "x = [1, 3]\n"
    prior = up.rewrite_blocks("m.py", "black-jupyter", before_file, "x = [1, 2]\n")
    (block,) = up.rewrite_blocks("m.py", "black-jupyter", after_file, fixed)
    kept = up.keep(block, {3}, prior)
    assert kept is not None and kept.message.endswith(
        "(the file before the patch is rewritten here too)"
    )
    # a block the hook does not rewrite in the file before: no note
    (fresh,) = up.rewrite_blocks("m.py", "black-jupyter", after_file, fixed)
    assert not up.keep(fresh, {3}, []).message.endswith("too)")


def test_a_whole_file_finding_is_the_patchs_only_if_the_file_before_passed():
    finding = up.Finding("m.py", "detect-private-key", "private key found")
    assert up.keep(finding, {1}, []) is finding
    same = up.Finding("m.py", "detect-private-key", "private key found")
    assert up.keep(finding, {1}, [same]) is None


def test_located_output_is_read_as_file_line_message():
    out = "test/x.py:12: teh ==> the\nnot a finding\npython/y.py:3:5: pdb imported\n"
    found = up._located(out, "codespell")
    assert [(f.path, f.line, f.message) for f in found] == [
        ("test/x.py", 12, "teh ==> the"),
        ("python/y.py", 3, "pdb imported"),
    ]


@pytest.mark.parametrize(
    "tag, family",
    [
        ("v0.5.9", "0.5.11"),
        ("v0.5.10.post1", "0.5.11"),
        ("v0.5.11", "0.5.11"),
        ("v0.5.12", "0.5.23"),
        ("v0.5.23", "0.5.23"),
    ],
)
def test_a_release_tag_picks_its_familys_hook_set(tag, family):
    assert up.family_of_tag(tag) == family
    assert up.HOOK_SETS[family].family == family


def test_a_tag_that_is_no_release_is_refused():
    with pytest.raises(ValueError):
        up.family_of_tag("main")
