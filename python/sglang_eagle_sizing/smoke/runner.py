"""Run smoke cases on a tree: build the models, serve, compare, record which sites ran."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_eagle_sizing.families import BEFORE_REFACTOR, Family
from sglang_eagle_sizing.shared_cache import filled_folder
from sglang_eagle_sizing.smoke import models, targets
from sglang_eagle_sizing.smoke.cases import Batch, Case
from sglang_eagle_sizing.smoke.server import (
    Server,
    ServerError,
    free_port,
    generate_disaggregated,
    interpreter_for,
    libcuda_stub,
    mooncake_engine,
    server_env,
    standins_for,
)

#: the folder the stand-ins' recorder saves captured aux hidden states to
AUX_ENV = "SGLANG_EAGLE_SIZING_SMOKE_AUX"
START_TIMEOUT = 420.0
REQUEST_TIMEOUT = 900.0
REFUSE_TIMEOUT = 300.0


def progress(message: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _key(obj) -> str:
    return hashlib.sha256(json.dumps(asdict(obj), sort_keys=True, default=str).encode()).hexdigest()[:12]


def _class_key(spec: models.TargetSpec) -> str:
    """A class target's config too (``classes.config_of``), which the spec does not hold."""
    if not spec.own_class:
        return ""
    from sglang_eagle_sizing.smoke.classes import config_of

    digest = hashlib.sha256(json.dumps(config_of(spec), sort_keys=True).encode()).hexdigest()
    return "-" + digest[:8]


@dataclass
class Models:
    """Built model folders under ``folder``, one per spec (reused within a run)."""

    folder: Path

    def target(self, spec: models.TargetSpec) -> Path:
        path = self.folder / f"target-{_key(spec)}{_class_key(spec)}"
        if not (path / ("config.json" if spec.config_only else "model.safetensors")).exists():
            targets.build_target(spec, path)
        return path

    def drafter(self, spec: models.DrafterSpec, target: models.TargetSpec) -> Path:
        path = self.folder / f"drafter-{spec.kind}-{_key(spec)}-{_key(target)}{_class_key(target)}"
        if not (path / "model.safetensors").exists():
            models.build_drafter(spec, target, path)
        return path


def reference_tokens(target_dir: Path, batch: Batch, dtype: str) -> list[list[int]]:
    """transformers' greedy ``generate`` for each prompt of ``batch``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        target_dir, dtype=getattr(torch, dtype) if dtype != "auto" else "auto"
    )
    outputs = []
    for prompt, new in zip(batch.prompts, batch.max_new_tokens):
        ids = torch.tensor([list(prompt)])
        out = model.generate(
            ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
            eos_token_id=None, pad_token_id=0,
        )
        outputs.append(out[0, len(prompt):].tolist())
    return outputs


@dataclass
class Run:
    """One server run of one case on one tree."""

    case: str
    tree: str
    status: str = "not run"  # served | refused | crashed | error
    outputs: dict = field(default_factory=dict)
    accept_length: float | None = None
    #: per batch name
    accept_lengths: dict = field(default_factory=dict)
    #: per batch name: seconds from the request to the last token (decode throughput)
    batch_seconds: dict = field(default_factory=dict)
    sites: list = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    log_tail: str = ""
    log: str = ""
    #: what the target captured, as transformers' hidden states (``capture.captured_states``;
    #: empty unless the case compares it)
    capture: dict = field(default_factory=dict)


def _accept_length(replies: list[dict]) -> float | None:
    verify = sum(r["meta_info"].get("spec_verify_ct", 0) or 0 for r in replies)
    tokens = sum(r["meta_info"]["completion_tokens"] for r in replies)
    return tokens / verify if verify else None


def reference_case(case: Case) -> Case:
    """The run without speculation that ``case``'s tokens are compared with: its target,
    dtype, target flags and their environment; every batch when transformers is a
    reference too, else the case's own."""
    from sglang_eagle_sizing.smoke.cases import ALL_BATCHES

    dp = "-dp-attention" if "--enable-dp-attention" in case.target_flags else ""
    return Case(
        name=f"target-{case.target.model_type}-{case.target.dtype}{dp}",
        description="",
        algorithm=None,
        drafter=None,
        flags=(),
        batches=ALL_BATCHES if case.reference else case.batches,
        target=case.target,
        dtype=case.dtype,
        target_flags=case.target_flags,
        target_env=case.target_env,
        plain_attention_backend=case.plain_attention_backend,
    )


def server_command(
    case: Case, target_dir: Path, drafter_dir: Path, speculative: bool = True
) -> tuple[list[str], dict[str, str]]:
    """The server flags and extra environment of ``case``. Without ``speculative``: the
    reference run, which keeps the target's flags and the environment they need
    (``target_flags``, ``target_env``) and drops the case's own, DP attention included
    unless the target's flags hold it."""
    args = case.server_args(target_dir, drafter_dir)
    env = dict(case.target_env)
    if speculative:
        return args, {**env, **dict(case.env)}
    if "--speculative-algorithm" in args:
        # the case's own flags come after it
        args = args[: args.index("--speculative-algorithm")]
    # a different attention kernel than the speculative run's: a stronger check
    args[args.index("--attention-backend") + 1] = case.plain_attention_backend
    return args, env


def serve_case(
    root: Path,
    tree_label: str,
    case: Case,
    built: Models,
    workdir: Path,
    cache: Path,
    speculative: bool = True,
    family=BEFORE_REFACTOR,
) -> Run:
    """Start a server for ``case`` (without its drafter if not ``speculative``) from the
    ``sglang`` in ``root``, a tree of ``family`` (``families/``: its interpreter and its
    stand-ins), send every batch, stop it."""
    name = case.name if speculative else f"{case.name}/no-spec"
    run = Run(case=name, tree=tree_label)
    try:
        python = interpreter_for(family)
    except ServerError as exc:
        run.status, run.error = "error", str(exc)
        return run
    standins = standins_for(family)
    target_dir = built.target(case.target)
    drafter_dir = built.drafter(case.drafter, case.target) if case.drafter else target_dir
    folder = workdir / tree_label / name.replace("/", "-")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    sites_file = folder / "sites.jsonl"
    args, env = server_command(case, target_dir, drafter_dir, speculative)
    aux_dir = folder / "aux"
    compare = speculative and case.compare_capture and not case.pd
    if compare:
        aux_dir.mkdir()
        env = {**env, AUX_ENV: str(aux_dir)}
    stub = libcuda_stub(cache)
    start = time.monotonic()
    if speculative and case.pd:
        return _serve_pd(root, tree_label, case, args, env, folder, stub, cache, run, start,
                         python, standins)
    server = Server(root, args, folder / "server.log",
                    server_env(root, stub, sites_file, env, standins), python=str(python))
    run.log = str(server.log)
    progress(f"{name} on {tree_label}: starting the server (log: {server.log})")
    server.start()
    try:
        if speculative and case.expect == "refuse":
            try:
                server.wait_ready(REFUSE_TIMEOUT)
                code = None
            except ServerError:
                code = server.process.poll()
            run.log_tail = server.log_tail()
            if code is None:
                run.status, run.error = "served", "the server started instead of refusing"
            elif code != 0:
                run.status = "refused"
                lines = [l for l in run.log_tail.splitlines() if case.message in l]
                run.error = lines[-1].strip() if lines else f"exit code {code}"
            else:
                run.status, run.error = "error", "the server exited with code 0"
            return run
        server.wait_ready(START_TIMEOUT)
        progress(f"{name} on {tree_label}: ready after {time.monotonic() - start:.0f} s")
        _send_batches(run, case, speculative, server.generate)
        if compare:
            from sglang_eagle_sizing.smoke.capture import captured_states

            run.capture = captured_states(
                aux_dir, target_dir, case.batches[0].prompts, case.target.hidden_size
            )
    except ServerError as exc:
        server.stop()  # its log is complete
        _crashed(run, exc, server.log_tail(), server.log_tail(10**6))
    finally:
        server.stop()
        run.seconds = time.monotonic() - start
        if sites_file.exists():
            run.sites = _read_sites(sites_file)
    return run


def _send_batches(run: Run, case: Case, speculative: bool, generate) -> None:
    """Send every batch of ``case`` through ``generate``; fills ``run``'s outputs."""
    replies_all = []
    for batch in case.batches:
        sent = time.monotonic()
        replies = generate(
            [list(p) for p in batch.prompts],
            list(batch.max_new_tokens),
            case.request_timeout or REQUEST_TIMEOUT,
        )
        run.outputs[batch.name] = [r["output_ids"] for r in replies]
        run.accept_lengths[batch.name] = _accept_length(replies)
        run.batch_seconds[batch.name] = time.monotonic() - sent
        replies_all += replies
        progress(f"{run.case} on {run.tree}: batch {batch.name} done")
    run.accept_length = _accept_length(replies_all) if speculative else None
    run.status = "served"


def differences(run: Run, reference: dict, batches) -> list[str]:
    """How ``run`` differs from a saved served run (a ``Run``'s dict) on ``batches``: its
    crash, other tokens or another accept length; empty if it does not."""
    if run.status != "served":
        return [f"{run.status}: {run.error}"]
    found = []
    for batch in batches:
        if run.outputs.get(batch.name) != reference["outputs"].get(batch.name):
            found.append(f"{batch.name}: other tokens")
        if run.accept_lengths.get(batch.name) != reference["accept_lengths"].get(batch.name):
            found.append(f"{batch.name}: another accept length")
    return found


EXCEPTION_LINE = re.compile(r"\b\w*(?:Error|Exception)\b(?::|\s*$)")


#: an exception that follows another process's crash: the cause is an earlier exception
CONSEQUENCES = (
    # the launcher, when a DP-attention scheduler dies at start-up
    "scheduler died during initialization",
    # gloo in the other ranks, when one rank's scheduler crashed (0.5.23 under DP attention)
    "Connection closed by peer",
)


def _crashed(run: Run, exc: Exception, log_tail: str, log: str | None = None) -> None:
    """``run`` crashed with ``exc``; its error is named by the exception the server's log
    ends with (``log``, the whole log, else ``log_tail``), or, when that exception is another
    process's consequence, by the cause before it ("cause; then consequence")."""
    run.status, run.error = "crashed", str(exc)
    run.log_tail = log_tail
    # the exception the server's log ends with ("RuntimeError: ...", a bare "AssertionError"),
    # not a warning that mentions an error in passing (nor 0.5.23's diagnostics after a
    # crash, "Pyspy failed (py-spy dump ...). Error: ...")
    error_lines = [l.strip() for l in (log or log_tail).splitlines()
                   if EXCEPTION_LINE.search(l) and "Pyspy failed" not in l]
    if error_lines:
        last = error_lines[-1]
        # Under DP attention the launcher ends with the scheduler's death, or the other rank
        # with gloo's lost connection; the scheduler's own exception (e.g. a weight that does
        # not fit) comes before it in the log.
        causes = [l for l in error_lines[:-1] if "EOFError" not in l
                  and not any(marker in l for marker in CONSEQUENCES)]
        if any(marker in last for marker in CONSEQUENCES) and causes:
            last = f"{causes[-1]}; then {last}"
        run.error += f": {last}"


def _read_sites(path: Path, server: str = "") -> list[dict]:
    records = [json.loads(l) for l in path.read_text().splitlines() if l]
    if server:
        for record in records:
            record["server"] = server
    return records


def _serve_pd(
    root, tree_label, case, args, env, folder, stub, cache, run, start, python, standins
) -> Run:
    """A PD pair for ``case``: the prefill server, then the decode server (with the case's
    ``decode_flags``), each with its own bootstrap port and site record; every batch goes to
    both (``generate_disaggregated``)."""
    servers: dict[str, Server] = {}
    run.log = str(folder / "decode.log")
    try:
        mooncake = str(mooncake_engine(cache, str(python)))
        for role in ("prefill", "decode"):
            role_args = list(args) + [
                "--disaggregation-mode", role,
                "--disaggregation-bootstrap-port", str(free_port()),
            ]
            if role == "decode":
                role_args += list(case.decode_flags)
            role_env = server_env(root, stub, folder / f"{role}-sites.jsonl", env, standins)
            role_env["PYTHONPATH"] += os.pathsep + mooncake
            server = Server(root, role_args, folder / f"{role}.log", role_env,
                            python=str(python))
            servers[role] = server
            progress(f"{run.case} on {tree_label}: starting the {role} server (log: {server.log})")
            server.start()
            server.wait_ready(START_TIMEOUT)
            progress(f"{run.case} on {tree_label}: {role} server ready after "
                     f"{time.monotonic() - start:.0f} s")
        prefill, decode = servers["prefill"], servers["decode"]
        port = int(prefill.args[prefill.args.index("--disaggregation-bootstrap-port") + 1])
        _send_batches(
            run, case, True,
            lambda ids, new, timeout: generate_disaggregated(prefill, decode, port, ids, new, timeout),
        )
    except ServerError as exc:
        tail = "\n".join(
            f"--- {role} server log ---\n{server.log_tail(20)}" for role, server in servers.items()
        )
        _crashed(run, exc, tail)
    finally:
        for server in reversed(list(servers.values())):
            server.stop()
        run.seconds = time.monotonic() - start
        for role in servers:
            sites = folder / f"{role}-sites.jsonl"
            if sites.exists():
                run.sites += _read_sites(sites, role)
    return run


def site_hits(records: list[dict], family: Family) -> list[str]:
    """The sizing sites of ``family`` (``file Class.method``) whose code called the contract."""
    hits = []
    for record in records:
        site = family.site_for(record["file"], record["scope"])
        if site is not None and record["function"].startswith("Eagle"):
            label = f"{site.file} {site.scope}"
            if label not in hits:
                hits.append(label)
    return hits


def supporting_calls(records: list[dict]) -> list[str]:
    calls = []
    for record in records:
        label = f"{record['function']} <- {record['file']}:{record['line']} {record['scope']}"
        if label not in calls:
            calls.append(label)
    return calls


def release_root(cache: Path, version: str = BEFORE_REFACTOR.known_version) -> Path:
    """A folder holding the unpatched ``sglang/`` of the release wheel of ``version`` (0.5.11
    unless told; a family's ``known_version``), extracted once into the cache."""
    from sglang_eagle_sizing.wheel import cached_release_wheel

    root = cache / f"release-{version}"

    def unpack(partial: Path) -> None:
        with zipfile.ZipFile(cached_release_wheel(version)) as wheel:
            wheel.extractall(partial, [n for n in wheel.namelist() if n.startswith("sglang/")])

    return filled_folder(root, unpack, lambda: (root / "sglang" / "srt").is_dir())
