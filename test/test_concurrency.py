"""Two processes on one tree: one runs, the other fails at once with a clear message, and the
tree ends exactly patched; the lock file cannot be swapped under a run."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import make_checkout
from sglang_eagle_sizing import transaction
from sglang_eagle_sizing.tree import SglangTree
from test_faults import small_copy, srt_digest

HOLD = """
import sys, time
from sglang_eagle_sizing import transaction
from sglang_eagle_sizing.tree import SglangTree
with transaction.locked(SglangTree.locate(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sglang_eagle_sizing", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_run_on_a_locked_tree_fails_clearly_and_writes_nothing(
    pristine, tmp_path
):
    package = small_copy(pristine, tmp_path / "sglang")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(package), "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = srt_digest(package)
        second = cli("apply", "-q", str(package))
        _, err = second.communicate(timeout=300)
        assert second.returncode == 2
        assert f"another sglang-eagle-sizing run (pid {holder.pid})" in err
        assert len(err.strip().splitlines()) == 1
        assert srt_digest(package) == before
        revert = cli("revert", str(package))
        assert (
            revert.communicate(timeout=300)[1].count("another sglang-eagle-sizing run")
            == 1
        )
    finally:
        holder.kill()
        holder.wait()


def test_two_applies_at_once_end_exactly_patched(pristine, tmp_path):
    package = small_copy(pristine, tmp_path / "sglang")
    reference = small_copy(pristine, tmp_path / "reference" / "sglang")
    assert (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sglang_eagle_sizing",
                "apply",
                "-q",
                str(reference),
            ],
            check=False,
        ).returncode
        == 0
    )
    runs = [cli("apply", "-q", str(package)) for _ in range(2)]
    results = [(run.wait(timeout=600), run.stderr.read()) for run in runs]
    codes = sorted(code for code, _ in results)
    # both finished (one after the other) or one refused with the lock message
    assert codes in ([0, 0], [0, 2]), results
    for code, err in results:
        if code == 2:
            assert "another sglang-eagle-sizing run" in err, err
    assert srt_digest(package) == srt_digest(reference)
    assert transaction.state(SglangTree.locate(package)) == "patched"
    assert not (package / transaction.LOCK).exists()


def test_lock_released_and_removed_lets_the_next_run_in(pristine, tmp_path):
    package = small_copy(pristine, tmp_path / "sglang")
    tree = SglangTree.locate(package)
    with transaction.locked(tree):
        assert (package / transaction.LOCK).read_text().strip() == str(os.getpid())
    assert not (package / transaction.LOCK).exists()
    with transaction.locked(tree):
        pass


def test_a_run_that_opened_the_lock_file_before_its_removal_locks_the_new_one(
    pristine, tmp_path
):
    """The race the inode check closes: B opens the lock file, A releases and removes it,
    B gets the flock on the removed file; B must not count that as holding the lock."""
    package = small_copy(pristine, tmp_path / "sglang")
    tree = SglangTree.locate(package)
    path = package / transaction.LOCK
    stale = os.open(path, os.O_RDWR | os.O_CREAT)  # what B opened
    os.unlink(path)  # A's release removed it
    import fcntl

    fcntl.flock(stale, fcntl.LOCK_EX)  # B's flock succeeds on the dead file...
    try:
        with transaction.locked(tree):
            # ...and a real run still gets the lock, on a new file at the path
            assert path.exists() and os.stat(path).st_ino != os.fstat(stale).st_ino
            holder = subprocess.run(
                [sys.executable, "-c", HOLD, str(package), "0"],
                check=False,
                capture_output=True,
                text=True,
            )
            assert (
                holder.returncode != 0
                and "another sglang-eagle-sizing run" in holder.stderr
            )
    finally:
        os.close(stale)


def test_two_applies_at_once_on_a_checkout_lock_under_its_git_directory(
    pristine, tmp_path
):
    checkout = make_checkout(small_copy(pristine, tmp_path / "pkg" / "sglang"), tmp_path / "fork")
    tree = SglangTree.locate(checkout)
    assert tree.lock_file.parent == checkout / ".git" / "sglang-eagle-sizing"
    runs = [cli("apply", "-q", str(checkout)) for _ in range(2)]
    results = [(run.wait(timeout=600), run.stderr.read()) for run in runs]
    assert sorted(code for code, _ in results) in ([0, 0], [0, 2]), results
    assert transaction.state(tree) == "patched"
    assert not tree.lock_file.exists()
