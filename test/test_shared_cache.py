"""The caches two pytest workers (or two CLI runs) fill at once: the release unpacked for
``smoke``, the release wheel pip downloads, any ``shared_cache.filled_folder``. Both processes
start together and end with the same complete entry, made once; what a killed run left half
made is never used."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from sglang_eagle_sizing import shared_cache, wheel
from sglang_eagle_sizing.smoke.runner import release_root

VERSION = "9.9.9"  # no such sglang: the wheel is made here
#: enough files that unpacking takes a while (about a second): the two processes overlap
FILES = 3000

#: runs in each process: wait for the go file, fill, print what it got (file -> sha256)
CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
go, what, cache = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
if what == "release":
    from sglang_eagle_sizing.smoke.runner import release_root as get
    get_entry = lambda: get(cache / "wheels", "9.9.9")
elif what == "wheel":
    from sglang_eagle_sizing.wheel import cached_release_wheel
    get_entry = lambda: cached_release_wheel("9.9.9")
else:
    from sglang_eagle_sizing.shared_cache import filled_folder

    def fill(partial):
        with open(cache / "fills.log", "a") as log:
            log.write("fill\n")
        for i in range(200):
            (partial / "sub").mkdir(parents=True, exist_ok=True)
            (partial / "sub" / f"{i}.txt").write_text(str(i) * 100)
            time.sleep(0.002)

    def hang(partial):
        fill(partial)
        time.sleep(3600)  # killed here by the test

    get_entry = lambda: filled_folder(cache / "entry", hang if what == "hang" else fill)
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
entry = get_entry()
files = [entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file())
print(json.dumps({str(entry): None} | {
    str(p.relative_to(entry.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files
}))
"""


def fake_wheel(folder: Path) -> Path:
    """``sglang-9.9.9-py3-none-any.whl`` with ``FILES`` modules under ``sglang/srt/``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sglang-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(FILES):
            archive.writestr(f"sglang/srt/part{i % 40}/m{i}.py", f"VALUE = {i}\n" * 20)
        info = f"sglang-{VERSION}.dist-info/"
        archive.writestr(
            info + "METADATA",
            f"Metadata-Version: 2.1\nName: sglang\nVersion: {VERSION}\n",
        )
        archive.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    return path


def together(what: str, cache: Path, count: int = 2) -> list[dict]:
    """Start ``count`` processes filling ``what`` in ``cache`` at the same moment; each one's
    ``{entry: None, file: sha256...}``."""
    go = cache.parent / f"go-{what}"
    env = {**os.environ, wheel.CACHE_ENV: str(cache)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(go), what, str(cache)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    for child in children:
        assert child.stdout.readline() == "ready\n", child.communicate()[1][-3000:]
    go.touch()
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        results.append(json.loads(out))
    return results


def wheel_files(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as archive:
        return {
            n: hashlib.sha256(archive.read(n)).hexdigest()
            for n in archive.namelist()
            if n.startswith("sglang/")
        }


def test_two_processes_unpacking_the_release_at_once_get_the_same_whole_tree(tmp_path):
    cache = tmp_path / "cache"
    made = fake_wheel(cache / "wheels")
    first, second = together("release", cache)
    assert first == second
    root = cache / "wheels" / f"release-{VERSION}"
    prefix = f"release-{VERSION}/"
    assert {k.removeprefix(prefix): v for k, v in first.items() if v} == wheel_files(
        made
    )
    # nothing else is left beside it but the lock
    assert sorted(p.name for p in root.parent.iterdir()) == sorted(
        [made.name, root.name, root.name + ".lock"]
    )


def test_two_processes_downloading_the_release_wheel_at_once_get_the_same_file(
    tmp_path, monkeypatch
):
    # pip downloads from a local folder, not PyPI
    index = tmp_path / "index"
    made = fake_wheel(index)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    log = tmp_path / "pip.log"  # every pip run appends to it
    monkeypatch.setenv("PIP_LOG", str(log))
    cache = tmp_path / "cache"
    first, second = together("wheel", cache)
    assert first == second
    (got,) = [Path(k) for k, v in first.items() if v is None]
    assert got == cache / "wheels" / made.name
    assert got.read_bytes() == made.read_bytes()
    assert [p.name for p in got.parent.iterdir() if ".partial" in p.name] == []
    assert log.read_text().count("Looking in links:") == 1  # one download, not one each


def test_a_folder_is_filled_once_however_many_processes_ask_at_once(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    results = together("folder", cache, count=3)
    assert results[0] == results[1] == results[2]
    assert len([v for v in results[0].values() if v]) == 200
    assert (cache / "fills.log").read_text() == "fill\n"


def test_what_a_killed_run_left_is_removed_never_used(tmp_path, monkeypatch):
    index = tmp_path / "index"
    made = fake_wheel(index)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    cache = tmp_path / "cache"
    monkeypatch.setenv(wheel.CACHE_ENV, str(cache))
    # a run killed while pip wrote the wheel: half a wheel in its own folder, its pid gone
    half = cache / "wheels" / f"sglang-{VERSION}.partial-99999998" / made.name
    half.parent.mkdir(parents=True)
    half.write_bytes(made.read_bytes()[:1000])
    # one killed while unpacking the release: a partial tree, one file cut short
    left = cache / "wheels" / f"release-{VERSION}.partial-99999999"
    (left / "sglang" / "srt").mkdir(parents=True)
    (left / "sglang" / "srt" / "half.py").write_text("VALUE = ")

    got = wheel.cached_release_wheel(VERSION)
    assert got == cache / "wheels" / made.name
    assert got.read_bytes() == made.read_bytes()
    root = release_root(cache / "wheels", VERSION)
    files = {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }
    assert files == wheel_files(made)
    assert not half.parent.exists() and not left.exists()


def test_a_fill_killed_midway_is_made_again_whole(tmp_path):
    """SIGKILL while filling: the kernel drops its lock, the next process removes its
    partial folder and fills the entry itself."""
    cache = tmp_path / "cache"
    cache.mkdir()
    go = tmp_path / "go"
    go.touch()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(go), "hang", str(cache)],
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(cache.glob("entry.partial-*/sub/199.txt")):
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.01)
    child.kill()
    child.communicate()
    assert not (cache / "entry").exists()
    (left,) = cache.glob("entry.partial-*")

    def fill(partial: Path) -> None:
        partial.mkdir()
        (partial / "whole").write_text("y")

    assert shared_cache.filled_folder(cache / "entry", fill) == cache / "entry"
    assert [p.name for p in (cache / "entry").iterdir()] == ["whole"]
    assert not left.exists()


def test_a_fill_that_fails_leaves_nothing_and_the_next_one_fills(tmp_path):
    entry = tmp_path / "entry"

    def broken(partial: Path) -> None:
        partial.mkdir()
        (partial / "half").write_text("x")
        raise OSError("disk full")

    try:
        shared_cache.filled_folder(entry, broken)
    except OSError as exc:
        assert str(exc) == "disk full"
    else:
        raise AssertionError("the fill's error was swallowed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.lock"]

    def whole(partial: Path) -> None:
        partial.mkdir()
        (partial / "whole").write_text("y")

    assert shared_cache.filled_folder(entry, whole) == entry
    assert [p.name for p in entry.iterdir()] == ["whole"]
