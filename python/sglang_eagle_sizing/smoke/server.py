"""Start an SGLang server from a given tree on the CPU, talk to it, and stop it for sure.

Each server runs in its own process group (``start_new_session``); ``Server.stop`` kills the
group (SIGTERM, then SIGKILL), and every server still running when this process exits, or is
interrupted (SIGINT/SIGTERM), is stopped too. Ports are free ports of 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from sglang_eagle_sizing.shared_cache import filled_folder

STUB_SOURCE = Path(__file__).resolve().parent / "libcuda_stub.c"
#: the checkout of this tool (``python/sglang_eagle_sizing/smoke/server.py`` in it), whose
#: ``scripts/setup.sh`` makes ``.venv-0.5.23``
REPOSITORY = Path(__file__).resolve().parents[3]
#: the environment variable naming another interpreter for 0.5.23's servers
PYTHON_0_5_23_ENV = "SGLANG_EAGLE_SIZING_PYTHON_0_5_23"


def interpreter_for(family) -> Path:
    """The Python that serves a tree of ``family`` (``families/``). Before the refactor
    (0.5.9-0.5.11): this one, whose environment holds 0.5.11's dependencies. After it (0.5.23,
    torch 2.14.1 and transformers 5.19.0, which 0.5.11's environment cannot hold):
    ``$SGLANG_EAGLE_SIZING_PYTHON_0_5_23`` if set, else ``.venv-0.5.23/bin/python`` of this
    checkout, made by ``scripts/setup.sh``."""
    from sglang_eagle_sizing.families import BEFORE_REFACTOR

    if family is BEFORE_REFACTOR:
        return Path(sys.executable)
    named = os.environ.get(PYTHON_0_5_23_ENV)
    python = Path(named) if named else REPOSITORY / ".venv-0.5.23" / "bin" / "python"
    if not python.exists():
        how = (f"{PYTHON_0_5_23_ENV} names it" if named else
               f"run bash {REPOSITORY / 'scripts' / 'setup.sh'}, or set {PYTHON_0_5_23_ENV} to "
               "a Python with sglang==0.5.23's dependencies")
        raise ServerError(f"{python}: no such interpreter to serve SGLang {family.name} ({how})")
    return python


def standins_for(family) -> Path:
    """The stand-ins folder of ``family`` (``families/<family>/standins/``), never another's."""
    return family.standins

_running: set["Server"] = set()


def _stop_all(*_args) -> None:
    for server in list(_running):
        server.stop()


def _on_signal(signum, frame) -> None:
    """Stop every server, then unwind (so temporary folders go too)."""
    _stop_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


_handlers_installed = False


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    atexit.register(_stop_all)
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _on_signal)
    _handlers_installed = True


#: SGLang derives more ports from --port (its gRPC port is --port + 10000, which must stay
#: below 65536), so the main port comes from this range: below the kernel's ephemeral ports
#: (32768 and up), where SGLang's other ports (get_free_port) and every client socket's come from
PORT_RANGE = (20000, 32000)
#: the ports above --port one server may take (+1, +13, and +233..+238 under DP attention):
#: every main port is the start of a slot this wide, so two servers' ports never meet
PORT_SLOT = 240
#: ``k/n``: this process and the servers it starts take only every n-th slot from the k-th
#: (k from 0), so that n processes side by side (pytest-xdist workers) never take one
#: another's ports; unset: every slot
PORT_SHARE_ENV = "SGLANG_EAGLE_SIZING_PORT_SHARE"
_slots_handed: list[int] = []


def port_slots() -> list[int]:
    """The main ports this process may give a server (``PORT_SHARE_ENV``)."""
    share = os.environ.get(PORT_SHARE_ENV, "0/1")
    k, _, n = share.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise ServerError(f"{PORT_SHARE_ENV}={share}: not k/n with 0 <= k < n")
    k, n = int(k), int(n)
    low, high = PORT_RANGE
    return list(range(low + k * PORT_SLOT, high - PORT_SLOT + 1, n * PORT_SLOT))


def free_port() -> int:
    """The start of a slot of ``port_slots()`` that nothing listens on now, and that this
    process handed out longest ago (never two servers of one run the same slot)."""
    import random

    slots = port_slots()
    fresh = [p for p in slots if p not in _slots_handed]
    random.shuffle(fresh)
    for port in fresh + [p for p in _slots_handed if p in slots]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port in _slots_handed:
            _slots_handed.remove(port)
        _slots_handed.append(port)
        return port
    raise ServerError(f"no free port of 127.0.0.1 among {len(slots)} in {PORT_RANGE}")


def libcuda_stub(cache: Path) -> Path:
    """A folder holding ``libcuda.so.1`` built from ``libcuda_stub.c`` (once per cache):
    ``sgl_kernel``'s extension, imported by ``mem_cache/memory_pool_host.py`` even on a
    CPU, links CUDA driver symbols; every stub returns CUDA_ERROR_NO_DEVICE."""
    folder = cache / "libcuda-stub"
    library = folder / "libcuda.so.1"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"libcuda.so.1.{os.getpid()}"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(partial), str(STUB_SOURCE)], check=True
        )
        partial.replace(library)
    return folder


def server_env(
    root: Path, stub: Path, sites_file: Path | None, extra: dict, standins: Path
) -> dict:
    """The environment of a CPU server running the ``sglang`` in ``root``, with the stand-ins
    folder ``standins`` (``standins_for``) first on its path."""
    env = dict(os.environ)
    paths = [str(standins), str(root)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(stub), env.get("LD_LIBRARY_PATH", "")) if p
    )
    env.update(
        SGLANG_EAGLE_SIZING_SMOKE="1",
        # is_cpu() is true only with it; else rotary embedding imports vllm
        SGLANG_USE_CPU_ENGINE="1",
        # memory_pool.py runs a Triton kernel whenever speculation is on
        TRITON_INTERPRET="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if sites_file is not None:
        env["SGLANG_EAGLE_SIZING_SMOKE_SITES"] = str(sites_file)
    env.update(extra)
    return env


@dataclass(eq=False)
class Server:
    root: Path
    args: list[str]
    log: Path
    env: dict
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    #: the interpreter (``interpreter_for``): its environment supplies SGLang's dependencies
    python: str = sys.executable

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.python), "-m", "sglang.launch_server",
            "--host", "127.0.0.1", "--port", str(self.port), *self.args,
        ]

    def start(self) -> None:
        _install_handlers()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.log, "w")
        self.process = subprocess.Popen(
            self.command(),
            env=self.env,
            cwd=self.log.parent,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        _running.add(self)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code, or None if it still runs after ``timeout`` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise ServerError(f"the server exited with code {code} while starting")
            try:
                with urllib.request.urlopen(self.url + "/model_info", timeout=5) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(1.0)
        raise ServerError(f"the server was not ready after {timeout:.0f} s")

    def generate(
        self,
        input_ids: list[list[int]],
        max_new_tokens: list[int],
        timeout: float,
        extra: dict | None = None,
    ) -> list[dict]:
        """One /generate call with every prompt (they batch); greedy, EOS ignored. ``extra``
        joins the request's body (PD disaggregation's bootstrap fields)."""
        body = {
            "input_ids": input_ids,
            "sampling_params": [
                {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True}
                for n in max_new_tokens
            ],
            **(extra or {}),
        }
        request = urllib.request.Request(
            self.url + "/generate",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                result = json.loads(reply.read())
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            code = self.process.poll()
            state = f"the server exited with code {code}" if code is not None else "no reply"
            raise ServerError(f"/generate failed ({state}): {exc}") from None
        return result if isinstance(result, list) else [result]

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None or _group_alive(process.pid):
            for signum, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline and _group_alive(process.pid):
                    process.poll()  # reap the leader, else it lingers as a zombie
                    time.sleep(0.2)
                if not _group_alive(process.pid):
                    break
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        _running.discard(self)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def generate_disaggregated(
    prefill: Server,
    decode: Server,
    bootstrap_port: int,
    input_ids: list[list[int]],
    max_new_tokens: list[int],
    timeout: float,
) -> list[dict]:
    """What a PD router does with one batch: the same requests, each with its own bootstrap
    room, sent to the prefill and the decode server at once (the decode server fetches the
    KV cache and the first draft state from the prefill server named by the bootstrap
    fields). The decode server's replies carry the tokens."""
    import random
    import threading

    count = len(input_ids)
    extra = {
        "bootstrap_host": ["127.0.0.1"] * count,
        "bootstrap_port": [bootstrap_port] * count,
        "bootstrap_room": [random.getrandbits(62) for _ in range(count)],
    }
    replies: dict[str, list[dict]] = {}
    errors: dict[str, ServerError] = {}

    def send(role: str, server: Server) -> None:
        try:
            replies[role] = server.generate(input_ids, max_new_tokens, timeout, extra)
        except ServerError as exc:
            errors[role] = exc

    threads = [
        threading.Thread(target=send, args=(role, server), daemon=True)
        for role, server in (("prefill", prefill), ("decode", decode))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise ServerError(
            "; ".join(f"{role} server: {error}" for role, error in errors.items())
        )
    return replies["decode"]


#: Mooncake's transfer engine, PyPI's build without CUDA: in 0.5.11 the prefill server of a
#: PD pair refuses the ``fake`` backend (server_args.py ``_handle_pd_disaggregation``), and
#: Mooncake is the one backend that runs on loopback (its "rdma" protocol falls back to TCP
#: when the machine has no RDMA device)
MOONCAKE = ("mooncake-transfer-engine-non-cuda", "0.3.13.post1")


def mooncake_engine(cache: Path, python: str = sys.executable) -> Path:
    """A folder holding Mooncake's ``mooncake`` package, installed there with pip the first
    time (never into the environment); it goes on the PD servers' ``PYTHONPATH``. ``python``:
    the servers' interpreter, which must import it."""
    name, version = MOONCAKE
    folder = cache / f"{name}-{version}"

    def install(partial: Path) -> None:
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        command += ["--target", str(partial), f"{name}=={version}"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise ServerError(f"{folder}: pip install {name}=={version} failed ({last})")

    filled_folder(folder, install, lambda: (folder / "mooncake" / "engine.so").exists())
    probe = subprocess.run(
        [str(python), "-c", "import mooncake.engine"],
        env={**os.environ, "PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        hint = " (apt-get install libibverbs1)" if "libibverbs" in last else ""
        raise ServerError(f"{folder}: mooncake.engine does not import: {last}{hint}")
    return folder


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ServerError(Exception):
    pass
