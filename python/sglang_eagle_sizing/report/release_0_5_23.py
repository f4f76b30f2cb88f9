"""``report`` on a tree of the 0.5.23 family: every site's width and dtype, the draft model's
dtype and the hidden states the target captures, as the patched tree computes them, next to
the unpatched release's; from these, per tree, the target class's capture rule and what serving
does (``serving.py``).

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
    "hidden_state_ids",  # or the indices it hands its set_eagle3_hidden_states_to_capture
    "captured_hidden_states",  # indices into output_hidden_states (0: the embeddings)
    "target_class",  # the class whose own method computed captured_hidden_states
    "capture_error",  # what stopped that method (None: nothing)
    "capture_rule",  # the class's rule: declared, undeclared or released (report/serving.py)
    "captured_tensor",  # the tensor the class hands on, from the audit (captured_tensors.py)
    "verdict",  # what serving the pair does on that tree (report/serving.py)
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

        version = tree.family.tested_release(tree.version.number if tree.version else None)
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


def is_patched(tree: SglangTree) -> bool:
    """Whether the tree holds the patch (what ``both_trees`` decides by)."""
    from sglang_eagle_sizing.engine import FindingsCache, default_cache_dir
    from sglang_eagle_sizing.patch import check_tree

    return bool(check_tree(tree, FindingsCache(default_cache_dir())).routed)


def _target(patched: dict, pristine: dict) -> dict:
    """The target's dtype (at --dtype auto), hidden size and layer count, as a tree read them."""
    given = patched if patched.get("target_hidden_size") else pristine
    return {
        "dtype": given.get("target_dtype"),
        "hidden_size": given.get("target_hidden_size"),
        "num_layers": given.get("target_num_layers"),
    }


def _judged(patched: dict, pristine: dict, algorithm: str, version: str | None) -> None:
    """Each side's capture rule, captured tensor (the audit's, for a tree of ``version``) and
    verdict (``serving.py``), from what the probes gave."""
    from sglang_eagle_sizing.report import captured_tensors, serving

    captured_tensors.attach({"patched": patched, "pristine": pristine}, version)
    target = _target(patched, pristine)
    config_dtype = pristine.get("draft_dtype")  # the release builds it in its config's
    for values, is_patched_side in ((patched, True), (pristine, False)):
        values["capture_rule"] = serving.capture_rule(values, is_patched_side)
        fc = values.get("fc") or {}
        values["verdict"] = serving.verdict(
            values,
            algorithm=algorithm,
            target=target,
            fc_width=fc.get("width"),
            config_dtype=config_dtype,
        )


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
    _judged(patched, pristine, algorithm, tree.version and tree.version.number)
    return {
        "family": tree.family.name,
        "tree": {
            "path": str(tree.package),
            "described": tree.describe(),
            "patched": is_patched(tree),
        },
        "algorithm": algorithm,
        "draft": {"path": str(draft)},
        "target": {"path": str(target), **_target(patched, pristine)},
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


def _cell(values: dict | None, refused: bool) -> str:
    """A site's width and dtype on one tree, in words where there is no value."""
    if values is None or values.get("width") is None:
        return "not computed (refused at start-up)" if refused else "not computed"
    return f"{values['width']} {_short(values.get('dtype'))}"


def render(report: dict) -> str:
    from sglang_eagle_sizing.report import serving

    patched, pristine = report["patched"], report["pristine"]
    lines = [
        serving.header(report["tree"]),
        f"{report['algorithm']} pair",
        f"  draft   {report['draft']['path']}",
        f"  target  {report['target']['path']}, {_short(patched.get('target_dtype'))}",
        f"  released values from {report['pristine_source']}",
        _line(
            "draft model built in",
            _built(patched),
            _built(pristine),
        ),
        *serving.serving_lines(report),
    ]
    for note in report.get("adaptations", []):
        lines.append(f"  adapted: {note}")
    if pristine.get("refusal"):
        lines.append(f"  released refuses the pair: {pristine['refusal']}")
    if patched.get("refusal"):
        lines.append(f"  patched refuses the pair: {patched['refusal']}")
    marked = 0
    for phase in ("decode", "extend"):
        lines.append("")
        lines.append(f"{phase} phase")
        lines.append(f"  {'site':<90} {'patched':<17}   released")
        for row in (r for r in report["sites"] if r["phase"] == phase):
            site = f"{row['site']} ({row['what']})"
            now = _cell(row, bool(patched.get("refusal")))
            if row["differs_from_pristine"]:
                marked += 1
                old = "! " + _cell(row["pristine"], bool(pristine.get("refusal")))
            else:
                old = "  same"
            lines.append(f"  {site:<90} {now:<17}   {old}")
    lines.append("")
    lines.append(
        f"{marked} site values differ between patched and released (marked !)"
        if marked
        else "released computes the same as patched at every site"
    )
    return "\n".join(lines) + "\n"


def _built(values: dict) -> str:
    if values.get("draft_dtype") is None:
        return "not built (refused at start-up)" if values.get("refusal") else "not computed"
    return _short(values["draft_dtype"])


def _line(label: str, now: str, before: str) -> str:
    mark = "same" if now == before else f"! {before}"
    return f"  {label}: patched {now}   released: {mark}"
