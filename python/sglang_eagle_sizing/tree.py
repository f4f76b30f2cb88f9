"""Finding the SGLang tree a command works on: its layout, its version, and the files that can
hold sites.

Two layouts:

- a **checkout** of SGLang (or of a fork): a folder holding ``python/sglang`` and ``test/``. Diffs
  name files from its root (``python/sglang/srt/...``), ``apply`` adds the fork's tests under
  ``test/``, and when it is a git work tree this tool keeps its own state (backup, journal, lock)
  under the git directory, where ``git status`` does not see it;
- a **package** folder (``sglang`` as installed, or unpacked from a wheel): diffs name files from
  its parent (``sglang/srt/...``), the state lives in ``<sglang>/.eagle-sizing-backup/``.

The version is read wherever the tree records it (``TreeVersion.source`` says where); only the
releases a family is tested on (``families/``) are accepted, any other is refused unless the caller
allows it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sglang_eagle_sizing.families import (
    Family,
    family_of_structure,
    family_of_version,
    is_tested,
    tested_text,
    upstream_first_refactor,
)

#: The releases the patch is tested on, every family's (``families/``), for messages
TESTED_TEXT = tested_text()
#: where a git checkout keeps this tool's state, under its git directory
GIT_STATE_DIR = "sglang-eagle-sizing"
#: a package folder (no git) keeps it next to ``srt/``, under these names
BACKUP_DIR = ".eagle-sizing-backup"
LOCK = ".eagle-sizing.lock"
EDITED_DIR = ".eagle-sizing-edited"
#: the option that lets another version through, named in messages
ALLOW_FLAG = "--allow-untested-version"


class TreeError(Exception):
    """The folder is not an SGLang tree the rules know; nothing was written."""


@dataclass(frozen=True)
class TreeVersion:
    number: str
    #: where it was read: a file path, or "git tag v0.5.11"
    source: str

    @property
    def known(self) -> bool:
        return is_tested(self.number)

    def __str__(self) -> str:
        return f"SGLang {self.number} ({self.source})"


@dataclass(frozen=True)
class SglangTree:
    #: the ``sglang`` package folder (the one holding ``srt/``)
    package: Path
    #: the checkout root (holding ``python/sglang`` and ``test/``), or None for a package folder
    checkout: Path | None = None
    #: the checkout's git directory (``git rev-parse --git-dir``), or None
    git_dir: Path | None = None
    #: the checkout root relative to the git work tree's top (``""`` when they are one)
    git_prefix: str = ""
    version: TreeVersion | None = field(default=None, compare=False)

    @property
    def family(self) -> Family:
        """The release family (``families/``): by the version, else by structure."""
        if self.version is not None:
            found = family_of_version(self.version.number)
            if found is not None:
                return found
        return family_of_structure(self.srt)

    # -- layout ---------------------------------------------------------------------------
    @property
    def srt(self) -> Path:
        return self.package / "srt"

    @property
    def root(self) -> Path:
        """The folder diffs and the backup name files from: the checkout root, or the
        package's parent."""
        return self.checkout if self.checkout is not None else self.package.parent

    def key(self, srt_file: str) -> str:
        """The name (posix, relative to ``root``) of a file given relative to ``srt/``."""
        return (self.srt / srt_file).relative_to(self.root).as_posix()

    def path(self, key: str) -> Path:
        return self.root / key

    @property
    def takes_tests(self) -> bool:
        """Whether ``apply`` adds the fork's tests (a checkout has ``test/``; an installed
        package has nowhere to put them)."""
        return self.checkout is not None

    @property
    def state_dir(self) -> Path:
        """Where this tool keeps its state for the tree, out of git's sight when it can."""
        if self.git_dir is None:
            return self.package
        state = self.git_dir / GIT_STATE_DIR
        if self.git_prefix:
            state = state / self.git_prefix.replace("/", "--")
        return state

    @property
    def backup_dir(self) -> Path:
        if self.git_dir is None:
            return self.package / BACKUP_DIR
        return self.state_dir / "backup"

    @property
    def lock_file(self) -> Path:
        if self.git_dir is None:
            return self.package / LOCK
        return self.state_dir / "lock"

    @property
    def kept_edited_dir(self) -> Path:
        """Where ``revert --force`` keeps hand-edited files it replaced (outlives the backup)."""
        if self.git_dir is None:
            return self.package / EDITED_DIR
        return self.state_dir / "edited"

    def describe(self, cwd: Path | None = None) -> str:
        """``SGLang 0.5.11 (git tag v0.5.11) at python/sglang``: which tree, for one line."""
        version = str(self.version) if self.version else "SGLang (version unknown)"
        return f"{version} at {display(self.package, cwd)}"

    def version_note(self) -> str | None:
        """The one line to print about the version, if any: none found, or another version
        let through by ``ALLOW_FLAG``."""
        if self.version is None:
            return (
                f"note: no SGLang version found at {display(self.package)} (no v* git tag, "
                "_version.py, dist-info or literal __version__); proceeding on structure"
            )
        if not self.version.known:
            return (
                f"warning: {self.version}: only {TESTED_TEXT} are tested; proceeding on "
                f"structure ({ALLOW_FLAG})"
            )
        return None

    # -- finding it -----------------------------------------------------------------------
    @classmethod
    def locate(
        cls,
        path: str | Path | None = None,
        allow_untested_version: bool = False,
        allow_upstream_refactor: bool = False,
        notify: Callable[[str], None] | None = None,
    ) -> SglangTree:
        """``notify``: called with the one line on the version (``version_note``) as soon as
        the version is known, before any other refusal.

        ``path``: an ``sglang`` package folder, or a checkout root holding ``python/sglang``;
        ``None``: the installed ``sglang``. A version no family is tested on is refused
        (naming it and where it was read) unless ``allow_untested_version``; a tree carrying
        upstream's own refactor is refused unless ``allow_upstream_refactor`` (``smoke`` serves
        one, as the comparison, and writes nothing)."""
        if path is None:
            import importlib.util

            spec = importlib.util.find_spec("sglang")
            if spec is None or not spec.submodule_search_locations:
                raise TreeError(
                    "no installed sglang found; pass the path of an SGLang tree"
                )
            package = Path(next(iter(spec.submodule_search_locations)))
        else:
            root = Path(path)
            if not root.exists():
                raise TreeError(f"{display(root)}: no such folder")
            if not root.is_dir():
                raise TreeError(f"{display(root)}: not a folder")
            for candidate in (root, root / "sglang", root / "python" / "sglang"):
                if (candidate / "srt" / "speculative").is_dir():
                    package = candidate
                    break
            else:
                raise TreeError(
                    f"{display(root)}: not an SGLang tree (no srt/speculative/ here, "
                    "nor under sglang/ or python/sglang/)"
                )
        return cls._checked(
            package.resolve(), allow_untested_version, allow_upstream_refactor, notify
        )

    @classmethod
    def _checked(
        cls,
        package: Path,
        allow_untested_version: bool,
        allow_upstream_refactor: bool = False,
        notify: Callable[[str], None] | None = None,
    ) -> SglangTree:
        checkout = None
        root = package.parent.parent
        if package.parent.name == "python" and any(
            (root / marker).exists() for marker in ("test", ".git", "python/pyproject.toml")
        ):
            # SGLang's layout: python/sglang, test/ beside it (created by apply if missing)
            checkout = root
        git_dir, prefix = _git_dir(checkout) if checkout is not None else (None, "")
        tree = cls(package, checkout, git_dir, prefix)
        tree = cls(package, checkout, git_dir, prefix, tree._find_version())
        note = tree.version_note()
        if notify is not None and note is not None:
            if tree.version is None or tree.version.known or allow_untested_version:
                notify(note)
        upstream = tree.upstream_refactor()
        if upstream is not None and not allow_upstream_refactor:
            raise TreeError(
                f"{display(package)}: {tree.version or 'this SGLang'} already carries "
                "upstream's own version of this refactor (EagleDraftInput.hidden_size_for at "
                f"{upstream}, without this patch's helpers); nothing written"
            )
        if (
            tree.version is not None
            and not tree.version.known
            and not allow_untested_version
        ):
            raise TreeError(
                f"{display(package)}: {tree.version}; only {TESTED_TEXT} are tested, "
                f"nothing written ({ALLOW_FLAG} proceeds on structure)"
            )
        family = tree.family
        missing = [f for f in family.required_files if not (tree.srt / f).is_file()]
        if missing:
            raise TreeError(
                f"{display(tree.srt / missing[0])}: missing; not an SGLang "
                f"{family.known_version} tree"
            )
        return tree

    def upstream_refactor(self) -> str | None:
        """``eagle_info.py:LINE`` of ``EagleDraftInput.hidden_size_for`` when the tree has it
        but not the patch of its family: upstream's first refactor (0.5.12)."""
        found = upstream_first_refactor(self.srt, self.family)
        return None if found is None else f"{display(found[0])}:{found[1]}"

    # -- the version ----------------------------------------------------------------------
    def _find_version(self) -> TreeVersion | None:
        """The first of: the nearest ``v*`` git tag (a checkout; setuptools_scm's generated
        ``_version.py`` there names the *next* version), ``_version.py`` (release wheels), the
        installed distribution's metadata next to the package, a literal ``__version__`` in
        ``version.py``."""
        finders = [
            self._from_version_file("_version.py"),
            self._from_dist_info,
            self._from_version_file("version.py"),
        ]
        if self.git_dir is not None:
            finders.insert(0, self._from_git_tag)
        for finder in finders:
            found = finder()
            if found is not None:
                return found
        return None

    def _from_version_file(self, name: str):
        def find() -> TreeVersion | None:
            path = self.package / name
            if not path.is_file():
                return None
            try:
                module = ast.parse(path.read_bytes())
            except (OSError, SyntaxError, ValueError) as exc:
                raise TreeError(
                    f"{display(path)}: cannot read the SGLang version ({exc})"
                ) from None
            for node in module.body:
                if (
                    isinstance(node, ast.Assign)
                    and any(
                        isinstance(t, ast.Name) and t.id == "__version__"
                        for t in node.targets
                    )
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                ):
                    return TreeVersion(node.value.value, display(path))
            return None

        return find

    def _from_dist_info(self) -> TreeVersion | None:
        found = sorted(self.package.parent.glob("sglang-*.dist-info"))
        if len(found) != 1:
            return None
        metadata = found[0] / "METADATA"
        try:
            lines = metadata.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        for line in lines:
            if not line:
                break
            if line.startswith("Version:"):
                return TreeVersion(line.split(":", 1)[1].strip(), display(metadata))
        return None

    def _from_git_tag(self) -> TreeVersion | None:
        result = _git(
            self.checkout, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"
        )
        if result is None:
            return None
        tag = result.strip()
        return TreeVersion(tag[1:], f"git tag {tag}") if tag else None

    # -- the files ------------------------------------------------------------------------
    def files(self) -> list[str]:
        """Files (relative to ``srt/``) the rules read: the family's (``sites.files_in``)."""
        return self.family.files_in(self.srt, self._text)

    def formatter_line_length(self) -> int | None:
        """The line length the fork's formatter uses: ``[tool.black] line-length``, else
        ``[tool.ruff] line-length``, of the first ``pyproject.toml`` above ``srt/`` (as black
        finds it), up to the checkout root; ``None``: black's default."""
        folder = self.package
        while True:
            config = folder / "pyproject.toml"
            if config.is_file():
                try:
                    tools = tomllib.loads(config.read_text(encoding="utf-8")).get("tool", {})
                except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                    raise TreeError(f"{display(config)}: unreadable ({exc}); nothing written") from None
                for tool in ("black", "ruff"):
                    length = tools.get(tool, {}).get("line-length")
                    if isinstance(length, int) and length > 0:
                        return length
                    if length is not None:
                        raise TreeError(
                            f"{display(config)}: [tool.{tool}] line-length = {length!r} is "
                            "not a positive integer; nothing written"
                        )
                return None
            if folder == self.root or folder.parent == folder:
                return None
            folder = folder.parent

    def read(self, file: str) -> str:
        return self._text(self.srt / file)

    def holds(self, key: str) -> bool:
        """Whether the tree has the file ``key`` (a path from ``root``)."""
        return self.path(key).exists()

    @staticmethod
    def _text(path: Path) -> str:
        # Bytes, not read_text: no newline translation, so a revert is byte-exact.
        try:
            return path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise TreeError(f"{display(path)}: missing; nothing written") from None
        except OSError as exc:
            raise TreeError(
                f"{display(path)}: cannot read ({exc.strerror}); nothing written"
            ) from None
        except UnicodeDecodeError as exc:
            raise TreeError(
                f"{display(path)}: not UTF-8 (byte {exc.start}); not an SGLang source file, nothing written"
            ) from None


def display(path: Path, cwd: Path | None = None) -> str:
    """``path`` as the user can open it from where they stand: relative to the working folder
    when it is under it, else absolute."""
    try:
        here = (cwd or Path.cwd()).resolve()
    except OSError:
        return str(path)
    try:
        relative = Path(os.path.abspath(path)).relative_to(here)
    except ValueError:
        return str(path)
    return str(relative) if str(relative) != "." else "."


def _git(folder: Path, *args: str) -> str | None:
    """``git ARGS`` run in ``folder`` (never told where the repository is by the environment:
    a git hook's GIT_DIR names the repository the hook runs for); stdout, or None."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX")
    }
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def _git_dir(checkout: Path) -> tuple[Path | None, str]:
    """The checkout's git directory (works for linked worktrees), and the checkout's path
    inside the work tree (``""`` at its top)."""
    found = _git(checkout, "rev-parse", "--git-dir", "--show-toplevel")
    if found is None:
        return None, ""
    lines = found.splitlines()
    if len(lines) != 2:
        return None, ""
    git_dir = Path(lines[0])
    if not git_dir.is_absolute():
        git_dir = checkout / git_dir
    try:
        prefix = checkout.resolve().relative_to(Path(lines[1]).resolve()).as_posix()
    except ValueError:
        return None, ""
    return git_dir.resolve(), "" if prefix == "." else prefix
