"""Each patch of the series adds its own slice of the fork's CPU tests.

The CPU tests are one folder (``CPU_TEST_DIR``): one ``test_<concern>.py`` file per concern
(the parser has three). The harness modules they share (``HARNESS``: ``common.py`` and
others) are test helpers of SGLang's package, as upstream keeps its own (``sglang.test``,
``HARNESS_DIR``), imported by their full name: every file under ``test/registered/`` is then
a registered test, as SGLang's suite runner requires. ``apply`` adds both folders whole
(``inserted_tests/``). For the series, the folders as they stand after patch k hold the test
files of the concerns landed so far (``TEST_CONCERNS``), whole, and each harness module
sliced to what those files import of it: the definitions of the imported names, the module-level code they reach (helpers,
stand-ins, constants: the closure of the names they read) and the imports of what is left;
the docstring always stays. A test file not named in ``TEST_CONCERNS`` is an error: a new
test must say what it tests.
"""

from __future__ import annotations

import ast

import black
import libcst as cst
from sglang_eagle_sizing.concerns import all_enabled, enabled
from sglang_eagle_sizing.families.release_0_5_11 import concerns
from sglang_eagle_sizing.families.release_0_5_11.concerns import (
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

#: The folder of the fork's CPU tests, from the checkout root.
CPU_TEST_DIR = "test/registered/unit/speculative/eagle_hidden_sizing"
#: The folder of the harness the CPU tests share, from the checkout root, and its package.
HARNESS_DIR = "python/sglang/test/speculative/eagle_hidden_sizing"
HARNESS_PACKAGE = "sglang.test.speculative.eagle_hidden_sizing"
#: The fork's GPU end-to-end test: the last patch adds it.
E2E_TEST = "test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py"

#: Each CPU test file of ``CPU_TEST_DIR`` -> the concern it tests: the patch of that concern
#: adds it whole.
TEST_CONCERNS: dict[str, str] = {
    "test_annotation.py": ANNOTATION,
    "test_parser_flag.py": PARSER,
    "test_parser_layer_ids.py": PARSER,
    "test_worker_start_up.py": PARSER,
    "test_target_capture.py": TARGET_CAPTURE,
    "test_validation.py": VALIDATION,
    "test_dtype.py": DTYPE,
    "test_routing.py": ROUTING,
    "test_extend_width.py": EXTEND_WIDTH,
    "test_multi_layer_width.py": MULTI_LAYER_WIDTH,
    "test_v2_idle_width.py": V2_IDLE_WIDTH,
    "test_pd_standalone.py": PD_STANDALONE,
    "test_drafter_fc.py": DRAFTER_FC,
    "test_idle_inputs.py": IDLE_INPUTS,
    "test_attention_backends.py": ATTENTION_BACKENDS,
    "test_eagle3_norm_variants.py": EAGLE3_NORM_VARIANTS,
    "test_speculators_format.py": SPECULATORS_FORMAT,
}
#: The shared harness modules of ``HARNESS_DIR`` (``from <HARNESS_PACKAGE>.common import``),
#: each before the modules it imports: a module is sliced to what the files kept before it
#: import.
HARNESS: tuple[str, ...] = (
    "cases.py",
    "cpu_models.py",
    "idle_batches.py",
    "attention_dp.py",
    "common.py",
)


def is_cpu_test(key: str) -> bool:
    """Whether ``key`` (a path from the checkout root) is a file of the CPU tests: of
    ``CPU_TEST_DIR`` or of their harness."""
    return key.startswith((CPU_TEST_DIR + "/", HARNESS_DIR + "/"))


def is_test_file(key: str) -> bool:
    """Whether ``key`` is a file of the fork's tests (``test/``) or of their harness."""
    return key.startswith(("test/", HARNESS_DIR + "/"))


class SliceError(ValueError):
    """A CPU test file whose concern is not known, or a file of the folder that is neither a
    test file nor a harness module."""


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


def _imported_from(source: str, module: str) -> set[str]:
    """The names ``source`` imports from the module ``module`` (its full dotted name)."""
    return {
        alias.asname or alias.name
        for node in ast.parse(source).body
        if isinstance(node, ast.ImportFrom) and node.module == module and node.level == 0
        for alias in node.names
    }


def slice_cpu_tests(files: dict[str, str]) -> dict[str, str]:
    """The CPU test folder as it stands once the enabled concerns have landed. ``files``:
    ``{path from the checkout root: text}`` of ``CPU_TEST_DIR`` and ``HARNESS_DIR``. The test files of the
    enabled concerns, whole; each harness module sliced to the closure of the names the
    files kept import from it (none: left out); ``__init__.py`` with them. No test file
    left: nothing. Every concern enabled: ``files`` as they are."""
    if all_enabled(concerns.ORDER):
        return dict(files)
    by_name = {path.rsplit("/", 1)[-1]: path for path in files}
    kept: dict[str, str] = {}
    for name, path in sorted(by_name.items()):
        in_harness = path.startswith(HARNESS_DIR + "/")
        if in_harness or not name.startswith("test_"):
            if name not in (HARNESS if in_harness else ("__init__.py",)):
                raise SliceError(f"{path}: neither a test file nor in HARNESS")
            continue
        if name not in TEST_CONCERNS:
            raise SliceError(f"{path}: test file {name} has no concern in TEST_CONCERNS")
        if enabled(TEST_CONCERNS[name]):
            kept[path] = files[path]
    if not kept:
        return {}
    for name in HARNESS:
        if name not in by_name:
            continue
        module = f"{HARNESS_PACKAGE}.{name.removesuffix('.py')}"
        roots = set().union(*(_imported_from(text, module) for text in kept.values()))
        sliced = slice_module(files[by_name[name]], roots)
        if sliced:
            kept[by_name[name]] = sliced
    if "__init__.py" in by_name:
        kept[by_name["__init__.py"]] = files[by_name["__init__.py"]]
    return dict(sorted(kept.items()))


def slice_module(source: str, roots: set[str]) -> str:
    """The module with the definitions of ``roots``, the module-level code they reach
    (helpers, stand-ins, constants: the closure of the names they read), every statement
    that defines nothing (the docstring) and the imports of what is left, black-formatted;
    '' when it defines none of ``roots``."""
    module = cst.parse_module(source)
    empty = cst.Module([])

    def parsed(node: cst.CSTNode) -> ast.Module:
        return ast.parse(empty.code_for_node(node))

    kept: dict[int, cst.CSTNode] = {}
    definitions: dict[str, list[int]] = {}
    always: list[int] = []
    for index, node in enumerate(module.body):
        if _is_import(node):
            continue
        tree = parsed(node).body
        names = set().union(*(_defined_names(s) for s in tree)) if tree else set()
        if names and all(isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)) for s in tree):
            for name in names:
                definitions.setdefault(name, []).append(index)
        else:
            kept[index] = node
            always.append(index)
    if not roots & definitions.keys():
        return ""

    used: set[str] = set()
    pending = list(always)
    for name in sorted(roots):
        used.add(name)
        for definition in definitions.get(name, ()):
            if definition not in kept:
                kept[definition] = module.body[definition]
                pending.append(definition)
    while pending:
        index = pending.pop()
        for name in _read_names(parsed(kept[index])):
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


def test_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """Of the fork's tests (``{path from the checkout root: bytes}``), those the enabled
    concerns add: every concern with CPU tests enabled (a series without the GPU test), the
    whole CPU folder; fewer, the CPU tests sliced (``slice_cpu_tests``); the GPU test with
    ``e2e-test``."""
    if all_enabled(concerns.ORDER):
        return files
    whole_cpu_tests = all(enabled(c) for c in concerns.ORDER if c != concerns.E2E_TEST)
    cpu_tests = {k: v.decode("utf-8") for k, v in files.items() if is_cpu_test(k)}
    if not whole_cpu_tests:
        cpu_tests = slice_cpu_tests(cpu_tests)
    staged = {k: v.encode("utf-8") for k, v in cpu_tests.items()}
    for key, data in files.items():
        if not is_cpu_test(key) and enabled(concerns.E2E_TEST):
            staged[key] = data
    return dict(sorted(staged.items()))
