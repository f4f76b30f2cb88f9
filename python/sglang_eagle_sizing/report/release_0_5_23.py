"""``report --sglang PATH`` on a tree of the 0.5.23 family: every site's width and dtype, the
draft model's dtype and the hidden states the target captures, as the patched tree computes
them, next to the unpatched release's.

0.5.23's sites take their values from upstream's helpers and from the drafter's ``fc``
(docs/release-0.5.23.md, section 2b), so each tree is asked, in its own environment
(``smoke.server.interpreter_for``: ``.venv-0.5.23``), what its own code computes:
``report_probe.py`` runs once with the patched tree first on ``sys.path`` and once with the
unpatched one, both at once. The patched tree is the tree if it is patched, else the tree with
the patch written in a scratch copy (every file a symbolic link to the tree's, but the files
the patch changes or adds); the unpatched one is the tree if it is not patched, else the
originals ``apply`` saved, else the release wheel's ``sglang/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from sglang_eagle_sizing import transaction
from sglang_eagle_sizing.tree import SglangTree

PROBE = Path(__file__).resolve().parents[1] / "probes" / "report_probe.py"
MARK = "REPORT-JSON "

#: (phase, file, function, what, value) for every site of 0.5.23 (docs/release-0.5.23.md 2b);
#: value: ``recurrent`` (``get_draft_recurrent_hidden_state_spec``), ``extend``
#: (``get_draft_input_from_target_hidden_dim``, the draft runner's dtype), ``pd`` (the
#: scheduler's metadata buffer), ``fc`` (the drafter's ``fc``)
SITES = (
    ("decode", "speculative/eagle_worker_v2.py", "EAGLEWorkerV2.forward_batch_generation", "idle input", "recurrent"),
    ("decode", "speculative/eagle_worker_v2.py", "EAGLEWorkerV2._forward_dp_spec_prefill_coordination", "idle input", "recurrent"),
    ("decode", "speculative/multi_layer_eagle_worker_v2.py", "MultiLayerEagleWorkerV2.forward_batch_generation", "idle input", "recurrent"),
    ("decode", "speculative/eagle_worker_v2.py", "EAGLEWorkerV2._stub_skipped_draft_extend", "zero stub", "recurrent"),
    ("decode", "speculative/eagle_draft_cuda_graph_runner.py", "EAGLEDraftCudaGraphRunner.__init__", "CUDA-graph buffer", "recurrent"),
    ("decode", "managers/scheduler.py", "Scheduler.init_disaggregation", "PD metadata buffer, both servers", "pd"),
    ("extend", "speculative/eagle_draft_extend_cuda_graph_runner.py", "EAGLEDraftExtendCudaGraphRunner.__init__", "CUDA-graph buffer", "extend"),
    ("extend", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py", "MultiLayerEagleMultiStepDraftExtendCudaGraphRunner._allocate_buffers", "CUDA-graph buffer", "extend"),
    ("extend", "model_executor/runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner.__init__", "CUDA-graph buffer", "extend"),
    ("extend", None, None, "drafter fc in-features", "fc"),
)

#: the metadata buffer's placeholder when the transfer carries no draft hidden states
#: (``Scheduler.init_disaggregation``)
PD_PLACEHOLDER = {"width": 16, "dtype": "torch.float32"}


class ReportError(Exception):
    """The tree's environment could not run the probe: the message says why."""


#: the keys of ``patched`` and ``pristine`` in ``report --json``, on both release families
#: (docs/commands.md, "report"): the patched tree's and the release's own answers for the pair
SIDE_KEYS = (
    "refusal",  # what the tree refuses at start-up (None: nothing)
    "draft_dtype",  # the dtype the draft model is built in (--dtype auto)
    "eagle_use_aux_hidden_state",
    "layer_ids",  # what the target runner hands the class's set_eagle3_layers_to_capture
    "captured_hidden_states",  # indices into output_hidden_states (0: the embeddings)
    "target_class",  # the class whose own method computed captured_hidden_states
    "capture_error",  # what stopped that method (None: nothing)
)


def side(values: dict) -> dict:
    """``values`` with every ``SIDE_KEYS`` key (None where the tree gave none), then the
    family's own extra keys."""
    return {**{key: values.get(key) for key in SIDE_KEYS}, **values}


# -- the two trees -------------------------------------------------------------------------
def _package_root(tree: SglangTree) -> Path:
    """The folder to put on ``sys.path`` for the tree's ``sglang``."""
    return tree.srt.parent.parent


def _copy_with(tree: SglangTree, texts: dict[str, str | None], into: Path) -> Path:
    """A copy of the tree's ``sglang/`` in ``into``, every file a symbolic link to the tree's,
    but for ``texts`` (relative to ``srt/``; ``None``: absent) written in it."""
    shutil.copytree(
        tree.srt.parent,
        into / "sglang",
        symlinks=True,
        copy_function=os.symlink,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for file, text in texts.items():
        path = into / "sglang" / "srt" / file
        if path.is_symlink() or path.exists():
            path.unlink()
        if text is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return into


def _srt_file(tree: SglangTree, key: str) -> str:
    return (tree.root / key).relative_to(tree.srt).as_posix()


@contextmanager
def both_trees(tree: SglangTree):
    """(unpatched root, patched root, where the unpatched one comes from), each a folder to
    put first on ``sys.path``."""
    from sglang_eagle_sizing.engine import FindingsCache, default_cache_dir
    from sglang_eagle_sizing.patch import check_tree, rewrite_tree

    report = check_tree(tree, FindingsCache(default_cache_dir()))
    scratch = Path(tempfile.mkdtemp(prefix="sglang-eagle-sizing-report-"))
    try:
        if not report.routed:
            rewritten = rewrite_tree(tree)
            texts = {r.file: r.new_text for r in rewritten.changed}
            for key, data in rewritten.modules_to_add.items():
                texts[_srt_file(tree, key)] = data.decode("utf-8")
            patched = _copy_with(tree, texts, scratch / "patched")
            yield _package_root(tree), patched, f"{tree.srt} (not patched)"
            return
        manifest = transaction.read_manifest(tree)
        if manifest:
            texts = {}
            for key, entry in manifest.items():
                if not key.startswith(tree.key("")):
                    continue  # the fork's test files
                original = transaction.saved_original(tree, key)
                texts[_srt_file(tree, key)] = (
                    None if entry["original_sha256"] is None else original.read_text(encoding="utf-8")
                )
            pristine = _copy_with(tree, texts, scratch / "pristine")
            yield pristine, _package_root(tree), f"{transaction.saved_original(tree, '')} (saved by apply)"
            return
        from sglang_eagle_sizing.smoke.runner import release_root

        version = tree.family.known_version
        yield release_root(default_cache_dir(), version), _package_root(tree), f"the sglang {version} release wheel"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- running the probe ---------------------------------------------------------------------
def probe_json(python: Path, root: Path, argv: list[str], mark: str) -> tuple[dict | None, str]:
    """Run ``argv`` with ``python``, ``root`` first on sys.path: the JSON printed after
    ``mark``, else ``None`` and the last line the run wrote on stderr."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [str(python), *argv], env=env, capture_output=True, text=True, cwd=root
    )
    for line in done.stdout.splitlines():
        if line.startswith(mark):
            return json.loads(line[len(mark) :]), ""
    return None, (done.stderr.strip().splitlines() or ["no output"])[-1]


def run_probe(python: Path, root: Path, draft: Path, target: Path, algorithm: str) -> dict:
    result, last = probe_json(python, root, [str(PROBE), str(draft), str(target), algorithm], MARK)
    if result is None:
        raise ReportError(f"{python} could not evaluate {root}: {last}")
    return result


def build(draft: Path, target: Path, algorithm: str, tree: SglangTree) -> dict:
    from sglang_eagle_sizing.smoke.server import interpreter_for

    python = interpreter_for(tree.family)
    if not python.exists():
        raise ReportError(
            f"{python}: no {tree.family.name} environment; make it with bash scripts/setup.sh"
        )
    with both_trees(tree) as (pristine_root, patched_root, origin):
        with ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(run_probe, python, root, draft, target, algorithm)
                for root in (patched_root, pristine_root)
            ]
            patched, pristine = (run.result() for run in runs)
    return {
        "family": tree.family.name,
        "algorithm": algorithm,
        "draft": {"path": str(draft)},
        "target": {"path": str(target)},
        "pristine_source": origin,
        "refusal": patched["refusal"],
        "patched": side(patched),
        "pristine": side(pristine),
        "adaptations": patched.get("adaptations", []),
        "sites": site_rows(patched, pristine),
    }


def _value(result: dict, value: str) -> dict | None:
    if result.get("refusal") is not None:
        return None
    if value == "pd":
        return result["recurrent"] if result["carries_draft_hidden_states"] else PD_PLACEHOLDER
    return result.get(value)


def site_rows(patched: dict, pristine: dict) -> list[dict]:
    rows = []
    for phase, file, function, what, value in SITES:
        now, before = _value(patched, value), _value(pristine, value)
        if value == "fc":
            if not now or now["width"] is None:
                continue  # not a drafter with an fc
            file, function = now["site"].split(" ", 1)
        pair = lambda v: None if v is None else (v["width"], v["dtype"])  # noqa: E731
        rows.append(
            {
                "phase": phase,
                "file": file,
                "site": function,
                "what": what,
                "width": None if now is None else now["width"],
                "dtype": None if now is None else now["dtype"],
                "pristine": before and {"width": before["width"], "dtype": before["dtype"]},
                "differs_from_pristine": pair(now) != pair(before),
            }
        )
    return rows


# -- rendering -----------------------------------------------------------------------------
def _short(dtype: str | None) -> str:
    return (dtype or "-").replace("torch.", "")


def render(report: dict) -> str:
    patched, pristine = report["patched"], report["pristine"]
    version = report["family"]
    lines = [
        f"EAGLE hidden-state sizes, {report['algorithm']}, SGLang {version}",
        f"  draft   {report['draft']['path']}",
        f"  target  {report['target']['path']}, {_short(patched.get('target_dtype'))}",
        f"  {version} values from {report['pristine_source']}",
        _line(
            "draft model built in",
            _short(patched.get("draft_dtype")),
            _short(pristine.get("draft_dtype")),
            version,
        ),
    ]
    for note in report.get("adaptations", []):
        lines.append(f"  adapted: {note}")
    if patched.get("eagle_use_aux_hidden_state") or pristine.get(
        "eagle_use_aux_hidden_state"
    ):
        lines.append(
            _line(
                "target captures hidden states",
                captured_text(patched),
                captured_text(pristine),
                version,
            )
            + "   (indices into transformers' output_hidden_states, 0: the embeddings)"
        )
    if pristine.get("refusal"):
        lines.append(f"  {version} refuses the pair: {pristine['refusal']}")
    marked = 0
    for phase in ("decode", "extend"):
        lines.append("")
        lines.append(f"{phase} phase")
        lines.append(f"  {'site':<90} {'width':>6} {'dtype':<9}   {version}")
        for row in (r for r in report["sites"] if r["phase"] == phase):
            site = f"{row['site']} ({row['what']})"
            if row["differs_from_pristine"]:
                marked += 1
                before = row["pristine"] or {}
                old = f"! {before.get('width')} {_short(before.get('dtype'))}"
            else:
                old = "  same"
            width = "-" if row["width"] is None else str(row["width"])
            lines.append(f"  {site:<90} {width:>6} {_short(row['dtype']):<9}   {old}")
    lines.append("")
    lines.append(
        f"{marked} site values differ from {version} (marked !)"
        if marked
        else f"{version} computes the same at every site"
    )
    return "\n".join(lines) + "\n"


def captured_text(result: dict) -> str:
    if result.get("capture_error"):
        return f"{result.get('target_class')} raises {result['capture_error']}"
    return str(result.get("captured_hidden_states"))


def _line(label: str, now: str, before: str, version: str) -> str:
    mark = "same" if now == before else f"! {before}"
    return f"  {label}: {now}   {version}: {mark}"
