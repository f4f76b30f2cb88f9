"""The documentation says what the code does: .pre-commit-hooks.yaml and docs/shipping.md's
list of the files that trigger it are generated from the release families and watch every
file their rules read; and
every relative link of the README and docs/ (a file, and a heading in it) and every path of
this repository they name in their text exists."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from conftest import REPO, STAND_IN_TESTS
from sglang_eagle_sizing.families import FAMILIES
from sglang_eagle_sizing.patch import inserted_test_files

sys.path.insert(0, str(REPO / "scripts"))
import precommit_hooks  # noqa: E402

def hook_pattern() -> re.Pattern:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == precommit_hooks.HOOK_ID]
    return re.compile(hook["files"])


def test_the_hook_and_its_documented_files_are_generated_from_the_families():
    """.pre-commit-hooks.yaml and docs/shipping.md's list are what scripts/precommit_hooks.py
    writes from the families today: when a family's sites grow, this fails until it is run."""
    assert (REPO / ".pre-commit-hooks.yaml").read_text() == precommit_hooks.hooks_text()
    shipping = (REPO / "docs" / "shipping.md").read_text()
    assert shipping == precommit_hooks.with_block(shipping)


def _example(path: str) -> str:
    return path + "any_module.py" if path.endswith("/") else path


def test_the_hook_watches_every_file_each_familys_rules_read():
    pattern = hook_pattern()
    for family in FAMILIES:
        for name in family.watched_files:
            assert pattern.search(_example("python/sglang/srt/" + name)), (family.name, name)
        for name in family.site_files:
            assert pattern.search("python/sglang/srt/" + name), (family.name, name)
        for key in inserted_test_files(family):
            assert pattern.search(key), (family.name, key)
    for key in (*STAND_IN_TESTS, "python/sglang/version.py"):
        assert pattern.search(key), key
    for other in ("python/sglang/srt/layers/linear.py", "python/sglang/srt/models/mistral.py",
                  "docs/README.md", "python/sglang/srt/models/gpt_oss.py.orig"):
        assert not pattern.search(other), other


def test_every_documented_file_triggers_the_hook():
    text = (REPO / "docs" / "shipping.md").read_text()
    block = text.split(precommit_hooks.BEGIN, 1)[1].split(precommit_hooks.END, 1)[0]
    documented = [re.match(r"- `([^`]+)`", line).group(1) for line in block.strip().splitlines()]
    assert documented == list(precommit_hooks.watched())
    for entry in documented:
        assert hook_pattern().search(_example(entry)), entry


#: the README and every document under docs/ (docs/development/ included)
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
#: a Markdown link's target: ``[text](target)``
LINK = re.compile(r"\]\(([^()\s]+)\)")
#: a path of this repository named in the text: ``docs/smoke.md``, ``scripts/series_table.py``
MENTION = re.compile(
    r"(?<![\w/.$<-])((?:docs|scripts|benchmark)/[\w./-]*\w\.(?:md|py|sh))\b"
)


def anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``document`` (a repeated one: ``-1``, ...)."""
    found: set[str] = set()
    fenced = False
    for line in document.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        heading = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in found:
            n += 1
            anchor = f"{slug}-{n}"
        found.add(anchor)
    return found


def test_every_relative_link_of_the_docs_resolves():
    broken = []
    for document in DOCUMENTS:
        for target in LINK.findall(document.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path).resolve() if path else document
            name = f"{document.relative_to(REPO)}: ({target})"
            if not linked.exists():
                broken.append(f"{name}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{name}: no heading #{anchor} in {linked.name}")
    assert broken == [], "\n".join(broken)


def test_every_path_the_docs_name_exists():
    """A document, script or benchmark named in the text (``docs/smoke.md``), from the root."""
    missing = []
    for document in DOCUMENTS:
        for path in sorted(set(MENTION.findall(document.read_text()))):
            if not (REPO / path).exists():
                missing.append(f"{document.relative_to(REPO)}: {path}")
    assert missing == [], "\n".join(missing)


#: an absolute path of a machine (the one the docs were written on): ``/work/...``,
#: ``/tmp/...``, a home folder; a system tool's (``/usr/bin/time``) is not one
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|tmp|root|home|Users|mnt|scratch)/[^\s`)]*")


def test_no_document_names_a_path_of_the_machine_it_was_written_on():
    found = [
        f"{document.relative_to(REPO)}:{number}: {match.group(0)}"
        for document in DOCUMENTS
        for number, line in enumerate(document.read_text().splitlines(), 1)
        for match in MACHINE_PATH.finditer(line)
    ]
    assert found == [], "\n".join(found)
