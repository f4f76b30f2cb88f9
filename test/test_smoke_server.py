"""The smoke harness leaves no process or port behind: a server's whole process group goes when
it is stopped, when the command exits and when it is interrupted. A stand-in command (a Python
parent with a child) replaces ``launch_server``; no SGLang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sglang_eagle_sizing.smoke import server as smoke_server

FAMILY = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


class FamilyServer(smoke_server.Server):
    def command(self):
        return [sys.executable, "-c", FAMILY]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_for_child(log: Path) -> int:
    for _ in range(100):
        text = log.read_text().strip() if log.exists() else ""
        if text:
            return int(text.splitlines()[0])
        time.sleep(0.1)
    raise AssertionError("the stand-in server did not start its child")


def test_stop_kills_the_whole_process_group(tmp_path):
    server = FamilyServer(tmp_path, [], tmp_path / "server.log", dict(os.environ))
    server.start()
    child = wait_for_child(server.log)
    assert alive(server.process.pid) and alive(child)
    server.stop()
    assert not alive(server.process.pid)
    assert not alive(child)
    assert server not in smoke_server._running


def test_free_port_is_on_loopback_in_range():
    port = smoke_server.free_port()
    low, high = smoke_server.PORT_RANGE
    assert low <= port <= high  # SGLang's gRPC port (+10000) must stay below 65536


# SGLang 0.5.11's ports above --port: +1 (gRPC sidecar), +13 (DP handshake), +233..+238
# (DP attention's ZMQ ports, ZMQ_TCP_PORT_DELTA 233 and the five above it)
DERIVED = (0, 1, 13, *range(233, 239))


def test_two_workers_servers_never_share_a_port(monkeypatch):
    """Each pytest-xdist worker (conftest gives it its share) starts servers whose ports, the
    derived ones too, none of the other worker's reach, nor the kernel's ephemeral ports."""
    taken = []
    for share in ("0/2", "1/2"):
        monkeypatch.setenv(smoke_server.PORT_SHARE_ENV, share)
        slots = smoke_server.port_slots()
        assert len(slots) >= 20
        taken.append({port + d for port in slots for d in DERIVED})
        assert max(slots) + max(DERIVED) < smoke_server.PORT_RANGE[1]
        assert max(slots) + 10000 < 65536
        # one process's servers side by side (a PD pair and its bootstrap port): each its own
        picked = [smoke_server.free_port() for _ in range(3)]
        assert len(set(picked)) == 3 and set(picked) <= set(slots)
    assert taken[0].isdisjoint(taken[1])
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert max(taken[0] | taken[1]) < ephemeral_low


def test_a_bad_port_share_is_one_line(monkeypatch):
    monkeypatch.setenv(smoke_server.PORT_SHARE_ENV, "2/2")
    with pytest.raises(smoke_server.ServerError, match=r"^SGLANG_EAGLE_SIZING_PORT_SHARE=2/2: "):
        smoke_server.port_slots()


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_interrupt_stops_the_servers_and_unwinds(tmp_path, signum):
    # SIGTERM too: a run started in the background of a script ignores SIGINT (POSIX job
    # control), and smoke leaves an ignored SIGINT alone; such a run is stopped with kill
    script = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_smoke_server import FamilyServer, wait_for_child
        server = FamilyServer(Path({str(tmp_path)!r}), [], Path({str(tmp_path / 'server.log')!r}), dict(os.environ))
        server.start()
        print("CHILD", wait_for_child(server.log), "LEADER", server.process.pid, flush=True)
        try:
            os.kill(os.getpid(), signal.{signum})
            time.sleep(30)
        except (KeyboardInterrupt, SystemExit):
            print("UNWOUND", flush=True)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        # as from a terminal, whatever this test runs under (a background job ignores SIGINT)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    words = result.stdout.split()
    assert "UNWOUND" in words, result.stdout + result.stderr
    child, leader = int(words[words.index("CHILD") + 1]), int(words[words.index("LEADER") + 1])
    assert not alive(child) and not alive(leader)


class RecordingServer(smoke_server.Server):
    """Records the requests it is sent instead of serving them."""

    def __init__(self, role: str, fail: bool = False):
        super().__init__(Path("."), [], Path("unused.log"), {}, port=1)
        self.role, self.fail, self.sent = role, fail, []

    def generate(self, input_ids, max_new_tokens, timeout, extra=None):
        self.sent.append((input_ids, max_new_tokens, extra))
        if self.fail:
            raise smoke_server.ServerError("no reply")
        return [{"output_ids": [self.role]} for _ in input_ids]


def test_pd_requests_go_to_both_servers_with_one_bootstrap_room_each():
    prefill, decode = RecordingServer("prefill"), RecordingServer("decode")
    replies = smoke_server.generate_disaggregated(prefill, decode, 4321, [[1, 2], [3]], [4, 5], 10)
    assert replies == [{"output_ids": ["decode"]}] * 2  # the decode server's tokens
    (ids_p, new_p, extra_p), = prefill.sent
    (ids_d, new_d, extra_d), = decode.sent
    assert (ids_p, new_p) == (ids_d, new_d) == ([[1, 2], [3]], [4, 5])
    assert extra_p == extra_d
    assert extra_p["bootstrap_host"] == ["127.0.0.1"] * 2
    assert extra_p["bootstrap_port"] == [4321] * 2
    rooms = extra_p["bootstrap_room"]
    assert len(set(rooms)) == 2 and all(isinstance(r, int) for r in rooms)


def test_pd_failure_names_the_server():
    prefill, decode = RecordingServer("prefill", fail=True), RecordingServer("decode")
    try:
        smoke_server.generate_disaggregated(prefill, decode, 4321, [[1]], [2], 10)
    except smoke_server.ServerError as exc:
        assert str(exc) == "prefill server: no reply"
    else:
        raise AssertionError("a failed prefill server must fail the batch")
