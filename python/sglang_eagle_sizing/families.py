"""The two SGLang release families the tool knows, and which one a tree belongs to.

- **before upstream's refactor** (0.5.9-0.5.11): every worker, graph runner and PD buffer sizes
  the hidden states inline. The patch adds the contract (classmethods on ``EagleDraftInput`` /
  ``EagleDraftExtendInput``, one parser of the drafter's config) and routes every site through
  it. Its site list is ``sites.py``, its rules ``rules/``, its inserted code ``inserted.py``, its
  fork tests ``inserted_tests/``.
- **after it** (0.5.23 tested; 0.5.12-0.5.22 on structure): upstream routes every site through
  its helpers in ``speculative/eagle_utils.py``; what is left is fixed where upstream decides it,
  in upstream's idiom. Everything of this family is in ``after_refactor/``: its sites and rules
  (``after_refactor/sites.py``, ``after_refactor/rules.py``), its inserted code (``after_refactor/inserted.py``) and its fork
  tests (``after_refactor/inserted_tests/``).

A tree's family comes from its version when it has one, else from its structure.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Family:
    #: ``0.5.9-0.5.11``, for messages
    name: str
    #: the releases the family's patch is tested on, oldest first; the last is the one whose
    #: sites the family's site list names
    tested_versions: tuple[str, ...]
    #: the modules holding its ``RULES`` and its ``SITES`` and ``SITE_FILES`` (imported when
    #: first asked)
    rules_module: str
    sites_module: str
    #: the fork's tests, laid out from the checkout root
    inserted_tests: Path

    @property
    def known_version(self) -> str:
        return self.tested_versions[-1]

    @property
    def rules(self) -> tuple:
        return importlib.import_module(self.rules_module, __package__).RULES

    @property
    def _sites(self):
        return importlib.import_module(self.sites_module, __package__)

    @property
    def site_files(self) -> tuple[str, ...]:
        """Files (relative to ``srt/``) a tree of the family must hold."""
        return self._sites.SITE_FILES

    @property
    def sites(self) -> tuple:
        """The sizing sites ``check`` must find (any not found is reported)."""
        return self._sites.SITES

    @property
    def new_modules(self) -> dict[str, str]:
        """Modules the enabled concerns add to ``srt/``: ``{file: text}``."""
        found = getattr(self._sites, "new_modules", None)
        return found() if found is not None else {}

    def test_files(self, files: dict[str, bytes]) -> dict[str, bytes]:
        """Of the fork's test files (``{path: bytes}``), those the enabled concerns add."""
        return self._sites.test_files(files)

    def holds(self, number: str) -> bool:
        """Whether an untested version number belongs to the family (by its release number)."""
        release = _release(number)
        return release is not None and _FIRST[self.name] <= release <= _LAST[self.name]


BEFORE_REFACTOR = Family(
    "0.5.9-0.5.11",
    ("0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"),
    ".rules",
    ".sites",
    _PACKAGE / "inserted_tests",
)
AFTER_REFACTOR = Family(
    "0.5.23",
    ("0.5.23",),
    ".after_refactor.rules",
    ".after_refactor.sites",
    _PACKAGE / "after_refactor" / "inserted_tests",
)
FAMILIES = (BEFORE_REFACTOR, AFTER_REFACTOR)

# Release numbers each family takes on structure (with ``--allow-untested-version``).
_FIRST = {BEFORE_REFACTOR.name: (0,), AFTER_REFACTOR.name: (0, 5, 12)}
_LAST = {BEFORE_REFACTOR.name: (0, 5, 11, 999), AFTER_REFACTOR.name: (999,)}


def _release(number: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+(?:\.\d+)*)(?:\.post(\d+))?", number)
    if match is None:
        return None
    release = tuple(int(part) for part in match.group(1).split("."))
    return release + ((int(match.group(2)),) if match.group(2) else ())


def tested_text() -> str:
    """``0.5.9, 0.5.10, 0.5.10.post1, 0.5.11 and 0.5.23``, for messages."""
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
    """A tree without a version: 0.5.11's v2 module ``eagle_info_v2.py`` is gone after the
    refactor."""
    if (srt / "speculative" / "eagle_info_v2.py").is_file():
        return BEFORE_REFACTOR
    return AFTER_REFACTOR


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
