"""Each patch of the series adds its own slice of the fork's CPU test.

The CPU test file is written whole (``inserted_tests/``) and ``apply`` adds it whole. For the
series, the file as it stands after patch k keeps the test methods of the concerns landed so
far (``TEST_CONCERNS``), the module-level code they reach (helpers, stand-ins, constants: the
closure of the names they read) and the imports of what is left; every other top-level
statement (the docstring, the CPU stub, the CI registration, ``__main__``) always stays. A test
class not named in ``TEST_CONCERNS`` is an error: a new test must say what it tests.
"""

from __future__ import annotations

import ast

import black
import libcst as cst

from . import concerns
from .concerns import (
    ANNOTATION,
    ATTENTION_BACKENDS,
    DRAFTER_FC,
    DTYPE,
    EAGLE3_NORM_VARIANTS,
    EXTEND_WIDTH,
    IDLE_INPUTS,
    MULTI_LAYER_WIDTH,
    PARSER,
    PD_STANDALONE,
    ROUTING,
    SPECULATORS_FORMAT,
    TARGET_CAPTURE,
    V2_IDLE_WIDTH,
    VALIDATION,
)

#: The fork's CPU test, from the checkout root.
CPU_TEST = "test/registered/unit/speculative/test_eagle_hidden_sizing.py"
#: The fork's GPU end-to-end test: the last patch adds it.
E2E_TEST = "test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py"

#: ``Class`` or ``Class.test_method`` -> the concern it tests (a method's own entry wins).
TEST_CONCERNS: dict[str, str] = {
    "TestSpeculativeModulesImport": ANNOTATION,
    "TestEagleConfigParser": PARSER,
    "TestWorkerStartUp": PARSER,
    "TestTargetCapture": TARGET_CAPTURE,
    "TestStartupValidation": VALIDATION,
    "TestWorkerStartUp.test_every_eagle_worker_refuses_before_the_draft_model_loads": (
        VALIDATION
    ),
    "TestOneDtypeAtDtypeAuto": DTYPE,
    "TestIdleInputs": ROUTING,
    "TestPDMetadataBuffers": ROUTING,
    "TestCudaGraphBuffers": ROUTING,
    "TestHiddenSizeContract": EXTEND_WIDTH,
    "TestIdleInputs.test_v1_draft_extend_rebuilds_the_input_verify_made": EXTEND_WIDTH,
    "TestIdleInputs.test_v1_draft_extend_when_every_request_finished": EXTEND_WIDTH,
    "TestCudaGraphBuffers.test_draft_extend_runner": EXTEND_WIDTH,
    "TestIdleInputs.test_multi_layer_v1_draft_extend_rebuilds_the_input_verify_made": (
        MULTI_LAYER_WIDTH
    ),
    "TestIdleInputs.test_multi_layer_v2_hidden_states_pool": MULTI_LAYER_WIDTH,
    "TestCudaGraphBuffers.test_multi_layer_draft_extend_runners": MULTI_LAYER_WIDTH,
    "TestIdleInputs.test_v2_worker_without_spec_info": V2_IDLE_WIDTH,
    "TestIdleInputs.test_multi_layer_v2_worker_without_spec_info": V2_IDLE_WIDTH,
    "TestPDMetadataBuffers.test_standalone_v1": PD_STANDALONE,
    "TestPDMetadataBuffers.test_standalone_v2": PD_STANDALONE,
    "TestOneDtypeAtDtypeAuto.test_every_site_gets_the_targets_dtype": PD_STANDALONE,
    "TestDrafterFc": DRAFTER_FC,
    "TestEagle3NormVariants": EAGLE3_NORM_VARIANTS,
    "TestSpeculatorsFormat": SPECULATORS_FORMAT,
    "TestHiddenSizeContract.test_eagle3_speculators_format": SPECULATORS_FORMAT,
    "TestTargetCapture.test_speculators_layer_ids": SPECULATORS_FORMAT,
    "TestTargetCapture.test_speculators_ids_the_target_cannot_capture_are_refused": (
        SPECULATORS_FORMAT
    ),
    "TestStartupValidation.test_four_aux_layers_fit_the_drafters_fc": DRAFTER_FC,
    "TestIdleInputsCarryAttentionIndices": IDLE_INPUTS,
    "TestPaddedIdleBatchOnTriton": IDLE_INPUTS,
    "TestPaddedDecodeOnTriton": ATTENTION_BACKENDS,
    "TestPaddedIdleBatchOnFlashInfer": ATTENTION_BACKENDS,
}


class SliceError(ValueError):
    """The test file has a test class whose concern is not known."""


def _is_test_class(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.ClassDef) and node.name.value.startswith("Test")


def _is_import(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in node.body
    )


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _read_names(node: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    # A quoted annotation reads the names in it too.
    for n in ast.walk(node):
        annotations = []
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(n.returns)
        elif isinstance(n, (ast.arg, ast.AnnAssign)):
            annotations.append(n.annotation)
        for annotation in annotations:
            if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                try:
                    expression = ast.parse(annotation.value, mode="eval")
                except SyntaxError:
                    continue
                names |= {m.id for m in ast.walk(expression) if isinstance(m, ast.Name)}
    return names


def _concern_of(class_name: str, method: str | None = None) -> str:
    if method is not None and f"{class_name}.{method}" in TEST_CONCERNS:
        return TEST_CONCERNS[f"{class_name}.{method}"]
    if class_name not in TEST_CONCERNS:
        raise SliceError(
            f"{CPU_TEST}: test class {class_name} has no concern in TEST_CONCERNS"
        )
    return TEST_CONCERNS[class_name]


def _sliced_class(node: cst.ClassDef) -> cst.ClassDef | None:
    """The class with the test methods of the enabled concerns; None if none is left."""
    body = []
    tests = 0
    for item in node.body.body:
        if isinstance(item, cst.FunctionDef) and item.name.value.startswith("test"):
            if not concerns.enabled(_concern_of(node.name.value, item.name.value)):
                continue
            tests += 1
        body.append(item)
    if not tests:
        return None
    return node.with_changes(body=node.body.with_changes(body=body))


def _kept_imports(
    node: cst.SimpleStatementLine, used: set[str]
) -> cst.SimpleStatementLine | None:
    small = []
    for statement in node.body:
        if isinstance(statement, cst.ImportFrom) and not isinstance(
            statement.names, cst.ImportStar
        ):
            module = cst.Module([]).code_for_node(statement.module or cst.Name(""))
            if module == "__future__":
                small.append(statement)
                continue
            names = [a for a in statement.names if _bound(a) in used]
            if names:
                names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                small.append(statement.with_changes(names=names))
        elif isinstance(statement, cst.Import):
            names = [a for a in statement.names if _bound(a) in used]
            if names:
                names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                small.append(statement.with_changes(names=names))
        else:
            small.append(statement)
    if not small:
        return None
    return node.with_changes(body=small)


def _bound(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return cst.Module([]).code_for_node(alias.asname.name)
    return cst.Module([]).code_for_node(alias.name).split(".")[0]


def slice_cpu_test(source: str) -> str:
    """The CPU test as it stands once the enabled concerns have landed ('' when none of its
    tests has); the whole file, byte for byte, when every concern is enabled."""
    if concerns.all_enabled():
        return source
    module = cst.parse_module(source)
    empty = cst.Module([])

    def parsed(node: cst.CSTNode) -> ast.Module:
        return ast.parse(empty.code_for_node(node))

    kept: dict[int, cst.CSTNode] = {}
    definitions: dict[str, list[int]] = {}
    roots: list[int] = []
    for index, node in enumerate(module.body):
        if _is_import(node):
            continue
        if _is_test_class(node):
            sliced = _sliced_class(node)
            if sliced is not None:
                kept[index] = sliced
                roots.append(index)
            continue
        tree = parsed(node).body
        names = set().union(*(_defined_names(s) for s in tree)) if tree else set()
        if names and all(isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)) for s in tree):
            for name in names:
                definitions.setdefault(name, []).append(index)
        else:
            kept[index] = node
            roots.append(index)
    if not any(_is_test_class(n) for n in kept.values()):
        return ""

    used: set[str] = set()
    pending = list(roots)
    while pending:
        index = pending.pop()
        for name in _read_names(parsed(kept.get(index, module.body[index]))):
            if name in used:
                continue
            used.add(name)
            for definition in definitions.get(name, ()):
                if definition not in kept:
                    kept[definition] = module.body[definition]
                    pending.append(definition)

    body = []
    carried: list[cst.EmptyLine] = []  # the blank lines before a dropped import
    for index, node in enumerate(module.body):
        if _is_import(node):
            imports = _kept_imports(node, used)
            if imports is None:
                carried = carried or [line for line in node.leading_lines if line.comment is None]
                continue
            node = imports
        elif index not in kept:
            continue
        else:
            node = kept[index]
        if carried and not node.leading_lines:
            node = node.with_changes(leading_lines=carried)
        carried = []
        body.append(node)
    code = module.with_changes(body=body).code
    return black.format_str(code, mode=black.Mode())
