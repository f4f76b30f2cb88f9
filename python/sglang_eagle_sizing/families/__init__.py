"""The SGLang release families the tool knows, and which one a tree belongs to.

Each family is a folder here of the same shape (``release_<its tested release>/``):

- ``__init__.py``: what the family is, in a docstring;
- ``concerns.py``: its concerns, in the order its series lands them;
- ``sites.py``: the places of the tree its rules own (``SITE_FILES``, ``SITES``, ``test_files``;
  where the family has them, ``carries_patch`` and ``has_structure``);
- ``rules/``: one module per concern, ``rules/__init__.py`` listing ``RULES``;
- ``inserted.py``: the SGLang code the rules insert;
- ``inserted_tests/``: the fork's tests, laid out from the checkout root;
- ``descriptions/``: one pull-request description per concern (Markdown);
- ``smoke_cases.py`` and ``standins/``: what ``smoke`` serves from its trees, on the CPU.

The families:

- ``release_0_5_11`` (0.5.9-0.5.11, before upstream's refactor): every worker, graph runner and
  PD buffer sizes the hidden states inline. The patch adds the contract (classmethods on
  ``EagleDraftInput`` / ``EagleDraftExtendInput``, one parser of the drafter's config) and
  routes every site through it.
- ``release_0_5_23`` (0.5.22 and 0.5.23 tested; 0.5.16-0.5.21 on structure): upstream routes every site
  through its helpers in ``speculative/eagle_utils.py``; what is left is fixed where upstream
  decides it, in upstream's idiom.

A tree's family comes from its version when it has one, else from its structure. Adding a
family is adding its folder and its line in ``FAMILIES`` (``docs/design.md`` has the recipe).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True)
class Family:
    #: ``0.5.9-0.5.11``, for messages
    name: str
    #: the releases the family's patch is tested on, oldest first; the last is the one whose
    #: sites the family's site list names
    tested_versions: tuple[str, ...]
    #: its folder here (``release_0_5_11``): the package holding its sites, rules, inserted
    #: code and tests, descriptions and smoke cases (imported when first asked)
    folder_name: str
    #: the release numbers it takes on structure (``--allow-untested-version``), both included
    first_release: tuple[int, ...]
    last_release: tuple[int, ...]
    #: what its patch does, for the command's help (``<name>: <summary>``)
    summary: str = ""

    @property
    def known_version(self) -> str:
        return self.tested_versions[-1]

    @property
    def module(self) -> str:
        return f"{__name__}.{self.folder_name}"

    @property
    def folder(self) -> Path:
        return Path(importlib.import_module(self.module).__file__).resolve().parent

    def _import(self, name: str):
        return importlib.import_module(f"{self.module}.{name}")

    @property
    def rules(self) -> tuple:
        return self._import("rules").RULES

    @property
    def concerns(self) -> tuple[str, ...]:
        """Its concerns, in the order its series lands them."""
        return self._import("concerns").ORDER

    @property
    def _sites(self):
        return self._import("sites")

    @property
    def site_files(self) -> tuple[str, ...]:
        """Files (relative to ``srt/``) a tree of the family must hold."""
        return self._sites.SITE_FILES

    def files_in(self, srt: Path, read) -> list[str]:
        """Files (relative to ``srt/``) the rules read in a tree: ``sites.files_in`` where the
        family has it (``read(path)``: a file's text), else its site files."""
        files_in = getattr(self._sites, "files_in", None)
        return files_in(srt, read) if files_in is not None else sorted(self.site_files)

    @property
    def watched_files(self) -> tuple[str, ...]:
        """Everything of a tree (relative to ``srt/``) whose change can change what ``check``
        says, for the pre-commit hook: the site files, the release file, the modules the
        patch adds, and ``sites.READ_ALSO`` (files read where the tree has them; a name ending
        in ``/``: every file under that folder, which ``sites.files_in`` scans). Sorted; a
        file under a watched folder is left out."""
        names = {*self.site_files, *getattr(self._sites, "READ_ALSO", ())}
        names.update(getattr(self._sites, "NEW_MODULES", {}))
        if self.release_file is not None:
            names.add(self.release_file)
        folders = {n for n in names if n.endswith("/")}
        return tuple(
            sorted(n for n in names if n in folders or not n.startswith(tuple(folders)))
        )

    @property
    def release_file(self) -> str | None:
        """A file of the release (relative to ``srt/``) besides those the rules rewrite whose
        text decides what they write (``sites.RELEASE_FILE``; None: none)."""
        return getattr(self._sites, "RELEASE_FILE", None)

    def release_text(self, read) -> str | None:
        """What the rules write depends on of a release besides each file they rewrite
        (``read(path)``: a file's text, raising ``OSError`` if absent):
        ``sites.release_facts(read)`` where the family has it, else the ``release_file``'s
        text (None: neither, or not read)."""
        facts = getattr(self._sites, "release_facts", None)
        if facts is not None:
            return facts(read)
        if self.release_file is None:
            return None
        try:
            return read(self.release_file)
        except OSError:
            return None

    def release_notes(self, text: str | None) -> list[str]:
        """``note:`` lines for what the release (``release_text``) does not have of the
        family's concerns: ``sites.release_notes``, else none."""
        notes = getattr(self._sites, "release_notes", None)
        return notes(text) if notes is not None else []

    @property
    def required_files(self) -> tuple[str, ...]:
        """Of ``site_files``, those a tree of the family must hold (``sites.MAY_BE_ABSENT``:
        the others)."""
        absent = set(getattr(self._sites, "MAY_BE_ABSENT", ()))
        return tuple(f for f in self.site_files if f not in absent)

    def release(self, text: str | None):
        """Within the block, the rules write for a release whose ``release_file`` reads
        ``text`` (``rules.for_release``)."""
        for_release = getattr(self._import("rules"), "for_release", None)
        return for_release(text) if for_release is not None else contextlib.nullcontext()

    @property
    def sites(self) -> tuple:
        """The sizing sites ``check`` must find (any not found is reported)."""
        return self._sites.SITES

    @property
    def new_modules(self) -> dict[str, str]:
        """Modules the enabled concerns add to ``srt/``: ``{file: text}``."""
        found = getattr(self._sites, "new_modules", None)
        return found() if found is not None else {}

    def test_files(self, files: dict[str, bytes], release: str | None = None) -> dict[str, bytes]:
        """Of the fork's test files (``{path: bytes}``), those the enabled concerns add, as
        the release (``release_text``) takes them."""
        if release is None or not hasattr(self._sites, "release_facts"):
            return self._sites.test_files(files)  # taken as they are
        return self._sites.test_files(files, release)

    @property
    def inserted_tests(self) -> Path:
        """The fork's tests, laid out from the checkout root."""
        return self.folder / "inserted_tests"

    @property
    def descriptions(self) -> Path:
        """One pull-request description per concern: ``<concern>.md``."""
        return self.folder / "descriptions"

    @property
    def standins(self) -> Path:
        """The stand-ins a CPU server of the family's trees loads first (``sitecustomize.py``)."""
        return self.folder / "standins"

    def patches(self, gpu_test: bool = False) -> tuple:
        """Its series (``series.py``): one ``series.Patch`` per concern, in order."""
        return self._import("series").patches(gpu_test)

    @property
    def pull_requests(self) -> tuple:
        """The pull requests its series is written as (``series.PULL_REQUESTS``, each a
        ``series.PullRequest``), in the order they apply; none: one flat series."""
        return getattr(self._import("series"), "PULL_REQUESTS", ())

    def cover_letter(self, request) -> str:
        """The cover letter's sections of ``request`` (``pull_requests/<name>.md``)."""
        return (self.folder / "pull_requests" / f"{request.name}.md").read_text()

    @property
    def needs(self) -> dict[str, tuple[str, ...]]:
        """The earlier patches each patch needs to apply on the release (others: none)."""
        return self._import("series").NEEDS

    def site_for(self, file: str, scope: str):
        """Its sizing site at ``file`` (relative to ``srt/``) and ``Class.method``, or None."""
        site_for = getattr(self._sites, "site_for", None)
        return site_for(file, scope) if site_for is not None else None

    @property
    def smoke(self):
        """Its ``smoke_cases`` module: ``CASES``, and for a family with sizing sites
        ``unreachable_reason(site)`` (why no case serves it on a CPU)."""
        return self._import("smoke_cases")

    @property
    def smoke_cases(self) -> tuple:
        return self.smoke.CASES

    def carries_patch(self, srt: Path) -> bool:
        """Whether the tree at ``srt`` holds what the family's patch adds, read from the files
        alone (no rule runs): ``sites.carries_patch``, else False."""
        own = getattr(self._sites, "carries_patch", None)
        return own is not None and own(srt)

    def has_structure(self, srt: Path) -> bool:
        """Whether a tree without a version at ``srt`` is the family's, by its files:
        ``sites.has_structure``, else False."""
        own = getattr(self._sites, "has_structure", None)
        return own is not None and own(srt)

    def tested_release(self, number: str | None) -> str:
        """The tested release a version number is a form of (``0.5.22`` for
        ``v0.5.22+fork.1``): the release a tree of it is compared with; else
        ``known_version``."""
        match = _tested(self).fullmatch(number or "")
        if match is None:
            return self.known_version
        found = match.group(1)
        return found if found in self.tested_versions else re.sub(r"\.post\d+$", "", found)

    def holds(self, number: str) -> bool:
        """Whether an untested version number belongs to the family (by its release number)."""
        release = _release(number)
        return release is not None and self.first_release <= release <= self.last_release


BEFORE_REFACTOR = Family(
    "0.5.9-0.5.11",
    ("0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"),
    "release_0_5_11",
    first_release=(0,),
    last_release=(0, 5, 11, 999),
    summary=(
        "route every sizing site through "
        "EagleDraftInput/EagleDraftExtendInput.hidden_size_for and dtype_for"
    ),
)
AFTER_REFACTOR = Family(
    "0.5.23",
    # 0.5.22: the same rules, each form of its code an alternative in its rule; 0.5.16-0.5.21
    # apply on structure (their fork tests run under their own pins by a script, not in CI)
    # (docs/releases.md: each release's fork tests, and what it does not have)
    ("0.5.22", "0.5.23"),
    "release_0_5_23",
    first_release=(0, 5, 12),
    last_release=(999,),
    summary=(
        "make the readers of the EAGLE-3 aux-layer count ask one parser (upstream already "
        "routes every site) and fix what is left where upstream decides it"
    ),
)
FAMILIES = (BEFORE_REFACTOR, AFTER_REFACTOR)


def family_named(name: str) -> Family:
    """The family whose ``name`` is ``name``."""
    (family,) = [f for f in FAMILIES if f.name == name]
    return family


def _release(number: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+(?:\.\d+)*)(?:\.post(\d+))?", number)
    if match is None:
        return None
    release = tuple(int(part) for part in match.group(1).split("."))
    return release + ((int(match.group(2)),) if match.group(2) else ())


def tested_text() -> str:
    """``0.5.9, 0.5.10, 0.5.10.post1, 0.5.11, 0.5.22 and 0.5.23``, for messages."""
    versions = [v for family in FAMILIES for v in family.tested_versions]
    return ", ".join(versions[:-1]) + " and " + versions[-1]


def family_of_version(number: str) -> Family | None:
    """The family of a version number: tested, or by its release number."""
    for family in FAMILIES:
        if _tested(family).fullmatch(number):
            return family
    for family in FAMILIES:
        if family.holds(number):
            return family
    return None


def family_of_structure(srt: Path) -> Family:
    """A tree without a version: the first family whose ``sites.has_structure(srt)`` holds,
    else the newest (0.5.11's family knows its trees by the v2 module ``eagle_info_v2.py``,
    gone after the refactor)."""
    for family in FAMILIES:
        if family.has_structure(srt):
            return family
    return FAMILIES[-1]


def upstream_first_refactor(srt: Path, family: Family) -> tuple[Path, int] | None:
    """(``eagle_info.py``, line) of ``EagleDraftInput.hidden_size_for`` when the tree has it
    and not ``family``'s patch: upstream's first version of the refactor (0.5.12), the
    classmethods on the input, which no family's rules take."""
    path = srt / "speculative" / "eagle_info.py"
    try:
        module = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == "EagleDraftInput":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "hidden_size_for":
                    return None if family.carries_patch(srt) else (path, item.lineno)
    return None


def _tested(family: Family) -> re.Pattern[str]:
    """A tested release (the last one's post-releases too), with any local label."""
    *older, last = family.tested_versions
    return re.compile(
        r"v?("
        + "".join(re.escape(v) + "|" for v in older)
        + rf"{re.escape(last)}(\.post\d+)?)(\+[0-9A-Za-z.]+)?"
    )


def is_tested(number: str) -> bool:
    return any(_tested(family).fullmatch(number) for family in FAMILIES)
