"""Finding the SGLang package a command works on, and the files that can hold sites."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .sites import SITE_FILES

#: The SGLang release whose sites ``sites.py`` lists.
KNOWN_VERSION = "0.5.11"


class TreeError(Exception):
    """The folder is not an SGLang tree the rules know; nothing was written."""


@dataclass(frozen=True)
class SglangTree:
    #: the ``sglang`` package folder (the one holding ``srt/``)
    package: Path

    @property
    def srt(self) -> Path:
        return self.package / "srt"

    @classmethod
    def locate(cls, path: str | Path | None = None) -> "SglangTree":
        """``path``: an ``sglang`` package folder, or a checkout root holding ``python/sglang``;
        ``None``: the installed ``sglang``."""
        if path is None:
            spec = importlib.util.find_spec("sglang")
            if spec is None or not spec.submodule_search_locations:
                raise TreeError(
                    "no installed sglang found; pass the path of an SGLang tree"
                )
            return cls._checked(Path(list(spec.submodule_search_locations)[0]))
        root = Path(path)
        if not root.exists():
            raise TreeError(f"{root}: no such folder")
        if not root.is_dir():
            raise TreeError(f"{root}: not a folder")
        for candidate in (root, root / "sglang", root / "python" / "sglang"):
            if (candidate / "srt" / "speculative").is_dir():
                return cls._checked(candidate)
        raise TreeError(
            f"{root}: not an SGLang tree (no srt/speculative/ here, "
            "nor under sglang/ or python/sglang/)"
        )

    @classmethod
    def _checked(cls, package: Path) -> "SglangTree":
        tree = cls(package.resolve())
        missing = [f for f in SITE_FILES if not (tree.srt / f).is_file()]
        if missing:
            raise TreeError(
                f"{tree.srt / missing[0]}: missing; not an SGLang {KNOWN_VERSION} tree"
            )
        version = tree.version()
        if (
            version is not None
            and version.split("+")[0] != KNOWN_VERSION
            and not version.startswith(KNOWN_VERSION + ".")
        ):
            raise TreeError(
                f"{tree.package / 'version.py'}: SGLang {version}; the rules know {KNOWN_VERSION}"
            )
        return tree

    def version(self) -> str | None:
        version_file = self.package / "version.py"
        if not version_file.is_file():
            return None
        try:
            module = ast.parse(version_file.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            raise TreeError(
                f"{version_file}: cannot read the SGLang version ({exc})"
            ) from None
        for node in module.body:
            if (
                isinstance(node, ast.Assign)
                and any(
                    isinstance(t, ast.Name) and t.id == "__version__"
                    for t in node.targets
                )
                and isinstance(node.value, ast.Constant)
            ):
                return str(node.value.value)
        return None

    def files(self) -> list[str]:
        """Files (relative to ``srt/``) the rules read: the site files, plus any other
        ``speculative/`` module that names a hidden width or an idle input, so that a site
        upstream adds elsewhere is reported rather than missed."""
        files = set(SITE_FILES)
        for path in sorted((self.srt / "speculative").glob("*.py")):
            relative = f"speculative/{path.name}"
            if relative in files:
                continue
            text = self._text(path)
            if "hidden_size" in text or "create_idle_input" in text:
                files.add(relative)
        return sorted(files)

    def read(self, file: str) -> str:
        return self._text(self.srt / file)

    @staticmethod
    def _text(path: Path) -> str:
        # Bytes, not read_text: no newline translation, so a revert is byte-exact.
        try:
            return path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise TreeError(f"{path}: missing; nothing written") from None
        except OSError as exc:
            raise TreeError(
                f"{path}: cannot read ({exc.strerror}); nothing written"
            ) from None
        except UnicodeDecodeError as exc:
            raise TreeError(
                f"{path}: not UTF-8 (byte {exc.start}); not an SGLang source file, nothing written"
            ) from None
