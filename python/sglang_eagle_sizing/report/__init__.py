"""``sglang-eagle-sizing report``: what every sizing site computes for a drafter/target pair.

First the tree judged (its release and path, patched or released), then per tree what serving
the pair does and the target class's capture rule (``serving.py``); per phase, the width and
dtype of every site each worker kind reaches, the bytes of each CUDA-graph buffer at SGLang's
default server settings, side by side with what pristine 0.5.11 computes at the same site;
sites where 0.5.11 differs are marked. Both columns come from the
trees' own code (``evaluate.py``): the patched one (the installed tree if patched, else the
patch applied in memory) and the pristine one (the installed tree if unpatched, else the
originals ``apply`` saved, else the release wheel from PyPI).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle_sizing import transaction
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.families.release_0_5_11.sites import (
    GET_CONFIG_FILES,
    SITE_FILES,
    Kind,
    Phase,
)
from sglang_eagle_sizing.report.release_0_5_23 import side
from sglang_eagle_sizing.tree import SglangTree

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"

#: ServerArgs' cuda_graph_max_bs when it cannot read the GPU's memory.
DEFAULT_CUDA_GRAPH_MAX_BS = 160


@dataclass(frozen=True)
class Settings:
    max_bs: int
    num_steps: int
    topk: int
    num_draft_tokens: int

    def describe(self) -> str:
        return (
            f"cuda_graph_max_bs={self.max_bs} (ServerArgs' default when GPU memory is unknown), "
            f"speculative_num_steps={self.num_steps}, speculative_eagle_topk={self.topk}, "
            f"speculative_num_draft_tokens={self.num_draft_tokens} "
            "(auto_choose_speculative_params for this target)"
        )


def default_settings(algorithm: str, target) -> Settings:
    """SGLang's own choice of speculative parameters for this target (0.5.11's
    ``auto_choose_speculative_params``), and the default CUDA-graph batch size."""
    from types import SimpleNamespace

    from sglang.srt.server_args import auto_choose_speculative_params

    stand_in = SimpleNamespace(get_model_config=lambda: target, speculative_algorithm=algorithm)
    num_steps, topk, num_draft_tokens = auto_choose_speculative_params(stand_in)
    return Settings(DEFAULT_CUDA_GRAPH_MAX_BS, num_steps, topk, num_draft_tokens)


def infer_algorithm(draft) -> str:
    return algorithm_of((draft.hf_config.architectures or [""])[0])


def algorithm_of(architecture: str) -> str:
    """The speculative algorithm a drafter of this architecture serves with."""
    if "Eagle3" in architecture:
        return "EAGLE3"
    if "Eagle" in architecture or "NextN" in architecture or "MTP" in architecture:
        return "EAGLE"
    return "STANDALONE"


def buffer_rows(site_scope: str, settings: Settings) -> int | None:
    """Rows of a CUDA-graph hidden-state buffer (None: not a CUDA-graph buffer)."""
    per_request = settings.num_steps + 1
    if site_scope == "EAGLEDraftCudaGraphRunner.__init__":
        return settings.max_bs
    if site_scope == "EAGLEDraftExtendCudaGraphRunner.__init__":
        return settings.max_bs * per_request
    if site_scope == "MultiLayerEagleDraftExtendCudaGraphRunner.init_buffers_and_capture":
        # one runner per step, step s capturing num_steps + 1 + s tokens per request
        return sum(settings.max_bs * (per_request + step) for step in range(settings.num_steps))
    return None


def _element_size(dtype: str | None) -> int | None:
    import torch

    if not dtype or not dtype.startswith("torch."):
        return None
    return torch.empty((), dtype=getattr(torch, dtype[len("torch.") :])).element_size()


# -- the two trees -------------------------------------------------------------------------
def _copy_site_files(sources: dict[str, str], into: Path) -> Path:
    srt = into / "srt"
    for file, text in sources.items():
        (srt / file).parent.mkdir(parents=True, exist_ok=True)
        (srt / file).write_text(text, encoding="utf-8")
    return srt


def report_files(tree: SglangTree) -> tuple[str, ...]:
    """The site files, and the module defining ``get_config``: the patched one reads a
    speculators-format drafter (``configs.load_pair``)."""
    return (*SITE_FILES, *(f for f in GET_CONFIG_FILES if (tree.srt / f).is_file()))


def _release_sources(files: tuple[str, ...]) -> dict[str, str]:
    from sglang_eagle_sizing.wheel import cached_release_wheel

    with zipfile.ZipFile(cached_release_wheel()) as wheel:
        return {f: wheel.read(f"sglang/srt/{f}").decode("utf-8") for f in files}


def tree_sources(tree: SglangTree) -> tuple[dict[str, str], dict[str, str], str, bool]:
    """(pristine, patched) texts of the site files, where the pristine ones came from, and
    whether the tree holds the patch."""
    from sglang_eagle_sizing.engine import FindingsCache, default_cache_dir
    from sglang_eagle_sizing.patch import check_tree, rewrite_tree

    report = check_tree(tree, FindingsCache(default_cache_dir()))
    current = {f: tree.read(f) for f in report_files(tree)}
    any_routed = any(f.status == "routed" and f.label in ("decode", "extend") for f in report.findings)
    manifest = transaction.read_manifest(tree)
    if not any_routed:
        pristine, origin = current, f"{tree.srt} (not patched)"
    elif manifest:
        pristine = {
            f: transaction.saved_original(tree, tree.key(f)).read_text(encoding="utf-8")
            if tree.key(f) in manifest
            else text
            for f, text in current.items()
        }
        origin = f"{transaction.saved_original(tree, '')} (saved by apply)"
    else:
        pristine = _release_sources(tuple(current))
        origin = f"the sglang {BEFORE_REFACTOR.known_version} release wheel"
    if report.routed:
        patched = current
    else:
        rewritten = {r.file: r.new_text for r in rewrite_tree(tree).results}
        patched = {f: rewritten.get(f, text) for f, text in current.items()}
    return pristine, patched, origin, any_routed


# -- the report ----------------------------------------------------------------------------
class Trees:
    """The pristine and patched site files (``report_files``), written to a scratch folder for
    evaluation; ``patched`` is also what reads a speculators-format drafter (``load_pair``)."""

    def __init__(self, tree: SglangTree):
        pristine, patched, self.origin, self.tree_patched = tree_sources(tree)
        self.version = tree.version and tree.version.number
        self._scratch = Path(tempfile.mkdtemp(prefix="sglang-eagle-sizing-report-"))
        self.pristine = _copy_site_files(pristine, self._scratch / "pristine")
        self.patched = _copy_site_files(patched, self._scratch / "patched")

    def __enter__(self) -> "Trees":
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


def build(draft_dir: Path, target_dir: Path, algorithm: str | None, tree: SglangTree) -> dict:
    from sglang_eagle_sizing.report.configs import load_pair

    with Trees(tree) as trees:
        pair = load_pair(draft_dir, target_dir, trees.patched)
        report = build_for_pair(pair, algorithm or infer_algorithm(pair.draft), trees)
        report["tree"] = {
            "path": str(tree.package),
            "described": tree.describe(),
            "patched": trees.tree_patched,
        }
        return report


def build_for_pair(pair, algorithm: str, trees: Trees) -> dict:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_eagle_sizing.report import captured_tensors, serving
    from sglang_eagle_sizing.report.evaluate import evaluate_tree, load_eagle_info, load_spec_info

    settings = default_settings(algorithm, pair.target)
    patched_info = load_eagle_info(trees.patched)
    parser = load_spec_info(trees.patched)
    speculative_algorithm = SpeculativeAlgorithm.from_string(algorithm)
    patched_info.validate_eagle_draft_config(speculative_algorithm, pair.draft, pair.target)
    use_aux = parser.parse_eagle_use_aux_hidden_state(
        speculative_algorithm, pair.draft.hf_config
    )
    num_aux = parser.get_eagle_num_aux_hidden_states(pair.draft.hf_config)
    built = built_pair(pair, algorithm, patched_info)
    patched_side = {"draft_dtype": str(built.draft.dtype)}
    pristine_side = {"draft_dtype": str(pair.draft.dtype)}
    if speculative_algorithm.is_eagle3():
        # the target refuses, at start-up, an id whose output it cannot capture; the sites
        # are still reported (the report says so and exits 2)
        patched_side.update(tree_capture(trees.patched, pair, pair.draft))
        readable = not any(
            "the speculators format" in note for note in pair.adaptations
        )
        pristine_side.update(
            tree_capture(trees.pristine, pair, pair.draft if readable else None)
        )
    refusal = patched_side.get("refusal")
    for values, is_patched in ((patched_side, True), (pristine_side, False)):
        values["capture_rule"] = serving.capture_rule(values, is_patched)
    captured_tensors.attach({"patched": patched_side, "pristine": pristine_side}, trees.version)
    now = evaluate_tree(trees.patched, built, algorithm, settings, use_aux, num_aux)
    before = evaluate_tree(trees.pristine, pair, algorithm, settings, use_aux, num_aux)
    old = {(v.worker_kind, v.site.scope, v.occurrence): v for v in before}
    rows = []
    for value in now:
        previous = old.get((value.worker_kind, value.site.scope, value.occurrence))
        count = buffer_rows(value.site.scope, settings)

        def nbytes(width, dtype):
            size = _element_size(dtype)
            return None if count is None or width is None or size is None else count * width * size

        rows.append(
            {
                "worker": value.worker_kind,
                "phase": value.site.phase.value,
                "file": value.site.file,
                "site": value.site.scope,
                "occurrence": value.occurrence,
                "detail": value.detail,
                "kind": value.site.kind.value,
                "width": value.width,
                "dtype": value.dtype,
                "buffer_rows": count,
                "bytes": nbytes(value.width, value.dtype),
                "rebuilt_by_worker": value.rebuilt_by_worker,
                "error": value.error,
                "pristine": None
                if previous is None
                else {
                    "width": previous.width,
                    "dtype": previous.dtype,
                    "bytes": nbytes(previous.width, previous.dtype),
                    "error": previous.error,
                },
                "differs_from_pristine": previous is None
                or (previous.width, previous.dtype) != (value.width, value.dtype),
            }
        )
    fc = next((r for r in rows if r["kind"] == Kind.DRAFTER_FC.value), None)
    target = _describe(pair.target, pair.target_path)
    for values, width in (
        (patched_side, fc and fc["width"]),
        (pristine_side, fc and fc["pristine"] and fc["pristine"]["width"]),
    ):
        values["verdict"] = serving.verdict(
            values,
            algorithm=algorithm,
            target=target,
            fc_width=width,
            config_dtype=str(pair.draft.dtype),
        )
    return {
        "family": BEFORE_REFACTOR.name,
        "algorithm": algorithm,
        "draft": _describe(pair.draft, pair.draft_path),
        "target": target,
        "eagle_use_aux_hidden_state": use_aux,
        "eagle_num_aux_hidden_states": num_aux,
        # what the patched target refuses at start-up (None: nothing)
        "refusal": refusal,
        # each tree's own answer (report.release_0_5_23.SIDE_KEYS, the same on 0.5.23):
        # captured_hidden_states are indices into output_hidden_states (0: the embeddings)
        "patched": side(patched_side),
        "pristine": side(pristine_side),
        # the dtype the patched draft TpModelWorker builds the draft model in (--dtype auto)
        "draft_built_dtype": str(built.draft.dtype),
        "settings": {
            "cuda_graph_max_bs": settings.max_bs,
            "speculative_num_steps": settings.num_steps,
            "speculative_eagle_topk": settings.topk,
            "speculative_num_draft_tokens": settings.num_draft_tokens,
            "described": settings.describe(),
        },
        "adaptations": pair.adaptations,
        "defaults": pair.defaults,
        "pristine_source": trees.origin,
        "sites": rows,
        "pd_disagreements": pd_disagreements(rows),
    }


def _capture_rules():
    """``capture_rules_probe.py`` by path: the capture-rules table's runner code and
    stand-in builder, also run by the 0.5.23 report's probe (one implementation)."""
    import importlib.util

    name = "_sglang_eagle_sizing_capture_rules_probe"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parents[1] / "probes" / "capture_rules_probe.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def tree_capture(srt: Path, pair, draft) -> dict:
    """What the tree whose site files are in ``srt`` captures on the target: its
    ``ModelRunner``'s own EAGLE-3 block (the drafter's config ``draft``, as that tree reads
    it; None: it cannot) and its ``init_aux_hidden_state_capture``, on a stand-in of the
    target's class (``capture_standin.py``; the patch changes no target model class, so the
    installed one is each tree's). ``refusal``: what the block raised."""
    import ast
    from types import SimpleNamespace

    from sglang.srt.model_executor import model_runner
    from sglang.srt.models.registry import ModelRegistry

    from sglang_eagle_sizing.report.evaluate import load_eagle_info, load_spec_info

    if draft is None:
        return {
            "refusal": f"{pair.draft_path / 'config.json'}: the speculators format, which "
            f"SGLang {BEFORE_REFACTOR.known_version} as released does not read"
        }
    rules = _capture_rules()
    path = srt / "model_executor" / "model_runner.py"
    source = path.read_text(encoding="utf-8")
    substitutes = {
        "sglang.srt.speculative.spec_info": load_spec_info(srt),
        "sglang.srt.speculative.eagle_info": load_eagle_info(srt),
    }
    namespace = dict(vars(model_runner))
    saved = {key: sys.modules.get(key) for key in substitutes}
    sys.modules.update(substitutes)
    out: dict = {}
    try:
        for node in ast.parse(source).body:  # the module's imports from the tree's own
            if isinstance(node, ast.ImportFrom) and node.module in substitutes:
                code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
                exec(code, namespace)  # noqa: S102
        server_args = SimpleNamespace(
            speculative_draft_model_path=str(pair.draft_path),
            speculative_draft_model_revision=None,
        )
        try:
            call, passed = rules.runner_0_5_11(
                source,
                str(path),
                namespace,
                server_args,
                lambda *a, **k: draft,
                pair.target,
            )
        except ValueError as exc:
            return {"refusal": str(exc)}
        out["eagle_use_aux_hidden_state"] = passed["eagle_use_aux_hidden_state"]
        out["layer_ids"] = passed["eagle_aux_hidden_state_layer_ids"]
        if not passed["eagle_use_aux_hidden_state"]:
            return out
        model_class, _ = ModelRegistry.resolve_model_cls(
            pair.target.hf_config.architectures
        )
        out["target_class"] = model_class.__name__
        out["capture_method"] = rules.capture_method(model_class)
        out["declared"] = rules.declared_rule(
            model_class, pair.target.hf_config, out["layer_ids"]
        )
        try:
            out.update(rules.capture_of(model_class, pair.target.hf_config, call))
        except ValueError as exc:  # the runner's start-up refusal
            out["refusal"] = " ".join(str(exc).split())
        except Exception as exc:  # noqa: BLE001
            # the class's own refusal, or what stopped it
            out["capture_error"] = rules.standin.one_line(exc)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return out


def built_pair(pair, algorithm: str, patched_info):
    """``pair`` with the draft ``ModelConfig`` the patched EAGLE draft worker builds at
    ``--dtype auto``: the patched tree's own ``set_eagle_draft_dtype`` decides its dtype, on a
    copy of the draft config. A STANDALONE draft model is built from its own config,
    unchanged."""
    import copy
    import dataclasses
    from types import SimpleNamespace

    if algorithm == "STANDALONE":
        return pair
    server_args = SimpleNamespace(dtype="auto")
    draft = copy.copy(pair.draft)
    patched_info.set_eagle_draft_dtype(server_args, draft, pair.target)
    if server_args.dtype == "auto":
        return pair
    return dataclasses.replace(pair, draft=draft)


def pd_disagreements(rows: list[dict]) -> list[dict]:
    """Per worker kind, where 0.5.11's prefill and decode servers gave the PD hidden-state
    buffer different widths or dtypes: the prefill server writes items of its own length
    into the decode server's slots."""
    found = []
    for kind in dict.fromkeys(r["worker"] for r in rows):
        sides = {
            r["detail"]: r
            for r in rows
            if r["worker"] == kind and r["kind"] == Kind.METADATA_BUFFER.value
        }
        prefill, decode = sides.get("prefill server"), sides.get("decode server")
        if prefill is None or decode is None or not prefill["pristine"] or not decode["pristine"]:
            continue
        old = [(r["pristine"]["width"], r["pristine"]["dtype"]) for r in (prefill, decode)]
        if old[0] != old[1]:
            found.append(
                {
                    "worker": kind,
                    "prefill": {"width": old[0][0], "dtype": old[0][1], "item_bytes": _item_bytes(*old[0])},
                    "decode": {"width": old[1][0], "dtype": old[1][1], "item_bytes": _item_bytes(*old[1])},
                    "now": {"width": prefill["width"], "dtype": prefill["dtype"]},
                }
            )
    return found


def _item_bytes(width, dtype) -> int | None:
    size = _element_size(dtype)
    return None if width is None or size is None else width * size


def _describe(model_config, path: Path) -> dict:
    return {
        "path": str(path),
        "architecture": (model_config.hf_config.architectures or [""])[0],
        "hidden_size": model_config.hidden_size,
        "dtype": str(model_config.dtype),
        "num_layers": getattr(model_config.hf_text_config, "num_hidden_layers", None),
    }


def _short(dtype: str | None) -> str:
    return (dtype or "?").replace("torch.", "")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "-"


def _value(values: dict | None, refused: bool) -> str:
    """A site's width and dtype on one tree, in words where there is none."""
    if not values or values.get("width") is None:
        if values and values.get("error"):
            return f"not computed ({values['error']})"
        return "not computed (refused at start-up)" if refused else "not computed"
    return f"{values['width']} {_short(values.get('dtype'))}"


def render(report: dict) -> str:
    from sglang_eagle_sizing.report import serving

    patched, pristine = report["patched"], report["pristine"]
    lines = [
        *([serving.header(report["tree"])] if "tree" in report else []),
        f"{report['algorithm']} pair (eagle_use_aux_hidden_state: "
        f"{'yes' if report['eagle_use_aux_hidden_state'] else 'no'})",
        f"  draft   {report['draft']['path']}  {report['draft']['architecture']}, "
        f"hidden_size {report['draft']['hidden_size']}, {_short(report['draft']['dtype'])}"
        + _built_in(report),
        f"  target  {report['target']['path']}  {report['target']['architecture']}, "
        f"hidden_size {report['target']['hidden_size']}, {_short(report['target']['dtype'])}",
        f"  settings: {report['settings']['described']}",
        f"  released values from {report['pristine_source']}",
        *serving.serving_lines(report),
    ]
    for note in report["adaptations"]:
        lines.append(f"  adapted: {note}")
    for note in report.get("defaults", []):
        lines.append(f"  defaulted: {note}")
    if pristine.get("refusal"):
        lines.append(f"  released refuses the pair: {pristine['refusal']}")
    if patched.get("refusal"):
        lines.append(f"  patched refuses the pair: {patched['refusal']}")
    marked = 0
    for phase in Phase:
        rows = [r for r in report["sites"] if r["phase"] == phase.value]
        lines.append("")
        lines.append(f"{phase.value} phase ({phase.input_class})")
        lines.append(
            f"  {'worker':<15} {'site':<67} {'patched':<16} {'buffer':>10}   released"
        )
        for r in rows:
            if r.get("detail"):
                site = f"{r['site']} ({r['detail']})"
            elif r["kind"] != Kind.BUFFER.value and _count(report, r) > 1:
                site = f"{r['site']} #{r['occurrence'] + 1}"
            else:
                site = r["site"]
            previous = r["pristine"] or {}
            if r["differs_from_pristine"]:
                marked += 1
                old = "! " + _value(r["pristine"], bool(pristine.get("refusal")))
                if previous.get("bytes") is not None and r["bytes"] is not None:
                    old += f" ({_size(previous['bytes'])})"
            else:
                old = "  same"
            note = "  (rebuilt by the worker)" if r["rebuilt_by_worker"] else ""
            now = _value(r, bool(patched.get("refusal")))
            lines.append(
                f"  {r['worker']:<15} {site:<67} {now:<16} {_size(r['bytes']):>10}   {old}{note}"
            )
    for d in report.get("pd_disagreements", []):
        lines.append("")
        lines.append(
            f"! PD ({d['worker']}): released, the two servers disagreed on the hidden-state "
            f"buffer: prefill {d['prefill']['width']} {_short(d['prefill']['dtype'])} "
            f"({d['prefill']['item_bytes']} B per request), decode {d['decode']['width']} "
            f"{_short(d['decode']['dtype'])} ({d['decode']['item_bytes']} B); the prefill server "
            f"writes its item into the decode server's slot. Patched, both "
            f"{d['now']['width']} {_short(d['now']['dtype'])}."
        )
    lines.append("")
    lines.append(
        f"{marked} site values differ between patched and released (marked !)"
        if marked
        else "released computes the same as patched at every site"
    )
    return "\n".join(lines) + "\n"


def _built_in(report: dict) -> str:
    """What the draft model is built in, when --dtype auto does not keep its config's."""
    built = report.get("draft_built_dtype")
    if built is None or built == report["draft"]["dtype"]:
        return ""
    return (
        f"; built in {_short(built)} patched, the target's dtype (--dtype auto; released "
        f"builds it in {_short(report['draft']['dtype'])})"
    )


def _count(report: dict, row: dict) -> int:
    return sum(1 for r in report["sites"] if r["site"] == row["site"] and r["worker"] == row["worker"])


def quiet_sglang():
    """SGLang and transformers log warnings that are noise here (no GPU, no
    generation_config.json in a config folder); keep errors."""
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
