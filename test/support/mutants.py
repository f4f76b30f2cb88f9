"""Mutants of the patched SGLang tree, for showing that the fork's CPU test has teeth.

Test infrastructure, not product. Each mutant is one changed file:

- **site** mutants: for each site of ``sites.SITES`` and each of its occurrences, the patched
  tree with that one sizing call (idle input, buffer allocation, ``MetadataBuffers``) replaced
  by the call 0.5.11 has there, taken from the pristine tree. Calls are found with ``ast`` (by
  kind, inside the site's ``Class.method``) and spliced by their source positions.
- **rule** mutants: the patched tree with one rule of the contract broken, in the function the
  patch inserted, found by its name: a body replaced by a plausible wrong rule, one operand or
  branch dropped, or one refusal (``raise``) disabled. A named function or shape that is not
  found raises ``MutantError``: the table cannot silently lose a mutant;
- **path** mutants: the code around the sites broken (the target's capture, the PD buffers,
  the workers' start-up and idle inputs, the attention backends);
- **false alarm** and **benign refactor** mutants: changes that are not bugs (an unrelated
  buffer; black at another line length, an ``or``'s operands swapped, a local renamed, a
  width bound to a local, keyword arguments reordered), on which the fork's test must pass.

A mutant tree is a forest of symlinks to the patched tree, with real folders only along the
path of the changed file, so building one costs nothing.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import black
from sglang_eagle_sizing.families.release_0_5_11 import fork_test_slices, inserted
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind, Site

CONTRACT = "speculative/eagle_info.py"
#: where the parser of the drafter's config lives (``inserted.PARSER_HELPERS``), and the rule
#: mutants that break it
PARSER = "speculative/spec_info.py"
PARSER_RULES = ("flag parser:", "layer-id parser:")
INSERTED_HELPERS = frozenset(
    node.name
    for node in ast.parse(inserted.PARSER_HELPERS + inserted.HELPERS).body
    if isinstance(node, ast.FunctionDef)
)


class MutantError(Exception):
    """A mutant could not be built: the tree no longer has the shape it targets."""


@dataclass(frozen=True)
class Mutant:
    #: short unique name, used in the table
    name: str
    #: "site" or "rule"
    family: str
    #: what the mutant does, one line
    description: str
    #: the changed file, relative to srt/
    file: str
    text: str
    #: a site mutant's kind (``sites.Kind`` value); empty for the other families
    kind: str = ""


# -- finding things with ast ------------------------------------------------------------------


def _function(module: ast.Module, qualified: str) -> ast.FunctionDef:
    """``Class.method`` or a module-level ``function``."""
    parts = qualified.split(".")
    body = module.body
    node = None
    for part in parts:
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part
            ),
            None,
        )
        if node is None:
            raise MutantError(f"no {qualified} (missing {part})")
        body = node.body
    if not isinstance(node, ast.FunctionDef):
        raise MutantError(f"{qualified} is not a function")
    return node


def _mentions_hidden_width(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and "hidden_size" in n.attr)
        or (isinstance(n, ast.Name) and "hidden_size" in n.id)
        for n in ast.walk(node)
    )


def _is_sizing_call(node: ast.AST, kind: Kind) -> bool:
    if not isinstance(node, ast.Call):
        return False
    keywords = {k.arg for k in node.keywords}
    func = node.func
    if kind in (Kind.IDLE_INPUT, Kind.DETACHED_IDLE_INPUT):
        return (
            isinstance(func, ast.Attribute)
            and func.attr == "create_idle_input"
            and "hidden_size" in keywords
        )
    if kind is Kind.BUFFER:
        return (
            isinstance(func, ast.Attribute)
            and ast.unparse(func.value) == "torch"
            and func.attr in ("zeros", "empty", "ones", "full")
            and bool(node.args)
            and isinstance(node.args[0], ast.Tuple)
            and bool(node.args[0].elts)
            and _mentions_hidden_width(node.args[0].elts[-1])
        )
    if kind is Kind.METADATA_BUFFER:
        return ast.unparse(func) == "MetadataBuffers" and "hidden_size" in keywords
    if kind is Kind.DRAFTER_FC:
        return ast.unparse(func) in ("torch.nn.Linear", "nn.Linear") and bool(node.args)
    raise AssertionError(kind)


def sizing_calls(text: str, site: Site) -> list[ast.Call]:
    """The sizing calls of ``site`` in a file's text, in source order."""
    function = _function(ast.parse(text), site.scope)
    calls = [n for n in ast.walk(function) if _is_sizing_call(n, site.kind)]
    return sorted(calls, key=lambda n: (n.lineno, n.col_offset))


# -- splicing text by ast positions -------------------------------------------------------------


def _offsets(text: str) -> list[int]:
    starts, position = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(position)
        position += len(line)
    return starts


def _span(text: str, node: ast.AST) -> tuple[int, int]:
    """Character offsets of a node (ast columns are UTF-8 byte offsets)."""
    starts = _offsets(text)
    lines = text.splitlines(keepends=True)

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + len(
            lines[line - 1].encode("utf-8")[:column].decode("utf-8")
        )

    return offset(node.lineno, node.col_offset), offset(
        node.end_lineno, node.end_col_offset
    )


def _source(text: str, node: ast.AST) -> str:
    start, end = _span(text, node)
    return text[start:end]


def _replace(text: str, node: ast.AST, new: str) -> str:
    start, end = _span(text, node)
    return text[:start] + new + text[end:]


def _replace_statements(text: str, statements: list[ast.stmt], new: str) -> str:
    """Replace whole lines of ``statements`` (contiguous) with ``new``, re-indented."""
    first, last = statements[0], statements[-1]
    lines = text.splitlines(keepends=True)
    indent = " " * first.col_offset
    body = textwrap.indent(textwrap.dedent(new).strip("\n") + "\n", indent)
    return "".join(lines[: first.lineno - 1]) + body + "".join(lines[last.end_lineno :])


def _body_without_docstring(function: ast.FunctionDef) -> list[ast.stmt]:
    body = function.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if not body:
        raise MutantError(f"{function.name} has no statements")
    return body


def _checked(text: str, name: str) -> str:
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise MutantError(f"{name}: the mutant does not parse ({exc})") from None
    return text


# -- site mutants ----------------------------------------------------------------------------


#: Site mutants that change no behaviour, with the reason: the fork's CPU test must pass on
#: them. Only reading the source could tell them apart, and the fork's tests do not read it.
EQUIVALENT_SITE_MUTANTS = {
    "site EAGLEWorker._draft_preprocess_idle": (
        "0.5.11 reads the draft worker's own spec_hidden_size and dtype, the classmethods' values"
    ),
    "site EAGLEDraftCudaGraphRunner.__init__": (
        "0.5.11 reads the draft runner's own spec_hidden_size, the decode width"
    ),
    "site EagleVerifyInput.verify #1": (
        "every worker rebuilds verify's idle input before the draft extend reads it"
    ),
    "site EagleVerifyInput.verify #2": (
        "every worker rebuilds verify's idle input before the draft extend reads it"
    ),
}


def site_mutants(pristine_srt: Path, patched_srt: Path) -> list[Mutant]:
    """For each site and occurrence: that call put back to 0.5.11's (family "equivalent"
    where that changes no behaviour, ``EQUIVALENT_SITE_MUTANTS``)."""
    mutants = []
    for site in SITES:
        pristine_text = (pristine_srt / site.file).read_text()
        patched_text = (patched_srt / site.file).read_text()
        old = sizing_calls(pristine_text, site)
        new = sizing_calls(patched_text, site)
        if not old or not new:
            raise MutantError(
                f"{site.file} {site.scope}: {len(old)} sizing call(s) in 0.5.11, "
                f"{len(new)} in the patched tree"
            )
        if len(old) == len(new):
            pairs = list(zip(old, new))
        elif len(new) == 1:  # two 0.5.11 branches became one routed call
            pairs = [(call, new[0]) for call in old]
        else:
            raise MutantError(
                f"{site.file} {site.scope}: cannot pair {len(old)} 0.5.11 sizing "
                f"calls with {len(new)} patched ones"
            )
        for index, (old_call, new_call) in enumerate(pairs, 1):
            suffix = f" #{index}" if len(pairs) > 1 else ""
            name = f"site {site.scope}{suffix}"
            text = _replace(patched_text, new_call, _source(pristine_text, old_call))
            width = " ".join(_source(pristine_text, _width(old_call, site.kind)).split())
            description = (
                f"{site.file}:{old_call.lineno} back to 0.5.11's width `{_shorten(width)}`"
            )
            if name in EQUIVALENT_SITE_MUTANTS:
                description += f" (no behaviour differs: {EQUIVALENT_SITE_MUTANTS[name]})"
            mutants.append(
                Mutant(
                    name=name,
                    family="equivalent" if name in EQUIVALENT_SITE_MUTANTS else "site",
                    description=description,
                    file=site.file,
                    text=_checked(text, name),
                    kind=site.kind.value,
                )
            )
    return mutants


def _width(call: ast.Call, kind: Kind) -> ast.AST:
    if kind is Kind.DRAFTER_FC:
        return call.args[0]
    if kind is Kind.BUFFER:
        return call.args[0].elts[-1]
    return next(k.value for k in call.keywords if k.arg == "hidden_size")


def _shorten(expression: str, limit: int = 100) -> str:
    expression = expression.replace("( ", "(").replace(" )", ")")
    return expression if len(expression) <= limit else expression[: limit - 3] + "..."


# -- rule mutants ----------------------------------------------------------------------------


def _with_body(text: str, qualified: str, body: str) -> str:
    function = _function(ast.parse(text), qualified)
    return _replace_statements(text, _body_without_docstring(function), body)


def _drop_condition_operand(text: str, qualified: str, attribute: str) -> str:
    """In ``qualified``, drop the ``and`` operand that reads ``<x>.<attribute>``."""
    function = _function(ast.parse(text), qualified)
    for node in ast.walk(function):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            kept = [
                v
                for v in node.values
                if not any(
                    isinstance(n, ast.Attribute) and n.attr == attribute
                    for n in ast.walk(v)
                )
            ]
            if len(kept) < len(node.values):
                new = " and ".join(_source(text, v) for v in kept)
                return _replace(text, node, f"({new})")
    raise MutantError(f"{qualified}: no condition reads .{attribute}")


def _if_reading(function: ast.FunctionDef, attribute: str) -> ast.If:
    for node in ast.walk(function):
        if isinstance(node, ast.If) and any(
            (isinstance(n, ast.Attribute) and n.attr == attribute)
            for n in ast.walk(node.test)
        ):
            return node
    raise MutantError(f"{function.name}: no if reads .{attribute}")


def _replace_branch(text: str, qualified: str, attribute: str, body: str) -> str:
    """Replace the body of the ``if`` (in ``qualified``) whose test reads ``attribute``."""
    branch = _if_reading(_function(ast.parse(text), qualified), attribute)
    return _replace_statements(text, branch.body, body)


def _drop_branch(text: str, qualified: str, attribute: str) -> str:
    """Remove the ``if`` (in ``qualified``) whose test reads ``attribute``."""
    branch = _if_reading(_function(ast.parse(text), qualified), attribute)
    if branch.orelse:
        raise MutantError(f"{qualified}: the if on .{attribute} has an else")
    return _replace_statements(text, [branch], "pass")


def _replace_last_return(text: str, qualified: str, expression: str) -> str:
    function = _function(ast.parse(text), qualified)
    last = _body_without_docstring(function)[-1]
    if not isinstance(last, ast.Return):
        raise MutantError(f"{qualified} does not end with a return")
    return _replace_statements(text, [last], f"return {expression}")


def _raises(text: str) -> list[tuple[str, ast.Raise]]:
    """Every ``raise`` of the functions the patch inserted at module level (by name: the
    helpers), with the function that holds it."""
    module = ast.parse(text)
    found = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and _is_inserted_helper(node.name):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Raise):
                    found.append((node.name, inner))
    return sorted(found, key=lambda item: item[1].lineno)


def _is_inserted_helper(name: str) -> bool:
    """A module-level function the patch inserts into spec_info.py or eagle_info.py
    (``inserted.PARSER_HELPERS``, ``inserted.HELPERS``)."""
    return name in INSERTED_HELPERS


def _refused_key(text: str, node: ast.Raise) -> str:
    """The key a refusal names (the first string constant of the raise that looks like
    one); else what it expects (the first string constant with a space)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            match = re.fullmatch(r"[a-z][a-z_.]*", inner.value)
            if match and ("_" in inner.value or "." in inner.value):
                return inner.value
        if isinstance(inner, ast.JoinedStr):
            for part in inner.values:
                if isinstance(part, ast.Constant):
                    match = re.search(r"Invalid ([a-z_.]+)=", part.value)
                    if match:
                        return match.group(1)
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            if " " in inner.value.strip():
                return "expected " + inner.value.strip().rstrip(":,.")
    return ""


#: (name, description, how to build it from the patched eagle_info.py text); the parser's
#: (``PARSER_RULES``) from the patched spec_info.py text
RULE_MUTATIONS = [
    (
        "decode width: the target's",
        "EagleDraftInput.hidden_size_for returns the target's spec_hidden_size",
        lambda t: _with_body(
            t,
            "EagleDraftInput.hidden_size_for",
            "return worker.target_worker.model_config.spec_hidden_size",
        ),
    ),
    (
        "decode width: hidden_size",
        "EagleDraftInput.hidden_size_for returns the draft's hidden_size, not spec_hidden_size",
        lambda t: _with_body(
            t,
            "EagleDraftInput.hidden_size_for",
            "return get_draft_runner(worker).model_config.hidden_size",
        ),
    ),
    (
        "decode dtype: the target's",
        "EagleDraftInput.dtype_for returns the target's dtype",
        lambda t: _with_body(
            t,
            "EagleDraftInput.dtype_for",
            "return worker.target_worker.model_config.dtype",
        ),
    ),
    (
        "extend width: 0.5.11's v1 rule",
        (
            "EagleDraftExtendInput.hidden_size_for: draft hidden_size * 3 with aux, "
            "else the draft's spec_hidden_size"
        ),
        lambda t: _with_body(
            t,
            "EagleDraftExtendInput.hidden_size_for",
            """
            model_config = get_draft_runner(worker).model_config
            if (
                worker.speculative_algorithm.is_eagle3()
                and worker.eagle_use_aux_hidden_state
            ):
                return model_config.hidden_size * 3
            return model_config.spec_hidden_size
            """,
        ),
    ),
    (
        "extend width: aux flag ignored",
        "EagleDraftExtendInput.hidden_size_for widens every EAGLE-3 drafter",
        lambda t: _drop_condition_operand(
            t, "EagleDraftExtendInput.hidden_size_for", "eagle_use_aux_hidden_state"
        ),
    ),
    (
        "extend width: always 3 aux layers",
        (
            "EagleDraftExtendInput.hidden_size_for: 3 x target hidden_size, whatever "
            "the drafter's layer ids"
        ),
        lambda t: _replace_branch(
            t,
            "EagleDraftExtendInput.hidden_size_for",
            "eagle_use_aux_hidden_state",
            "return 3 * worker.target_worker.model_config.hidden_size",
        ),
    ),
    (
        "extend width: no STANDALONE case",
        "EagleDraftExtendInput.hidden_size_for gives STANDALONE the target's width",
        lambda t: _drop_branch(
            t, "EagleDraftExtendInput.hidden_size_for", "is_standalone"
        ),
    ),
    (
        "extend width: hidden_size",
        (
            "EagleDraftExtendInput.hidden_size_for without aux: the target's "
            "hidden_size, not spec_hidden_size"
        ),
        lambda t: _replace_last_return(
            t,
            "EagleDraftExtendInput.hidden_size_for",
            "worker.target_worker.model_config.hidden_size",
        ),
    ),
    (
        "extend dtype: the target's",
        "EagleDraftExtendInput.dtype_for returns the target's dtype",
        lambda t: _with_body(
            t,
            "EagleDraftExtendInput.dtype_for",
            "return worker.target_worker.model_config.dtype",
        ),
    ),
    (
        "flag parser: drafter's flag ignored",
        "parse_eagle_use_aux_hidden_state is true for every EAGLE-3 drafter",
        lambda t: _with_body(
            t,
            "parse_eagle_use_aux_hidden_state",
            "return speculative_algorithm.is_eagle3()",
        ),
    ),
    (
        "flag parser: true for every algorithm",
        "parse_eagle_use_aux_hidden_state reads eagle_config for EAGLE and STANDALONE too",
        lambda t: _with_body(
            t,
            "parse_eagle_use_aux_hidden_state",
            """
            eagle_config = getattr(draft_hf_config, "eagle_config", None) or {}
            if isinstance(eagle_config, dict):
                return eagle_config.get("use_aux_hidden_state", True)
            return getattr(eagle_config, "use_aux_hidden_state", True)
            """,
        ),
    ),
    (
        "layer-id parser: ids ignored",
        "get_eagle_aux_hidden_state_layer_ids returns None (the target's default layers)",
        lambda t: _with_body(t, "get_eagle_aux_hidden_state_layer_ids", "return None"),
    ),
    (
        "layer-id parser: always 3",
        "get_eagle_num_aux_hidden_states returns 3 whatever the drafter declares",
        lambda t: _with_body(t, "get_eagle_num_aux_hidden_states", "return 3"),
    ),
    (
        "layer-id parser: top-level ids read as SGLang's",
        "read_eagle_aux_hidden_state_layer_ids keeps top-level ids, hidden-state indices, "
        "as they are: the target captures the hidden state after each",
        lambda t: _replace_in_function(
            t,
            "read_eagle_aux_hidden_state_layer_ids",
            "return key, [i - first for i in layer_ids]",
            "return key, list(layer_ids)",
        ),
    ),
    (
        "layer-id parser: the top level first",
        "read_eagle_aux_hidden_state_layer_ids serves the top-level ids of a drafter that "
        "declares ids in eagle_config too (0.5.11 served eagle_config's)",
        lambda t: _replace_in_function(
            t,
            "read_eagle_aux_hidden_state_layer_ids",
            "    ):\n        if layer_ids is None:",
            "    )[::-1]:\n        if layer_ids is None:",
        ),
    ),
    (
        "runner resolution: model_runner only",
        "get_draft_runner returns worker.model_runner (v2 draft workers have none)",
        lambda t: _with_body(t, "get_draft_runner", "return worker.model_runner"),
    ),
]


def rule_mutants(patched_srt: Path) -> list[Mutant]:
    texts = {file: (patched_srt / file).read_text() for file in (CONTRACT, PARSER)}
    mutants = []
    for name, description, build in RULE_MUTATIONS:
        file = PARSER if name.startswith(PARSER_RULES) else CONTRACT
        mutants.append(
            Mutant(
                name=f"rule {name}",
                family="rule",
                description=description,
                file=file,
                text=_checked(build(texts[file]), name),
            )
        )
    seen: dict[str, int] = {}
    # the parser's refusals first, as they stood when it lived in eagle_info.py
    for file in (PARSER, CONTRACT):
        text = texts[file]
        raises = _raises(text)
        if not raises:
            raise MutantError(f"{file}: no refusal in the inserted helpers")
        for function, node in raises:
            key = _refused_key(text, node)
            label = f"{function} ({key})" if key else function
            seen[label] = seen.get(label, 0) + 1
            name = f"rule refusal off: {label}"
            if seen[label] > 1:
                name += f" #{seen[label]}"
            mutants.append(
                Mutant(
                    name=name,
                    family="rule",
                    description=f"{file}:{node.lineno}: the raise in {function} "
                    "becomes pass",
                    file=file,
                    text=_checked(_replace_statements(text, [node], "pass"), name),
                )
            )
    return mutants


#: The EAGLE workers whose __init__ checks the drafter and parses it (issue 11's start-up).
START_UP_WORKERS = {
    "speculative/eagle_worker.py": "EAGLEWorker",
    "speculative/eagle_worker_v2.py": "EagleDraftWorker",
    "speculative/multi_layer_eagle_worker.py": "MultiLayerEagleWorker",
    "speculative/multi_layer_eagle_worker_v2.py": "MultiLayerEagleDraftWorker",
}


def start_up_mutants(pristine_srt: Path, patched_srt: Path) -> list[Mutant]:
    """For each EAGLE worker: its ``__init__`` put back to 0.5.11's (no validation, the
    flag parsed inline or not at all)."""
    mutants = []
    for file, class_name in START_UP_WORKERS.items():
        pristine_text = (pristine_srt / file).read_text()
        patched_text = (patched_srt / file).read_text()
        old = _function(ast.parse(pristine_text), f"{class_name}.__init__")
        new = _function(ast.parse(patched_text), f"{class_name}.__init__")
        old_source = "".join(
            pristine_text.splitlines(keepends=True)[old.lineno - 1 : old.end_lineno]
        )
        text = _replace_statements(patched_text, [new], old_source)
        name = f"rule start-up: {class_name}.__init__ as in 0.5.11"
        mutants.append(
            Mutant(
                name=name,
                family="rule",
                description=f"{file}: {class_name}.__init__ back to 0.5.11's: the "
                "drafter is not validated, the flag not parsed by the one parser",
                file=file,
                text=_checked(text, name),
            )
        )
    return mutants


# -- path mutants: the code around the sites (issue 14's table) -------------------------------


def _replace_in_function(
    text: str, qualified: str, old: str, new: str, count: int = 1, first: int = -1
) -> str:
    """``text`` with ``old`` replaced by ``new`` inside ``qualified`` only; ``old`` must
    occur exactly ``count`` times there; ``first``: replace only the first n."""
    function = _function(ast.parse(text), qualified)
    start, end = _span(text, function)
    body = text[start:end]
    if body.count(old) != count:
        raise MutantError(f"{qualified}: {old!r} found {body.count(old)} times, not {count}")
    return text[:start] + body.replace(old, new, first) + text[end:]


def _replace_nth_in_function(text: str, qualified: str, old: str, new: str, nth: int) -> str:
    """``text`` with the ``nth`` (1-based) occurrence of ``old`` inside ``qualified``
    replaced by ``new``."""
    function = _function(ast.parse(text), qualified)
    start, end = _span(text, function)
    body = text[start:end]
    parts = body.split(old)
    if len(parts) <= nth:
        raise MutantError(f"{qualified}: {old!r} found {len(parts) - 1} times, not {nth}")
    body = old.join(parts[:nth]) + new + old.join(parts[nth:])
    return text[:start] + body + text[end:]


def _drop_call_statement(text: str, qualified: str, callee: str) -> str:
    """Remove the statement of ``qualified`` that calls ``callee``."""
    function = _function(ast.parse(text), qualified)
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == callee
        ):
            return _replace_statements(text, [node], "pass")
    raise MutantError(f"{qualified}: no statement calls {callee}")


PD_CONDITION_TEXT = (
    "if self.spec_algorithm.is_eagle()\n"
    "                    or self.spec_algorithm.is_standalone()\n"
)

#: (name, description, file under srt/, how to build it from that file's patched text)
PATH_MUTATIONS = [
    (
        "target capture: layer ids shifted by one",
        "ModelRunner.__init__ tells the target to capture each of the drafter's layer ids + 1",
        "model_executor/model_runner.py",
        lambda t: _replace_in_function(
            t,
            "ModelRunner.__init__",
            "draft_model_config.hf_config, self.model_config\n            )",
            "draft_model_config.hf_config, self.model_config\n            ) and [\n"
            "                i + 1\n"
            "                for i in get_eagle_captured_layer_ids(\n"
            "                    draft_model_config.hf_config, self.model_config\n"
            "                )\n"
            "            ]",
        ),
    ),
    (
        "target capture: off without eagle_config",
        "ModelRunner.__init__ turns aux capture off for a drafter without eagle_config",
        "model_executor/model_runner.py",
        lambda t: _replace_in_function(
            t,
            "ModelRunner.__init__",
            "self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(\n"
            "                self.spec_algorithm, draft_model_config.hf_config\n"
            "            )",
            "self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(\n"
            "                self.spec_algorithm, draft_model_config.hf_config\n"
            "            ) and getattr(draft_model_config.hf_config, 'eagle_config', None) is not None",
        ),
    ),
    (
        "PD buffers: both from the target worker",
        "Scheduler.init_disaggregation sizes both servers' buffers from self.tp_worker "
        "(they still agree)",
        "managers/scheduler.py",
        lambda t: _replace_in_function(
            t, "Scheduler.init_disaggregation", "(self.draft_worker)", "(self.tp_worker)", 4
        ),
    ),
    (
        "PD buffers: decode side drops STANDALONE",
        "the decode server's buffer sizes STANDALONE's slot at 16 float32 (width and "
        "dtype alike), the prefill server's at the draft's",
        "managers/scheduler.py",
        lambda t: _replace_in_function(
            t,
            "Scheduler.init_disaggregation",
            PD_CONDITION_TEXT,
            "if self.spec_algorithm.is_eagle()\n",
            count=4,
            first=2,  # the decode server's buffer comes first: its width and dtype
        ),
    ),
    (
        "start-up: MultiLayerEagleWorker skips validation",
        "MultiLayerEagleWorker.__init__ no longer calls validate_eagle_draft_config",
        "speculative/multi_layer_eagle_worker.py",
        lambda t: _drop_call_statement(
            t, "MultiLayerEagleWorker.__init__", "validate_eagle_draft_config"
        ),
    ),
    (
        "start-up: EagleDraftWorker counts the target's layers",
        "EagleDraftWorker.__init__ reads the number of aux layers from the target's config",
        "speculative/eagle_worker_v2.py",
        lambda t: _replace_in_function(
            t,
            "EagleDraftWorker.__init__",
            "get_eagle_num_aux_hidden_states(\n            draft_model_config.hf_config\n",
            "get_eagle_num_aux_hidden_states(\n"
            "            self.target_worker.model_config.hf_config\n",
        ),
    ),
    (
        "idle: EAGLEWorker keeps verify's idle input",
        "EAGLEWorker.forward_draft_extend_after_decode rebuilds only an input that became "
        "idle there (0.5.11's condition), not the one verify made",
        "speculative/eagle_worker.py",
        lambda t: _replace_in_function(
            t,
            "EAGLEWorker.forward_draft_extend_after_decode",
            "        if batch.forward_mode.is_idle():\n",
            "        if not input_is_idle and batch.forward_mode.is_idle():\n",
        ),
    ),
    (
        "start-up: EAGLE drafters keep their own dtype",
        "set_eagle_draft_dtype keeps --dtype auto: a float16 drafter on a bfloat16 target "
        "is built in float16 (issue 16's decision undone)",
        "speculative/eagle_info.py",
        lambda t: _with_body(t, "set_eagle_draft_dtype", "return None"),
    ),
    (
        "start-up: EagleDraftWorker ignores the dtype decision",
        "EagleDraftWorker.__init__ no longer calls set_eagle_draft_dtype",
        "speculative/eagle_worker_v2.py",
        lambda t: _drop_call_statement(
            t, "EagleDraftWorker.__init__", "set_eagle_draft_dtype"
        ),
    ),
    (
        "start-up: EagleDraftWorker builds the draft config twice",
        "EagleDraftWorker.__init__ no longer hands its draft ModelConfig to the draft "
        "TpModelWorker, which builds the same config a second time",
        "speculative/eagle_worker_v2.py",
        lambda t: _replace_in_function(
            t,
            "EagleDraftWorker.__init__",
            "                model_config=draft_model_config,\n",
            "",
        ),
    ),
    (
        "idle: no attention indices",
        "EagleDraftInput.create_idle_input leaves kv_indptr and kv_indices None (issue "
        "18's change undone for every decode and extend idle input)",
        "speculative/eagle_info.py",
        lambda t: _replace_in_function(
            _replace_in_function(
                t,
                "EagleDraftInput.create_idle_input",
                "kv_indptr=torch.zeros((1,), dtype=torch.int32, device=device)",
                "kv_indptr=None",
            ),
            "EagleDraftInput.create_idle_input",
            "kv_indices=torch.empty((0,), dtype=torch.int32, device=device)",
            "kv_indices=None",
        ),
    ),
    (
        "idle: EAGLEWorkerV2 sizes from the target worker",
        "EAGLEWorkerV2.forward_batch_generation sizes its idle input with "
        "self.target_worker",
        "speculative/eagle_worker_v2.py",
        lambda t: _replace_in_function(
            t,
            "EAGLEWorkerV2.forward_batch_generation",
            "(self.draft_worker)",
            "(self.target_worker)",
            2,
        ),
    ),
    (
        "idle: v2 draft-extend input without a pointer row",
        "EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache gives the idle "
        "draft-extend input kv_indptr torch.zeros((0,)) instead of one zero",
        "speculative/eagle_info_v2.py",
        lambda t: _replace_in_function(
            t,
            "EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache",
            "self.kv_indptr = torch.zeros((1,),",
            "self.kv_indptr = torch.zeros((0,),",
        ),
    ),
    (
        "padded draft metadata: built for the unpadded batch",
        "get_draft_decode_metadata_batch gives the batch as it is: the draft steps' metadata "
        "has the rows of the batch before DP attention pads it",
        "speculative/eagle_info.py",
        lambda t: _replace_in_function(
            t,
            "get_draft_decode_metadata_batch",
            "if padded.batch_size == forward_batch.batch_size:",
            "if True:",
        ),
    ),
    (
        "padded idle batch: FlashInfer sums every row",
        "FlashInferIndicesUpdaterDecode.call_begin_forward sums the padded idle batch's "
        "seq_lens_cpu over every row, not the rows the idle input's kv_indptr has",
        "layers/attention/flashinfer_backend.py",
        lambda t: _replace_in_function(
            t,
            "FlashInferIndicesUpdaterDecode.call_begin_forward",
            "seq_lens_cpu[:bs], dim=0",
            "seq_lens_cpu, dim=0",
        ),
    ),
    (
        "PD buffers: prefill side takes the extend width without aux",
        "the prefill server's buffer is sized by the draft-extend width (the target's) "
        "for an EAGLE-3 drafter without aux hidden states, the decode server's by the "
        "draft's",
        "managers/scheduler.py",
        lambda t: _replace_nth_in_function(
            t,
            "Scheduler.init_disaggregation",
            "EagleDraftInput.hidden_size_for(self.draft_worker)",
            "(\n"
            "                        self.tp_worker.model_config.spec_hidden_size\n"
            "                        if self.spec_algorithm.is_eagle3()\n"
            "                        and (getattr(model_config.hf_config, 'eagle_config', None) or {})"
            ".get('use_aux_hidden_state', True) is False\n"
            "                        else EagleDraftInput.hidden_size_for(self.draft_worker)\n"
            "                    )",
            2,  # the decode server's buffer comes first
        ),
    ),
    (
        "drafter fc: only eagle_config's ids",
        "LlamaModel.__init__ sizes fc by the ids in eagle_config only (else 3): ids "
        "declared at the top level of the drafter's config are ignored",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t,
            "LlamaModel.__init__",
            "self.hidden_size_in * get_eagle_num_aux_hidden_states(config)",
            "self.hidden_size_in * len((getattr(config, 'eagle_config', None) or {})"
            ".get('eagle_aux_hidden_state_layer_ids') or [0, 0, 0])",
        ),
    ),
    (
        "norm variant dropped: norm_before_fc",
        "LlamaModel.apply_fc skips input_norm: a norm_before_fc drafter's fc reads the aux "
        "hidden states unnormalized",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t,
            "LlamaModel.apply_fc",
            "hidden_states = self.input_norm(hidden_states)",
            "pass",
        ),
    ),
    (
        "norm variant dropped: fc_norm",
        "LlamaModel.apply_fc skips fc_norm: each aux layer reaches fc unnormalized",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t, "LlamaModel.apply_fc", "if self.fc_norm is not None:", "if False:"
        ),
    ),
    (
        "norm variant dropped: norm_before_residual",
        "the mid layer's residual is the raw hidden states whatever norm_before_residual says",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t, "LlamaDecoderLayer.forward", "if self.norm_before_residual:", "if False:"
        ),
    ),
    (
        "norm variant dropped: norm_output",
        "the next draft step reads the pre-norm hidden states whatever norm_output says",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t, "LlamaModel.forward", "if self.norm_output:", "if False:"
        ),
    ),
    (
        "norm variant: eagle_config not read",
        "get_eagle3_norm_flag reads the top level of the config only: a drafter that keeps "
        "norm_before_fc in eagle_config (NVIDIA's) runs without its input_norm",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t,
            "get_eagle3_norm_flag",
            "value = getattr(config, key, None)",
            "return bool(getattr(config, key, False))",
        ),
    ),
    (
        "speculators weights: layers.0. not read",
        "LlamaForCausalLMEagle3.load_weights skips the decoder layer's weights of a "
        "speculators checkpoint (named layers.0.)",
        "models/llama_eagle3.py",
        lambda t: _replace_in_function(
            t,
            "LlamaForCausalLMEagle3.load_weights",
            'if name.startswith("layers.0."):',
            "if False:",
        ),
    ),
    (
        "speculators config: top-level ids dropped",
        "speculators_eagle3_to_llama_config drops eagle_aux_hidden_state_layer_ids: a "
        "four-layer speculators drafter is read as the default three",
        "utils/hf_transformers/config.py",
        lambda t: _replace_in_function(
            t,
            "speculators_eagle3_to_llama_config",
            'layer_ids = config_dict.get("eagle_aux_hidden_state_layer_ids")',
            "layer_ids = None",
        ),
    ),
    (
        "speculators config: ids renumbered as SGLang's",
        "speculators_eagle3_to_llama_config writes the format's ids minus 1 at the top "
        "level, where ids are hidden-state indices: the target captures the hidden state "
        "before each",
        "utils/hf_transformers/config.py",
        lambda t: _replace_in_function(
            t,
            "speculators_eagle3_to_llama_config",
            "config.eagle_aux_hidden_state_layer_ids = layer_ids\n",
            "config.eagle_aux_hidden_state_layer_ids = [i - 1 for i in layer_ids]\n",
        ),
    ),
]

#: Mutants that are not bugs: the fork's CPU test must pass on them.
FALSE_ALARM_MUTATIONS = [
    (
        "not a bug: a DFLASH buffer",
        "an unrelated DFLASH scratch buffer sized by hidden_size added to dflash_worker.py",
        "speculative/dflash_worker.py",
        lambda t: t.rstrip("\n")
        + "\n\n\ndef _dflash_scratch_buffer(model_config):\n"
        "    return torch.zeros((1, model_config.hidden_size), dtype=model_config.dtype)\n",
    ),
]


# -- benign refactors: what SGLang may do to a patched file without changing a size -------------


def _black(text: str, line_length: int) -> str:
    """The file reformatted by black at another line length."""
    return black.format_str(text, mode=black.Mode(line_length=line_length))


def _swap_or_operands(text: str, qualified: str, reads: str) -> str:
    """Every two-operand ``or`` of ``qualified`` that reads ``.<reads>()``, operands
    swapped (last first, so the earlier positions hold)."""
    function = _function(ast.parse(text), qualified)
    found = [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.BoolOp)
        and isinstance(node.op, ast.Or)
        and len(node.values) == 2
        and any(
            isinstance(n, ast.Attribute) and n.attr == reads for n in ast.walk(node)
        )
    ]
    if not found:
        raise MutantError(f"{qualified}: no `or` reads .{reads}")
    for node in sorted(found, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        first, second = (_source(text, v) for v in node.values)
        text = _replace(text, node, f"{second} or {first}")
    return text


def _rename_local(text: str, qualified: str, old: str, new: str) -> str:
    """``old`` (a parameter or local of ``qualified``) renamed ``new`` in that function,
    wherever it is read or bound (last first, so the earlier positions hold)."""
    function = _function(ast.parse(text), qualified)
    if any(isinstance(n, ast.Name) and n.id == new for n in ast.walk(function)):
        raise MutantError(f"{qualified}: {new} is taken")
    nodes = [
        n
        for n in ast.walk(function)
        if (isinstance(n, ast.Name) and n.id == old)
        or (isinstance(n, ast.arg) and n.arg == old)
    ]
    if not any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) for n in nodes):
        raise MutantError(f"{qualified}: {old} is never bound there")
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        start, end = _span(text, node)
        text = text[:start] + new + text[start + len(old) :]
    return text


def _reverse_keywords(text: str, qualified: str, callee: str) -> str:
    """The keyword arguments of the call to ``<x>.<callee>`` in ``qualified`` in the
    reverse order."""
    function = _function(ast.parse(text), qualified)
    call = next(
        (
            n
            for n in ast.walk(function)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == callee
            and len(n.keywords) > 1
            and not n.args
        ),
        None,
    )
    if call is None:
        raise MutantError(f"{qualified}: no call to .{callee} with keywords")
    start = _span(text, call.keywords[0])[0]
    end = _span(text, call.keywords[-1])[1]
    separator = ",\n" + " " * call.keywords[0].col_offset
    reordered = separator.join(_source(text, k) for k in reversed(call.keywords))
    return text[:start] + reordered + text[end:]


#: Refactors that change no size: the fork's CPU test must pass on them (its structural
#: guard compares syntax trees, not text).
BENIGN_REFACTOR_MUTATIONS = [
    (
        "benign: black at line length 79",
        "managers/scheduler.py (both PD metadata buffers) reformatted by black at line "
        "length 79",
        "managers/scheduler.py",
        lambda t: _black(t, 79),
    ),
    (
        "benign: black at line length 120",
        "speculative/eagle_worker.py (the v1 idle inputs) reformatted by black at line "
        "length 120",
        "speculative/eagle_worker.py",
        lambda t: _black(t, 120),
    ),
    (
        "benign: the PD condition's operands swapped",
        "Scheduler.init_disaggregation tests is_standalone() or is_eagle() for both PD "
        "buffers' width and dtype",
        "managers/scheduler.py",
        lambda t: _swap_or_operands(t, "Scheduler.init_disaggregation", "is_standalone"),
    ),
    (
        "benign: a local renamed",
        "EAGLEWorker.forward_draft_extend_after_decode calls its batch schedule_batch",
        "speculative/eagle_worker.py",
        lambda t: _rename_local(
            t, "EAGLEWorker.forward_draft_extend_after_decode", "batch", "schedule_batch"
        ),
    ),
    (
        "benign: the width bound to a local",
        "EAGLEDraftCudaGraphRunner.__init__ binds the decode width to a local hidden_size "
        "and sizes the hidden-state buffer with it",
        "speculative/eagle_draft_cuda_graph_runner.py",
        lambda t: _replace_in_function(
            t,
            "EAGLEDraftCudaGraphRunner.__init__",
            "            hidden_states = torch.zeros(\n"
            "                (self.max_bs, EagleDraftInput.hidden_size_for(self.eagle_worker)),\n",
            "            hidden_size = EagleDraftInput.hidden_size_for(self.eagle_worker)\n"
            "            hidden_states = torch.zeros(\n"
            "                (self.max_bs, hidden_size),\n",
        ),
    ),
    (
        "benign: keyword arguments reordered",
        "EAGLEWorker._draft_preprocess_idle passes create_idle_input's keyword arguments "
        "in the reverse order",
        "speculative/eagle_worker.py",
        lambda t: _reverse_keywords(t, "EAGLEWorker._draft_preprocess_idle", "create_idle_input"),
    ),
]

#: The families whose mutants are not bugs: the fork's CPU test must pass on them.
NOT_BUGS = ("false alarm", "benign refactor", "equivalent")


def path_mutants(patched_srt: Path) -> list[Mutant]:
    mutants = []
    for family, mutations in (
        ("path", PATH_MUTATIONS),
        ("false alarm", FALSE_ALARM_MUTATIONS),
        ("benign refactor", BENIGN_REFACTOR_MUTATIONS),
    ):
        for name, description, file, build in mutations:
            text = (patched_srt / file).read_text()
            mutated = _checked(build(text), name)
            if mutated == text:
                raise MutantError(f"{name}: the mutation changes nothing")
            mutants.append(Mutant(name, family, description, file, mutated))
    return mutants


def all_mutants(pristine_srt: Path, patched_srt: Path) -> list[Mutant]:
    mutants = (
        site_mutants(pristine_srt, patched_srt)
        + rule_mutants(patched_srt)
        + start_up_mutants(pristine_srt, patched_srt)
        + path_mutants(patched_srt)
    )
    names = [m.name for m in mutants]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise MutantError(f"mutant names are not unique: {sorted(duplicates)}")
    return mutants


# -- mutant trees ----------------------------------------------------------------------------


def mutant_root(patched_root: Path, mutant: Mutant, folder: Path) -> Path:
    """A folder holding ``sglang/``: symlinks to ``patched_root/sglang`` except along the
    mutated file's path, where the folders are real and the file is the mutant's."""
    parts = ("sglang", "srt", *mutant.file.split("/"))
    source, target = patched_root, folder
    target.mkdir(parents=True)
    for depth, part in enumerate(parts):
        source, target = source / part, target / part
        if depth == len(parts) - 1:
            target.write_text(mutant.text)
            break
        target.mkdir()
        for entry in os.listdir(source):
            if entry != parts[depth + 1]:
                os.symlink(source / entry, target / entry)
    return folder


# -- running the fork's test file --------------------------------------------------------------

#: the harness the fork's CPU tests import (``fork_test_slices.HARNESS_PACKAGE``), as this
#: package ships it
HARNESS = (
    Path(inserted.__file__).resolve().parent / "inserted_tests" / fork_test_slices.HARNESS_DIR
)


def with_harness(root: Path, folder: Path, harness: Path = HARNESS) -> Path:
    """A folder holding ``sglang/`` to run the fork's CPU tests on ``root/sglang`` (a
    package, which ``apply`` gives no tests, or a checkout's ``python/``): symlinks to it,
    with real folders down to the harness's and the harness's modules copied there from
    ``harness``, as ``apply`` adds them to a checkout."""
    parts = fork_test_slices.HARNESS_PACKAGE.split(".")
    source, target = root, folder
    target.mkdir(parents=True)
    for depth, part in enumerate(parts):
        source, target = source / part, target / part
        if depth == len(parts) - 1:
            target.mkdir()
            for module in harness.glob("*.py"):
                shutil.copyfile(module, target / module.name)
            break
        target.mkdir()
        if source.is_dir():
            for entry in os.listdir(source):
                if entry != parts[depth + 1]:
                    os.symlink(source / entry, target / entry)
    return folder


#: runs a folder of test files in one process (``run_test_file``)
RUN_FORK_TESTS = Path(__file__).resolve().parent / "run_fork_tests.py"

FAILED_TEST = re.compile(r"^(?:FAIL|ERROR): (\w+) \((?:[\w.]+\.)?(\w+)\.\w+\)", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    returncode: int
    #: ``Class.test`` of every failed or erroring test; the import when the file did not load
    failed: tuple[str, ...]
    seconds: float
    output: str

    @property
    def tests_ran(self) -> int:
        match = re.search(r"^Ran (\d+) tests? in", self.output, re.MULTILINE)
        return int(match.group(1)) if match else 0


def run_test_file(
    root: Path,
    test_file: Path,
    timeout: int = 600,
    libcuda: Path | None = None,
    runner: Path | None = None,
) -> Run:
    """``python3 <test_file>`` with ``root`` (holding ``sglang/``) first on the path, as
    SGLang's CI runs a registered test; no network. A folder (the fork's CPU tests) runs
    all its ``test_*.py`` files in one process and one unittest suite
    (``run_fork_tests.py``, each file loaded as ``python3 <file>`` loads it). Without
    ``libcuda`` (a folder holding the libcuda stub) sgl_kernel cannot load, as on SGLang's
    CPU runners. ``runner``: a script that runs the file or folder (``python3 <runner>
    <test_file>``), e.g. ``older_release_compat.py`` for a release before 0.5.11."""
    if runner is None and Path(test_file).is_dir():
        runner = RUN_FORK_TESTS
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(PYTHONPATH=str(root), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if libcuda is not None:
        env["LD_LIBRARY_PATH"] = str(libcuda)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, *([str(runner)] if runner else []), str(test_file)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - start
    output = result.stdout + result.stderr
    failed = tuple(
        dict.fromkeys(f"{cls}.{test}" for test, cls in FAILED_TEST.findall(output))
    )
    if result.returncode != 0 and not failed:
        failed = ("(the file does not load)",)
    return Run(result.returncode, failed, seconds, output)


# -- the table in docs/fork-tests.md ----------------------------------------------------------

TABLE_START = "<!-- mutation table: generated by test/test_fork_tests.py -->"
TABLE_END = "<!-- end of mutation table -->"


def mutation_table(results: list[tuple[Mutant, Run]]) -> str:
    """Markdown: every mutant, what it changes, and the tests of the fork's CPU file that
    failed on it (the method names; a class name where the methods share it)."""
    lines = [
        TABLE_START,
        "",
        "| mutant | what it changes | killed by (CPU test) |",
        "| --- | --- | --- |",
    ]
    for mutant, run in results:
        killers = ", ".join(f"`{name.split('.')[-1]}`" for name in sorted(run.failed))
        if mutant.family in NOT_BUGS:
            outcome = "passes (not a bug)" if run.returncode == 0 else f"**false alarm**: {killers}"
        else:
            outcome = killers or "**survived**"
        cells = [
            f"`{mutant.name}`",
            mutant.description.replace("|", "\\|"),
            outcome,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", TABLE_END]
    return "\n".join(lines) + "\n"


def with_table(document: str, table: str) -> str:
    """``document`` with the text between the table markers (inclusive) replaced."""
    start, end = document.find(TABLE_START), document.find(TABLE_END)
    if start < 0 or end < 0:
        raise MutantError("docs/fork-tests.md has no mutation table markers")
    return document[:start] + table + document[end + len(TABLE_END) + 1 :]


def table_rows(document: str) -> list[str]:
    """The rows of the mutation table in ``document`` (between its markers)."""
    start, end = document.find(TABLE_START), document.find(TABLE_END)
    if start < 0 or end < 0:
        raise MutantError("docs/fork-tests.md has no mutation table markers")
    return [line for line in document[start:end].splitlines() if line.startswith("| `")]


def mutant_named(name: str, pristine_srt: Path, patched_srt: Path) -> Mutant:
    """The mutant called ``name``, of any family (site mutants need the pristine tree)."""
    if name.startswith("site "):
        mutants = site_mutants(pristine_srt, patched_srt)
    else:
        mutants = rule_mutants(patched_srt) + path_mutants(patched_srt)
    for mutant in mutants:
        if mutant.name == name:
            return mutant
    raise MutantError(f"no mutant {name!r}")
