"""Evaluate a tree's sizing sites for one drafter/target pair.

For every site of ``sites.py`` that a worker kind reaches, this reads the site's own width and
dtype expressions from the given tree's source (pristine 0.5.11 or patched) and evaluates them
with the real ``ModelConfig``s, in place of the objects SGLang has there: the worker, its draft
runner, the graph runner, the batch. Nothing here restates a sizing rule: the values come from
the tree's code (the patched tree's classmethods are its own ``eagle_info.py``, loaded under a
private module name).

What the objects hold is our description of SGLang 0.5.11's classes (``ROLES``): a v1 worker is
the draft ``TpModelWorker`` (``model_config`` is the draft's), ``MultiLayerEagleDraftWorker``
sets ``model_config`` to the target's, graph runners hold ``eagle_worker`` and the draft
``model_runner``, and so on.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind, Site

#: Which sites each worker kind reaches (file, scope).
WORKER_KINDS: dict[str, tuple[str, ...]] = {
    "v1": (
        "EAGLEWorker._draft_preprocess_idle",
        "EAGLEWorker.forward_draft_extend_after_decode",
        "EagleVerifyInput.verify",
        "EAGLEDraftCudaGraphRunner.__init__",
        "EAGLEDraftExtendCudaGraphRunner.__init__",
        "Scheduler.init_disaggregation",
    ),
    "v1 multi-layer": (
        "EAGLEWorker._draft_preprocess_idle",  # MultiLayerEagleWorker delegates to it
        "MultiLayerEagleWorker.forward_draft_extend_after_decode",
        "EagleVerifyInput.verify",
        "MultiLayerEagleDraftExtendCudaGraphRunner.init_buffers_and_capture",
        "Scheduler.init_disaggregation",
    ),
    "v2": (
        "EAGLEWorkerV2.forward_batch_generation",
        "EAGLEDraftCudaGraphRunner.__init__",
        "EAGLEDraftExtendCudaGraphRunner.__init__",
        "Scheduler.init_disaggregation",
    ),
    "v2 multi-layer": (
        "MultiLayerEagleWorkerV2.forward_batch_generation",
        "MultiLayerEagleDraftWorker.__init__",
        "MultiLayerEagleDraftExtendCudaGraphRunner.init_buffers_and_capture",
        "Scheduler.init_disaggregation",
    ),
}

#: What ``self`` is at a site, by the class that encloses it.
ROLES = {
    "EAGLEWorker": "worker",
    "MultiLayerEagleWorker": "worker",
    "MultiLayerEagleDraftWorker": "worker",
    "EAGLEWorkerV2": "outer",
    "MultiLayerEagleWorkerV2": "outer",
    "EagleVerifyInput": "verify",
    "EAGLEDraftCudaGraphRunner": "graph_runner",
    "EAGLEDraftExtendCudaGraphRunner": "graph_runner",
    "MultiLayerEagleDraftExtendCudaGraphRunner": "graph_runner",
    "Scheduler": "scheduler",
}

#: The EAGLE-3 drafter's ``fc`` (``Kind.DRAFTER_FC``): every worker kind builds the draft model,
#: so each lists it with its extend-phase sites.
(DRAFTER_FC,) = [s for s in SITES if s.kind is Kind.DRAFTER_FC]

WORKER_KINDS_BY_ALGORITHM = {
    "EAGLE": tuple(WORKER_KINDS),
    "EAGLE3": tuple(WORKER_KINDS),
    "STANDALONE": ("v1", "v2"),
}


@dataclass(frozen=True)
class SiteValue:
    site: Site
    occurrence: int
    line: int
    worker_kind: str
    width: int | None
    dtype: str | None
    #: why width/dtype could not be evaluated, if so
    error: str | None = None
    #: a site built where no worker is in reach; the worker rebuilds it (patched tree)
    rebuilt_by_worker: bool = False
    #: which server a PD metadata buffer is on ("prefill server", "decode server"); "fc" for
    #: the drafter's fc; else ""
    detail: str = ""


@dataclass(frozen=True)
class _Occurrence:
    line: int
    width: ast.expr
    dtype: ast.expr | None
    guards: tuple[tuple[ast.expr, bool], ...]
    #: assignments in the function (name -> value) an expression may refer to
    locals: dict
    detail: str = ""


def _function(module: ast.Module, scope: str) -> ast.FunctionDef | None:
    class_name, function_name = scope.split(".")
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == function_name:
                    return item
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _names_hidden_width(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and "hidden_size" in n.attr)
        or (isinstance(n, ast.Name) and "hidden_size" in n.id)
        for n in ast.walk(node)
    )


def _occurrences(function: ast.FunctionDef, site: Site) -> list[_Occurrence]:
    local_values: dict[str, ast.expr] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                local_values.setdefault(target.id, node.value)
    found: list[_Occurrence] = []

    def visit(statements, guards):
        for stmt in statements:
            if isinstance(stmt, ast.If):
                visit(stmt.body, guards + ((stmt.test, True),))
                visit(stmt.orelse, guards + ((stmt.test, False),))
                continue
            for block in ("body", "orelse", "finalbody"):  # with, for, try: no guard
                if isinstance(getattr(stmt, block, None), list):
                    visit(getattr(stmt, block), guards)
            for node in _own_nodes(stmt):
                occurrence = _match(node, site, guards, local_values)
                if occurrence is not None:
                    found.append(occurrence)

    visit(function.body, ())
    return found


def _own_nodes(stmt: ast.stmt):
    """Nodes of a statement, not descending into nested statement blocks."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        for name, value in ast.iter_fields(node):
            if name in ("body", "orelse", "finalbody", "handlers") and isinstance(value, list):
                continue
            if isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append(value)


def _match(node, site: Site, guards, local_values) -> _Occurrence | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if site.kind in (Kind.IDLE_INPUT, Kind.DETACHED_IDLE_INPUT):
        if isinstance(func, ast.Attribute) and func.attr == "create_idle_input":
            width = _keyword(node, "hidden_size")
            if width is not None:
                return _Occurrence(node.lineno, width, _keyword(node, "dtype"), guards, local_values)
    elif site.kind is Kind.BUFFER:
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "torch"
            and func.attr in ("zeros", "empty", "ones", "full")
            and node.args
            and isinstance(node.args[0], ast.Tuple)
            and node.args[0].elts
            and _names_hidden_width(node.args[0].elts[-1])
        ):
            return _Occurrence(
                node.lineno, node.args[0].elts[-1], _keyword(node, "dtype"), guards, local_values
            )
    elif site.kind is Kind.METADATA_BUFFER:
        if isinstance(func, ast.Name) and func.id == "MetadataBuffers":
            width = _keyword(node, "hidden_size")
            if width is not None:
                # `<draft width> if <speculative> else 16`: evaluated whole. When the
                # condition is false the buffer is RDMA padding, and it is still what the
                # transfer between the two servers sizes its items by.
                dtype = _keyword(node, "hidden_states_dtype")
                return _Occurrence(
                    node.lineno, width, dtype, guards, local_values, _server(guards)
                )
    return None


def _server(guards) -> str:
    """Which PD server an occurrence is on, from the ``disaggregation_mode`` test above it."""
    for test, wanted in guards:
        text = ast.unparse(test)
        if wanted and "disaggregation_mode" in text:
            for mode in ("PREFILL", "DECODE"):
                if f"DisaggregationMode.{mode}" in text:
                    return f"{mode.lower()} server"
    return ""


def _load_private(srt: Path, stem: str, substitutes: dict | None = None):
    """The tree's ``speculative/<stem>.py`` as a module of its own (a private name);
    ``substitutes``: modules its imports resolve to instead of the installed ones."""
    path = srt / "speculative" / f"{stem}.py"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    name = f"_sglang_eagle_sizing_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    saved = {key: sys.modules.get(key) for key in substitutes or {}}
    sys.modules.update(substitutes or {})
    try:
        spec.loader.exec_module(module)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return module


def load_spec_info(srt: Path):
    """The tree's ``speculative/spec_info.py`` (where the patch puts the parser of the
    drafter's config) as a module of its own."""
    return _load_private(srt, "spec_info")


def load_eagle_info(srt: Path):
    """The tree's ``speculative/eagle_info.py`` as a module of its own (a private name), so
    that a patched and a pristine copy can be evaluated side by side in one process; its
    ``spec_info`` imports (the parser's readers) resolve to the tree's own."""
    spec_info = load_spec_info(srt)
    return _load_private(
        srt, "eagle_info", {"sglang.srt.speculative.spec_info": spec_info}
    )


@dataclass
class Objects:
    """The stand-ins for SGLang's objects at the sites, for one worker kind."""

    worker: SimpleNamespace
    outer: SimpleNamespace
    graph_runner: SimpleNamespace
    batch: SimpleNamespace
    scheduler: SimpleNamespace
    draft_model_config: object


def make_objects(
    kind: str, algorithm, draft, target, use_aux: bool, settings, num_aux: int = 3
) -> Objects:
    runner = SimpleNamespace(model_config=draft, dtype=draft.dtype)
    target_worker = SimpleNamespace(model_config=target)
    common = dict(
        speculative_algorithm=algorithm,
        # what a patched worker's __init__ sets (get_eagle_num_aux_hidden_states)
        eagle_use_aux_hidden_state=use_aux,
        eagle_num_aux_hidden_states=num_aux,
        target_worker=target_worker,
        speculative_num_steps=settings.num_steps,
        topk=settings.topk,
    )
    if kind.startswith("v1"):
        # a v1 worker is the draft TpModelWorker
        worker = SimpleNamespace(
            model_config=draft,
            model_runner=runner,
            draft_model_runner=runner,
            model_runner_list=[runner],
            **common,
        )
        outer = worker
    else:
        # MultiLayerEagleDraftWorker sets model_config to the target's
        worker = SimpleNamespace(
            model_config=target, draft_runner=runner, draft_runner_list=[runner], **common
        )
        outer = SimpleNamespace(
            draft_worker=worker, target_worker=target_worker, speculative_algorithm=algorithm
        )
    graph_runner = SimpleNamespace(
        eagle_worker=worker,
        model_runner=runner,
        max_bs=settings.max_bs,
        max_num_token=settings.max_bs * (settings.num_steps + 1),
    )
    batch = SimpleNamespace(model_config=target, device="cpu")
    scheduler = SimpleNamespace(draft_worker=outer, spec_algorithm=algorithm)
    return Objects(worker, outer, graph_runner, batch, scheduler, draft)


def _self_for(site: Site, objects: Objects):
    role = ROLES[site.scope.split(".")[0]]
    return {
        "worker": objects.worker,
        "outer": objects.outer,
        "graph_runner": objects.graph_runner,
        "scheduler": objects.scheduler,
        "verify": SimpleNamespace(),
    }[role]


def _evaluate(expr: ast.expr, namespace: dict, local_values: dict, depth: int = 0):
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    scope = dict(namespace)
    for name in names - set(scope) - set(dir(builtins)):
        if name in local_values and depth < 3:
            scope[name] = _evaluate(local_values[name], namespace, local_values, depth + 1)
    code = compile(ast.Expression(body=expr), "<site>", "eval")
    return eval(code, scope)  # noqa: S307 - the tree's own expressions, on our stand-ins


def evaluate_tree(
    srt: Path,
    pair,
    algorithm_name: str,
    settings,
    use_aux: bool | None = None,
    num_aux: int | None = None,
) -> list[SiteValue]:
    """Width and dtype of every site every worker kind of ``algorithm_name`` reaches.

    ``use_aux`` and ``num_aux`` are what a patched worker holds from start-up
    (``eagle_use_aux_hidden_state``, ``eagle_num_aux_hidden_states``); by default they are
    parsed with the tree's own parser."""
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algorithm = SpeculativeAlgorithm.from_string(algorithm_name)
    eagle_info = load_eagle_info(srt)
    spec_info = load_spec_info(srt)
    if use_aux is None:
        parse = getattr(spec_info, "parse_eagle_use_aux_hidden_state", None)
        if parse is None:  # a pristine tree: use the patched parser's value, as the contract
            raise ValueError("pass use_aux for a tree without parse_eagle_use_aux_hidden_state")
        use_aux = parse(algorithm, pair.draft.hf_config)
    if num_aux is None:
        count = getattr(spec_info, "get_eagle_num_aux_hidden_states", None)
        num_aux = count(pair.draft.hf_config) if count is not None else 3
    modules: dict[str, ast.Module] = {}
    values: list[SiteValue] = []
    fc = drafter_fc(srt, pair.draft, eagle_info, use_aux) if algorithm_name == "EAGLE3" else None
    for kind in WORKER_KINDS_BY_ALGORITHM[algorithm_name]:
        objects = make_objects(
            kind, algorithm, pair.draft, pair.target, use_aux, settings, num_aux
        )
        for site in SITES:
            if site.scope not in WORKER_KINDS[kind]:
                continue
            if site.file not in modules:
                modules[site.file] = ast.parse((srt / site.file).read_text(encoding="utf-8"))
            function = _function(modules[site.file], site.scope)
            occurrences = _occurrences(function, site) if function is not None else []
            namespace = {
                "self": _self_for(site, objects),
                "batch": objects.batch,
                "model_config": objects.draft_model_config,
                "torch": torch,
                "EagleDraftInput": getattr(eagle_info, "EagleDraftInput"),
                "EagleDraftExtendInput": getattr(eagle_info, "EagleDraftExtendInput", None),
            }
            live = [o for o in occurrences if _live(o, namespace)]
            for index, occurrence in enumerate(live):
                width = dtype = error = None
                try:
                    width = int(_evaluate(occurrence.width, namespace, occurrence.locals))
                    if occurrence.dtype is not None:
                        dtype = str(_evaluate(occurrence.dtype, namespace, occurrence.locals))
                except Exception as exc:  # reported as the site's value
                    error = f"{type(exc).__name__}: {exc}"
                values.append(
                    SiteValue(
                        site,
                        index,
                        occurrence.line,
                        kind,
                        width,
                        dtype,
                        error,
                        rebuilt_by_worker=site.kind is Kind.DETACHED_IDLE_INPUT
                        and hasattr(eagle_info, "EagleDraftExtendInput"),
                        detail=occurrence.detail,
                    )
                )
        if fc is not None:
            # fc is built in the draft model's dtype, as every weight of it
            line, width, error = fc
            dtype = None if error else str(pair.draft.dtype)
            values.append(SiteValue(DRAFTER_FC, 0, line, kind, width, dtype, error, detail="fc"))
    return values


def _entry_classes(module: ast.Module) -> set[str]:
    """The architectures a model file serves: the names in its ``EntryClass``."""
    for node in module.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
        ):
            return {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return set()


def drafter_fc(srt: Path, draft, eagle_info, use_aux: bool) -> tuple[int, int | None, str | None] | None:
    """(line, width, error) of the drafter's ``fc`` in the tree's own ``LlamaModel.__init__``:
    the statements before ``self.fc = ...`` that set what its input width reads, run with the
    drafter's ``hf_config`` (names the tree imports from ``spec_info`` or ``eagle_info`` are
    that tree's).
    None when the drafter is not this file's architecture, or its fc is never applied (no aux
    hidden states: the drafter reads the target's last hidden state as it is)."""
    from types import SimpleNamespace

    module = ast.parse((srt / DRAFTER_FC.file).read_text(encoding="utf-8"))
    architectures = getattr(draft.hf_config, "architectures", None) or []
    if not use_aux or not set(architectures) & _entry_classes(module):
        return None
    function = _function(module, DRAFTER_FC.scope)
    for index, stmt in enumerate(function.body if function is not None else []):
        if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "self.fc":
            width = stmt.value.args[0]
            read = {ast.unparse(n) for n in ast.walk(width) if isinstance(n, ast.Attribute)}
            setup = [
                s
                for s in function.body[:index]
                if any(
                    isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store)
                    and ast.unparse(n) in read
                    for n in ast.walk(s)
                )
            ]
            scope = {}
            for source in (load_spec_info(srt), eagle_info):  # the parser, then the rest
                scope.update({n: getattr(source, n) for n in dir(source) if not n.startswith("__")})
            scope.update(self=SimpleNamespace(), config=draft.hf_config)
            try:
                code = compile(ast.Module(body=setup, type_ignores=[]), DRAFTER_FC.file, "exec")
                exec(code, scope)  # noqa: S102 - the tree's own statements, on the drafter's config
                return stmt.lineno, int(_evaluate(width, scope, {})), None
            except Exception as exc:  # reported as the site's value
                return stmt.lineno, None, f"{type(exc).__name__}: {exc}"
    return None


def _live(occurrence: _Occurrence, namespace: dict) -> bool:
    """Whether the site's enclosing ``if``s select it for this configuration. A guard that
    reads run-time state (the batch, a local) counts as live: it is not about configs."""
    for test, wanted in occurrence.guards:
        try:
            if bool(_evaluate(test, namespace, {})) != wanted:
                return False
        except Exception:
            continue
    return True
