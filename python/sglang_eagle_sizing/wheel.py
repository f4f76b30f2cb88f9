"""``sglang-eagle-sizing build-wheel``: a release family's SGLang wheel with the patch applied.

Which release: ``--release`` (a release a family is tested on: 0.5.9-0.5.11, 0.5.22, 0.5.23), else the version
of the ``--wheel`` given; never a default, so that a fork on one release is not handed a wheel
of the other. The upstream wheel (``pip download --no-deps sglang==<release>`` into a cache,
or ``--wheel``) is unpacked into a temporary folder only so that the rewrite can read it; the
new wheel is written from the upstream archive's entries, with the patched files'
``FileResult.new_text`` in place of theirs and the modules the patch adds, the ``.dist-info``
folder renamed for the local version, ``METADATA`` saying it is the fork, and a new
``RECORD``. No backup folder or lock file is ever created: the temporary tree is never written
to.

Reproducible: entries sorted (``.dist-info`` last, ``RECORD`` the very last), every date
1980-01-01 00:00:00, mode 0644 (0755 where upstream had an executable bit), deflate level 6.
The same input wheel gives the same bytes with the same zlib.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle_sizing.caches import CACHE_ENV, cache_root
from sglang_eagle_sizing.families import FAMILIES, Family
from sglang_eagle_sizing.shared_cache import filling
from sglang_eagle_sizing.tree import SglangTree, TreeError, display

#: the releases a wheel is built from: every release a family is tested on
RELEASES = tuple(version for family in FAMILIES for version in family.tested_versions)
HELP = (
    "build dist/sglang-<release>+eaglesizing1-<tags>.whl: the release wheel with the patch "
    f"applied (--release {', '.join(RELEASES[:-1])} or {RELEASES[-1]}, or --wheel PATH)"
)

OK, ERROR = 0, 2
PROJECT = "sglang"
LOCAL_LABEL = "eaglesizing1"


def fork_version(release: str) -> str:
    """``0.5.23+eaglesizing1``: the release with this patch's PEP 440 local label."""
    return f"{release}+{LOCAL_LABEL}"


def family_of_release(release: str) -> Family:
    """The family tested on ``release`` (``RELEASES``)."""
    (family,) = [f for f in FAMILIES if release in f.tested_versions]
    return family


def fork_summary(release: str) -> str:
    """``METADATA``'s ``Summary``: the release, patched, and what the family's patch does."""
    family = family_of_release(release)
    return f"SGLang {release} patched by sglang-eagle-sizing: {family.summary}."


#: Every entry's date: the earliest a zip file can hold.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
COMPRESS_LEVEL = 6


class WheelError(Exception):
    """The input wheel or the output folder is not usable; nothing was written."""


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel file name: ``{name}-{version}-{tags}.whl``."""

    name: str
    version: str
    tags: str

    @classmethod
    def parse(cls, path: Path) -> WheelName:
        stem = path.name.removesuffix(".whl")
        parts = stem.split("-")
        if not path.name.endswith(".whl") or len(parts) not in (5, 6):
            raise WheelError(f"{display(path)}: not a wheel file name (name-version-tags.whl)")
        return cls(parts[0], parts[1], "-".join(parts[2:]))

    @property
    def dist_info(self) -> str:
        return f"{self.name}-{self.version}.dist-info/"

    @property
    def data(self) -> str:
        return f"{self.name}-{self.version}.data/"

    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.tags}.whl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--release",
        choices=RELEASES,
        help="the SGLang release your fork is on: its wheel is downloaded with pip (into "
        f"${CACHE_ENV}/wheels or ~/.cache/sglang-eagle-sizing/wheels) and patched by its "
        "family's rules; required unless --wheel names the wheel",
    )
    parser.add_argument(
        "--wheel",
        metavar="PATH",
        help="the upstream sglang wheel to patch, no download; its version ("
        + ", ".join(RELEASES[:-1])
        + " or "
        + RELEASES[-1]
        + ") is the release",
    )
    parser.add_argument(
        "--output",
        metavar="DIR",
        default="dist",
        help="folder the fork wheel is written to (default: dist)",
    )


def run(args: argparse.Namespace) -> int:
    from sglang_eagle_sizing.pr import output_folder

    try:
        if not args.release and not args.wheel:
            raise WheelError(
                "which release? pass --release with one of "
                + ", ".join(RELEASES)
                + " (the release your fork is on), or --wheel PATH; nothing written"
            )
        output = output_folder(args.output, "--output")  # before the slow work
        if args.wheel and not Path(args.wheel).is_file():
            what = "not a file" if Path(args.wheel).exists() else "no such file"
            raise WheelError(f"{display(Path(args.wheel))}: {what}; nothing written")
        if args.wheel:
            upstream = Path(args.wheel)
            _release_of(upstream, args.release)
        else:
            upstream = cached_release_wheel(args.release)
        built = build_wheel(upstream, output)
    except (WheelError, TreeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
    print(built)
    return OK


def _release_of(path: Path, asked: str | None = None) -> str:
    """The release of the upstream wheel at ``path``, from its name: one of ``RELEASES`` (and
    ``asked`` when ``--release`` was given too)."""
    name = WheelName.parse(path)
    if name.name != PROJECT or name.version not in RELEASES:
        raise WheelError(
            f"{display(path)}: {name.name} {name.version}; expected {PROJECT} "
            + ", ".join(RELEASES[:-1])
            + " or "
            + RELEASES[-1]
            + "; nothing written"
        )
    if asked is not None and name.version != asked:
        raise WheelError(
            f"{display(path)}: {PROJECT} {name.version}, not the --release {asked}; "
            "nothing written"
        )
    return name.version


# -- the upstream wheel ------------------------------------------------------------------


def cache_folder() -> Path:
    return cache_root() / "wheels"


def cached_release_wheel(version: str = FAMILIES[0].known_version) -> Path:
    """The ``sglang==VERSION`` wheel, downloaded with pip the first time (without a version,
    0.5.11's: what the tests and scripts of that family read)."""
    folder = cache_folder()
    pattern = f"{PROJECT}-{version}-*.whl"

    def found() -> list[Path]:
        return sorted(folder.glob(pattern))

    # pip downloads into a folder of this process's own; the wheel is renamed into place
    with filling(folder / f"{PROJECT}-{version}", lambda: bool(found())) as partial:
        if partial is not None:
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
            command += [f"{PROJECT}=={version}", "-d", str(partial)]
            result = subprocess.run(
                command, check=False, capture_output=True, text=True
            )
            downloaded = sorted(partial.glob(pattern))
            if result.returncode != 0 or not downloaded:
                last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise WheelError(
                    f"{display(folder)}: pip download {PROJECT}=={version} failed ({last})"
                )
            os.replace(downloaded[0], folder / downloaded[0].name)
    return found()[0]


def _read_upstream(path: Path) -> tuple[WheelName, dict[str, tuple[bytes, int]]]:
    """The wheel's name and its files: ``{entry name: (bytes, mode)}``; folders dropped."""
    name = WheelName.parse(path)
    _release_of(path)
    try:
        with zipfile.ZipFile(path) as archive:
            files = {
                info.filename: (archive.read(info), (info.external_attr >> 16) & 0o7777)
                for info in archive.infolist()
                if not info.is_dir()
            }
    except FileNotFoundError:
        raise WheelError(f"{display(path)}: no such file") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelError(f"{display(path)}: not a readable wheel ({exc})") from None
    if name.dist_info + "METADATA" not in files:
        raise WheelError(f"{display(path)}: no {name.dist_info}METADATA in the wheel")
    return name, files


# -- the patch ---------------------------------------------------------------------------


def patched_files(files: dict[str, tuple[bytes, int]]) -> dict[str, bytes]:
    """``{entry name: new bytes}`` of the files the rewrite changes, run on an unpacked copy."""
    from sglang_eagle_sizing.patch import rewrite_tree

    prefix = f"{PROJECT}/"
    with tempfile.TemporaryDirectory(prefix="sglang-eagle-sizing-wheel-") as tmp:
        root = Path(tmp)
        for entry, (data, _) in files.items():
            if entry.startswith(prefix):
                target = root / entry
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        tree = SglangTree.locate(root / PROJECT)
        report = rewrite_tree(tree)
        if report.unknown or report.missing:
            first = (
                report.unknown[0].format() if report.unknown else report.missing[0].key
            )
            raise WheelError(f"sizing sites the rules cannot handle, first: {first}")
        if not report.changed and not report.modules_to_add:
            raise WheelError("the upstream wheel is already patched: nothing to change")
        # a package folder's keys name files from its parent: ``sglang/srt/...``, as the
        # wheel's entries do
        patched = {tree.key(r.file): r.new_text.encode("utf-8") for r in report.changed}
        return {**patched, **report.modules_to_add}


def fork_metadata(metadata: bytes, release: str) -> bytes:
    """``METADATA`` with the local version and a summary saying it is the patched fork; every
    other line (``Requires-Dist`` included) kept byte for byte."""
    lines = metadata.decode("utf-8").split("\n")
    seen = {"Version": False, "Summary": False}
    for index, line in enumerate(lines):
        if line == "":
            break  # the end of the headers; the description follows
        key = line.split(":", 1)[0]
        if key in seen and not seen[key]:
            value = fork_version(release) if key == "Version" else fork_summary(release)
            lines[index] = f"{key}: {value}"
            seen[key] = True
    if not seen["Version"]:
        raise WheelError("METADATA: no Version header")
    if not seen["Summary"]:
        lines.insert(2, f"Summary: {fork_summary(release)}")
    return "\n".join(lines).encode("utf-8")


# -- the new wheel -----------------------------------------------------------------------


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def record(files: dict[str, bytes], record_name: str) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for entry, data in files.items():
        writer.writerow([entry, record_hash(data), len(data)])
    writer.writerow([record_name, "", ""])
    return out.getvalue().encode("utf-8")


def _renamed(entry: str, old: WheelName, new: WheelName) -> str:
    for old_prefix, new_prefix in (
        (old.dist_info, new.dist_info),
        (old.data, new.data),
    ):
        if entry.startswith(old_prefix):
            return new_prefix + entry[len(old_prefix) :]
    return entry


def _order(entry: str, new: WheelName) -> tuple[int, str]:
    """Package files first, then ``.dist-info``, with ``RECORD`` last."""
    if entry == new.dist_info + "RECORD":
        return (2, entry)
    return (1 if entry.startswith(new.dist_info) else 0, entry)


def fork_files(
    upstream: WheelName, files: dict[str, tuple[bytes, int]], patched: dict[str, bytes]
) -> tuple[WheelName, dict[str, tuple[bytes, int]]]:
    """The fork wheel's name and entries in write order, ``RECORD`` included: upstream's
    entries with the patched bytes, then the files the patch adds (``patched`` holds both)."""
    fork = WheelName(upstream.name, fork_version(upstream.version), upstream.tags)
    old_record = upstream.dist_info + "RECORD"
    entries: dict[str, tuple[bytes, int]] = {}
    for entry, (data, mode) in files.items():
        if entry == old_record:
            continue
        data = patched.get(entry, data)
        if entry == upstream.dist_info + "METADATA":
            data = fork_metadata(data, upstream.version)
        entries[_renamed(entry, upstream, fork)] = (
            data,
            0o755 if mode & 0o111 else 0o644,
        )
    for entry, data in patched.items():
        entries.setdefault(entry, (data, 0o644))  # a module the patch adds
    ordered = dict(sorted(entries.items(), key=lambda item: _order(item[0], fork)))
    new_record = fork.dist_info + "RECORD"
    ordered[new_record] = (
        record({e: d for e, (d, _) in ordered.items()}, new_record),
        0o644,
    )
    return fork, ordered


def _zip_info(entry: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(entry, date_time=ZIP_DATE)
    info.create_system = 3  # Unix, so that the mode bits below are read
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def write_wheel(path: Path, entries: dict[str, tuple[bytes, int]]) -> None:
    """Write the archive next to ``path`` and move it in place: never half a wheel."""
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix="." + path.name + ".", suffix=".tmp"
    )
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compresslevel=COMPRESS_LEVEL) as archive:
            for entry, (data, mode) in entries.items():
                archive.writestr(
                    _zip_info(entry, mode), data, compresslevel=COMPRESS_LEVEL
                )
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_wheel(upstream_wheel: Path, output: Path) -> Path:
    """Patch ``upstream_wheel`` and write the fork wheel into ``output``; return its path."""
    upstream, files = _read_upstream(upstream_wheel)
    patched = patched_files(files)
    fork, entries = fork_files(upstream, files, patched)
    target = output / fork.filename()
    try:
        output.mkdir(parents=True, exist_ok=True)
        write_wheel(target, entries)
    except OSError as exc:
        # the folder that could not be made, else the wheel (not its temporary name)
        failed = Path(exc.filename) if exc.filename else target
        where = failed if failed in (output, *output.parents) else target
        raise WheelError(
            f"{display(where)}: cannot write ({exc.strerror}); nothing written"
        ) from None
    return target
