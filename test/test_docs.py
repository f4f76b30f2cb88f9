"""The documentation says what the code does: docs/shipping.md's list of the files that
trigger the pre-commit hook agrees with the ``files`` pattern of .pre-commit-hooks.yaml; and
every relative link of the README and docs/ (a file, and a heading in it) and every path of
this repository they name in their text exists."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from conftest import REPO, STAND_IN_TESTS
from sglang_eagle_sizing.families.release_0_5_11.sites import GET_CONFIG_FILES, SITE_FILES

BEGIN, END = "<!-- hook-files: begin -->", "<!-- hook-files: end -->"


def hook_pattern() -> re.Pattern:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "sglang-eagle-sizing-check"]
    return re.compile(hook["files"])


def documented() -> list[str]:
    text = (REPO / "docs" / "shipping.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [re.match(r"- `([^`]+)`", line).group(1) for line in block.strip().splitlines()]


def covered(path: str, entries: list[str]) -> bool:
    return any(path == e or (e.endswith("/") and path.startswith(e)) for e in entries)


def test_every_documented_file_triggers_the_hook():
    pattern = hook_pattern()
    for entry in documented():
        example = entry + "any_module.py" if entry.endswith("/") else entry
        assert pattern.search(example), entry


def test_every_file_the_hook_watches_is_documented():
    entries = documented()
    watched = [f"python/sglang/srt/{f}" for f in (*SITE_FILES, *GET_CONFIG_FILES)]
    watched += ["python/sglang/version.py", *STAND_IN_TESTS]
    for path in watched:
        assert hook_pattern().search(path), path
        assert covered(path, entries), path


def test_the_pattern_has_no_alternative_the_list_lacks():
    """Each literal file the pattern spells out (its alternatives, expanded) is in the list."""
    pattern = hook_pattern().pattern
    # the alternatives under srt/: split the one group the pattern keeps them in
    inner = re.search(r"srt/\((.*)\)\)\|test/registered/\)$", pattern).group(1)
    parts, depth, current = [], 0, ""
    for char in inner:
        if char == "|" and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    parts.append(current)
    entries = documented()
    for part in parts:
        # expand one (a|b) group, if any
        group = re.search(r"\(([^()]*)\)", part)
        options = [part]
        if group:
            options = [part[: group.start()] + o + part[group.end():] for o in group.group(1).split("|")]
        for option in options:
            path = "python/sglang/srt/" + option.replace("\\.", ".")
            assert covered(path, entries), path


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
