"""The rewrite rules of SGLang 0.5.23, one concern each, in the order ``apply`` chains them.

0.5.23 counts an EAGLE-3 drafter's aux hidden states by four rules: the extend helper
(``num_aux_hidden_states``, else ``eagle_config``'s ids, else the top-level ids, else 3),
``llama_eagle3``'s ``fc`` (top-level ids ignored), Kimi-K2.5's ``fc`` (``num_aux_hidden_states``
ignored) and the target's capture (``eagle_config``'s ids only). Each rule here makes one of
them ask ``parse_eagle3_draft_config`` (``inserted.EAGLE3_DRAFT_CONFIG``); the import rule,
last, imports it where it is used.
"""

from __future__ import annotations

import libcst as cst

from .. import concerns
from .. import inserted as shared
from ..engine import Finding, RewriteError, Rule
from ..rules.aux_flag import _contains
from ..rules.eagle3_norm_variants import _assigns, _flat, _line_is
from ..rules.target_capture import CaptureTryRule, layer_ids_owner
from ..syntax import (
    code_of,
    dotted,
    same_expression,
    statement,
    statements,
    statements_with_comments,
    with_comment,
)
from .inserted import (
    CAPTURE,
    DRAFT_DTYPE_FUNCTION,
    DRAFT_DTYPE_HOOK,
    EAGLE3_DRAFT_CONFIG_MODULE,
    FINAL_HIDDEN_STATE_FLAG,
    FINAL_HIDDEN_STATE_TEXT,
    INDICES_FIELD,
    INDICES_FIELD_TEXT,
    NORM_BEFORE_RESIDUAL_FLAG,
    PARSE,
    SPECULATORS_LOADER,
    SPECULATORS_LOADER_FUNCTION,
    VALIDATE,
)
from .sites import (
    AUX_COUNT_BLOCKS,
    AUX_COUNT_FUNCTIONS,
    CAPTURE_CALL,
    CAPTURE_CALLER,
    CAPTURE_CONFIG,
    CONFIG_READ,
    DISAGG_DRAFT_HIDDEN,
    DISAGG_DRAFT_INPUT,
    DISAGG_METADATA_DRAFT,
    DISAGG_PREFILL_DRAFT,
    DRAFT_DTYPE,
    DRAFT_DTYPE_ANCHOR,
    DRAFTER_LAYER,
    FINAL_HIDDEN_STATE_MODELS,
    IDLE_VERIFY_INPUT,
    TARGET_CAPTURE,
)

LABEL = "aux-count"


def _parse_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func) == PARSE


def _calls_parser(node: cst.CSTNode) -> bool:
    return _contains(node, _parse_call)


class _ScopedRule(Rule):
    """A rule owning some ``(file, scope)`` places: ``finish`` fails for a place whose
    function the file does not have (renamed or moved: reported, not skipped)."""

    places: tuple[tuple[str, str], ...] = ()
    #: what is read at the places, for the message when one is not found
    reads = "the aux-layer count is read there"

    def __init__(self, file: str):
        super().__init__(file)
        self.seen: set[str] = set()

    @classmethod
    def _scopes(cls, file: str) -> set[str]:
        return {scope for f, scope in cls.places if f == file}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        if self.scope in self._scopes(self.file):
            self.seen.add(self.scope)
        return True

    def finish(self, module: cst.Module) -> None:
        for scope in sorted(self._scopes(self.file) - self.seen):
            raise RewriteError(
                self.file, 1, f"{scope}: not found ({self.reads})"
            )


class AuxCountBlockRule(_ScopedRule):
    """``num_aux = getattr(<config>, "num_aux_hidden_states", None)`` and the ``if num_aux is
    None:`` block that falls back on the layer ids become one call of the parser."""

    concerns = (concerns.AUX_COUNT,)
    places = AUX_COUNT_BLOCKS
    files = frozenset(f for f, _ in AUX_COUNT_BLOCKS)
    needles = ("num_aux_hidden_states",)

    def __init__(self, file: str):
        super().__init__(file)
        self.found: set[str] = set()

    def leave_IndentedBlock(self, original_node, updated_node):
        scope = self.scope
        if scope not in self._scopes(self.file):
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            target, config = _count_read(stmt)
            if target is None:
                continue
            self.found.add(scope)
            if _calls_parser(stmt):
                self.report(original_node.body[index], LABEL, Finding.ROUTED)
                return updated_node
            fallback = body[index + 1] if index + 1 < len(body) else None
            if not _is_none_fallback(fallback, target):
                raise self.fail(
                    original_node.body[index],
                    f"{scope}: {target} read without the `if {target} is None:` fallback "
                    "the rule knows",
                )
            self.report(original_node.body[index], LABEL, Finding.UNROUTED)
            new = statement(
                f"{target} = {PARSE}(\n    draft_hf_config={config}\n).num_aux_hidden_states\n",
                self.column_of(original_node.body[index]),
            )
            blank = [line for line in stmt.leading_lines if line.comment is None]
            body[index : index + 2] = [new.with_changes(leading_lines=blank)]
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope in self._scopes(self.file) and scope not in self.found:
            raise self.fail(original_node, f"{scope}: the aux-layer count was not found")
        return updated_node


def _count_read(stmt: cst.CSTNode) -> tuple[str | None, str | None]:
    """(``num_aux``, ``<config>``) for ``num_aux = getattr(<config>, "num_aux_hidden_states",
    None)`` or the routed ``num_aux = parse_eagle3_draft_config(draft_hf_config=<config>)
    .num_aux_hidden_states``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None, None
    small = stmt.body[0]
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
        return None, None
    target, value = dotted(small.targets[0].target), small.value
    if target is None:
        return None, None
    if (
        isinstance(value, cst.Call)
        and dotted(value.func) == "getattr"
        and len(value.args) >= 2
        and isinstance(value.args[1].value, cst.SimpleString)
        and value.args[1].value.evaluated_value == "num_aux_hidden_states"
    ):
        return target, code_of(value.args[0].value)
    if (
        isinstance(value, cst.Attribute)
        and value.attr.value == "num_aux_hidden_states"
        and _parse_call(value.value)
    ):
        return target, code_of(value.value.args[0].value)
    return None, None


def _is_none_fallback(stmt: cst.CSTNode | None, target: str) -> bool:
    return (
        isinstance(stmt, cst.If)
        and stmt.orelse is None
        and isinstance(stmt.test, cst.Comparison)
        and dotted(stmt.test.left) == target
        and len(stmt.test.comparisons) == 1
        and isinstance(stmt.test.comparisons[0].operator, cst.Is)
        and dotted(stmt.test.comparisons[0].comparator) == "None"
    )


class AuxCountFunctionRule(_ScopedRule):
    """A function that counts the layer ids itself returns the parser's count (its
    docstring kept)."""

    concerns = (concerns.AUX_COUNT,)
    places = AUX_COUNT_FUNCTIONS
    files = frozenset(f for f, _ in AUX_COUNT_FUNCTIONS)
    needles = ("eagle_aux_hidden_state_layer_ids", PARSE)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope not in self._scopes(self.file):
            return updated_node
        params = original_node.params.params
        body = list(updated_node.body.body)
        docstring = body[:1] if body and _is_docstring(body[0]) else []
        if _calls_parser(updated_node.body):
            self.report(original_node, LABEL, Finding.ROUTED, scope)
            return updated_node
        if not params or not _contains(updated_node.body, _reads_layer_ids):
            raise self.fail(original_node, f"{scope}: the aux-layer count was not found")
        self.report(original_node, LABEL, Finding.UNROUTED, scope)
        config = params[0].name.value
        column = self.column_of(original_node) + 4
        new = statement(
            f"return {PARSE}(draft_hf_config={config}).num_aux_hidden_states\n", column
        )
        return updated_node.with_changes(
            body=updated_node.body.with_changes(body=[*docstring, new])
        )


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _reads_layer_ids(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleString)
        and node.evaluated_value == "eagle_aux_hidden_state_layer_ids"
    )


class TargetCaptureRule(CaptureTryRule):
    """The target captures what the parser reads: 0.5.11's rule (``rules/target_capture.py``)
    on 0.5.23's place, with the parser's three lines for the ``= True`` default and the
    ``try: eagle_config.get(...) ... except Exception:`` after it."""

    concerns = (concerns.TOP_LEVEL_LAYER_IDS,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = ("eagle_aux_hidden_state_layer_ids",)
    place = TARGET_CAPTURE

    def routed(self, stmt: cst.CSTNode) -> bool:
        return _parsed_into(stmt) is not None

    def replacement(self, owner: str, hf_config: str) -> str:
        return (
            f"eagle3_draft_config = {PARSE}(\n"
            f"    draft_hf_config={hf_config}\n"
            ")\n"
            f"{owner}.eagle_use_aux_hidden_state = eagle3_draft_config.use_aux_hidden_state\n"
            f"{owner}.eagle_aux_hidden_state_layer_ids = (\n"
            "    eagle3_draft_config.aux_hidden_state_layer_ids\n"
            ")\n"
            + (
                f"{owner}.{INDICES_FIELD} = (\n"
                "    eagle3_draft_config.aux_hidden_state_indices\n"
                ")\n"
                if concerns.enabled(concerns.SPECULATORS_EAGLE3)
                else ""
            )
        )


class DraftCheckRule(_ScopedRule):
    """The target checks the drafter it captures for, right after parsing its config
    (before any weights load): ``validate_eagle3_draft_config``."""

    concerns = (concerns.DRAFT_CHECK,)
    places = (TARGET_CAPTURE,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = ("eagle_aux_hidden_state_layer_ids",)

    def __init__(self, file: str):
        super().__init__(file)
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        if self.scope == TARGET_CAPTURE[1]:
            names = {p.name.value for p in (*node.params.params, *node.params.kwonly_params)}
            if TARGET_MODEL_CONFIG not in names:
                raise self.fail(node, f"{self.scope}: no {TARGET_MODEL_CONFIG} parameter")
        return True

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != TARGET_CAPTURE[1]:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if _contains(stmt, _validate_call):
                self.found = True
                self.report(original_node.body[min(index, len(original_node.body) - 1)], LABEL_CHECK, Finding.ROUTED)
                return updated_node
        for index, stmt in enumerate(body):
            parsed = _parsed_into(stmt)
            if parsed is None and not (
                isinstance(stmt, cst.Try) and layer_ids_owner(stmt) is not None
            ):
                continue
            self.found = True
            if index < len(original_node.body):
                self.report(original_node.body[index], LABEL_CHECK, Finding.UNROUTED)
            if parsed is None:  # the check pass: the capture is not parsed yet
                return updated_node
            name, source = parsed
            new = statement(
                f"{VALIDATE}(\n"
                f"    {name},\n"
                f"    draft_hf_config={source},\n"
                f"    target_hf_config={TARGET_MODEL_CONFIG}.hf_text_config,\n"
                ")\n",
                self.column_of(original_node) + 4,
            )
            body.insert(index + 1, new)
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == TARGET_CAPTURE[1] and not self.found:
            raise self.fail(original_node, f"{scope}: the drafter's config was not found")
        return updated_node


class DraftDtypeRule(Rule):
    """``_handle_eagle_family`` decides the draft's dtype at ``--dtype auto`` right after its
    other per-drafter decision (``_handle_iquest_q1_mtp_draft``): the function
    ``inserted.DRAFT_DTYPE_FUNCTION`` after that one's definition, its call after that call."""

    concerns = (concerns.DRAFT_DTYPE,)
    files = frozenset({DRAFT_DTYPE[0]})
    needles = (DRAFT_DTYPE_ANCHOR,)

    def __init__(self, file: str):
        super().__init__(file)
        self.called = False

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != DRAFT_DTYPE[1]:
            return updated_node
        body = list(updated_node.body)
        calls = [i for i, stmt in enumerate(body) if _calls_only(stmt, DRAFT_DTYPE_ANCHOR)]
        if len(calls) != 1:
            return updated_node
        self.called = True
        index = calls[0]
        if index + 1 < len(body) and _calls_only(body[index + 1], DRAFT_DTYPE_HOOK):
            self.report(original_node.body[index], LABEL_DTYPE, Finding.ROUTED)
            return updated_node
        self.report(original_node.body[index], LABEL_DTYPE, Finding.UNROUTED)
        body.insert(index + 1, statement(f"{DRAFT_DTYPE_HOOK}(server_args)\n"))
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node, updated_node):
        if not self.called:
            raise self.fail(
                original_node,
                f"{DRAFT_DTYPE[1]}: no {DRAFT_DTYPE_ANCHOR}(server_args) call to follow",
            )
        body = list(updated_node.body)
        names = [getattr(stmt, "name", None) for stmt in body]
        defined = [i for i, n in enumerate(names) if n is not None and n.value == DRAFT_DTYPE_ANCHOR]
        if any(n is not None and n.value == DRAFT_DTYPE_HOOK for n in names):
            return updated_node
        if len(defined) != 1:
            raise self.fail(original_node, f"no top-level def {DRAFT_DTYPE_ANCHOR}")
        new = cst.parse_module(DRAFT_DTYPE_FUNCTION.lstrip("\n")).body[0]
        body.insert(defined[0] + 1, new.with_changes(leading_lines=_two_blank_lines()))
        return updated_node.with_changes(body=body)


def _two_blank_lines():
    return [cst.EmptyLine(), cst.EmptyLine()]


def _calls_only(stmt: cst.CSTNode, name: str) -> bool:
    """``stmt`` is ``name(server_args)`` alone (its result unused)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.Call)
        and dotted(stmt.body[0].value.func) == name
    )


def _converter() -> list[cst.BaseStatement]:
    """0.5.11's converter of the format (``speculators_eagle3_to_llama_config``), alone."""
    module = cst.parse_module(shared.SPECULATORS_CONFIG_FUNCTIONS.strip() + "\n")
    return [
        f
        for f in module.body
        if isinstance(f, cst.FunctionDef) and f.name.value == CONVERTER
    ]


CONVERTER = "speculators_eagle3_to_llama_config"


class SpeculatorsConfigRule(_ScopedRule):
    """EAGLE-3 drafters saved by the speculators library (no ``model_type``: ``AutoConfig``
    refuses them) read as their ``LlamaForCausalLMEagle3`` config: one more
    ``if config is None: config = _try_load_speculators_eagle3_config(...)`` in
    ``HfModelConfigParser.parse``, right before the one that calls ``AutoConfig``, the
    function (``inserted.SPECULATORS_LOADER_FUNCTION``) and the format's converter defined
    before the parser class."""

    concerns = (concerns.SPECULATORS_EAGLE3,)
    files = frozenset({CONFIG_READ[0]})
    places = (CONFIG_READ,)
    needles = (shared.AUTO_CONFIG_CALL, SPECULATORS_LOADER)
    reads = "the config is read there"

    def __init__(self, file: str):
        super().__init__(file)
        self.found = False

    @staticmethod
    def _fallback_to(stmt: cst.CSTNode, name: str) -> bool:
        # `if config is None: config = <name>(...)`
        return (
            isinstance(stmt, cst.If)
            and same_expression(stmt.test, "config is None")
            and len(stmt.body.body) == 1
            and _contains(stmt.body, lambda n: isinstance(n, cst.Call) and dotted(n.func) == name)
        )

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != CONFIG_READ[1]:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if self._fallback_to(stmt, SPECULATORS_LOADER):
                self.found = True
                self.report(original_node.body[index], LABEL_SPECULATORS, Finding.ROUTED)
                return updated_node
        for index, stmt in enumerate(body):
            if not self._fallback_to(stmt, shared.AUTO_CONFIG_CALL):
                continue
            self.found = True
            self.report(original_node.body[index], LABEL_SPECULATORS, Finding.UNROUTED)
            new = statement(
                "if config is None:\n"
                f"    config = {SPECULATORS_LOADER}(model, revision, **kwargs)\n",
                self.column_of(original_node.body[index]),
            )
            body.insert(index, new)
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_Module(self, original_node, updated_node):
        if not self.found:
            raise self.fail(
                original_node,
                f"{CONFIG_READ[1]}: no `if config is None:` fallback to "
                f"{shared.AUTO_CONFIG_CALL}",
            )
        body = list(updated_node.body)
        names = [getattr(stmt, "name", None) for stmt in body]
        values = [n.value for n in names if n is not None]
        if SPECULATORS_LOADER in values:
            return updated_node
        owner = CONFIG_READ[1].split(".")[0]
        if values.count(owner) != 1:
            raise self.fail(original_node, f"no top-level class {owner}")
        index = next(i for i, n in enumerate(names) if n is not None and n.value == owner)
        loader = cst.parse_module(SPECULATORS_LOADER_FUNCTION.strip() + "\n").body
        functions = [
            f.with_changes(leading_lines=_two_blank_lines()) for f in [*_converter(), *loader]
        ]
        body[index:index] = functions
        body[index + len(functions)] = body[index + len(functions)].with_changes(
            leading_lines=_two_blank_lines()
        )
        return updated_node.with_changes(body=body)


class NormBeforeResidualRule(_ScopedRule):
    """The EAGLE-3 drafter's input layer takes its residual after ``hidden_norm`` when the
    config says ``norm_before_residual``: the flag read after ``self.hidden_norm = ...`` in
    ``LlamaDecoderLayer.__init__`` (``NORM_BEFORE_RESIDUAL_FLAG``), and 0.5.11's two lines
    (``inserted.NORM_BEFORE_RESIDUAL``) after ``hidden_states = self.hidden_norm(hidden_states)``
    in ``forward``'s ``if self.is_input_layer:`` branch, right after ``residual =
    hidden_states``. Any other shape is reported: the rule does not guess the residual."""

    concerns = (concerns.SPECULATORS_NORMS,)
    files = frozenset({DRAFTER_LAYER[0]})
    places = (
        (DRAFTER_LAYER[0], f"{DRAFTER_LAYER[1]}.__init__"),
        (DRAFTER_LAYER[0], f"{DRAFTER_LAYER[1]}.forward"),
    )
    reads = "norm_before_residual is read there"
    # No needle: a file without `hidden_norm` is reported by the places, not skipped.

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        init, forward = (scope_ for _, scope_ in self.places)
        if scope == init:
            return self._after(
                scope, original_node, updated_node,
                lambda s: _assigns(s, "self.hidden_norm"), NORM_BEFORE_RESIDUAL_FLAG,
                "no `self.hidden_norm = ...` to read norm_before_residual after",
            )
        if scope == forward:
            branch = _input_layer_branch(updated_node.body.body)
            if branch is None:
                raise self.fail(
                    original_node,
                    f"{scope}: no `if self.is_input_layer:` branch (the input layer's "
                    "residual is chosen there)",
                )
            index, branch = branch
            original_branch = original_node.body.body[index]
            new_branch = self._after(
                scope, original_branch, branch, _normed_after_raw_residual(branch),
                shared.NORM_BEFORE_RESIDUAL,
                "the input layer's branch does not take `residual = hidden_states` then "
                "`hidden_states = self.hidden_norm(hidden_states)`",
            )
            body = list(updated_node.body.body)
            body[index] = new_branch
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        return updated_node

    def _after(self, scope, original_node, updated_node, is_anchor, source, missing):
        """``source`` right after the one statement of ``updated_node``'s block that
        ``is_anchor``."""
        body = list(updated_node.body.body)
        anchors = [i for i, stmt in enumerate(body) if is_anchor(stmt)]
        if len(anchors) != 1:
            raise self.fail(original_node, f"{scope}: {missing}")
        (index,) = anchors
        original = original_node.body.body[index]
        new = statements_with_comments(source, self.column_of(original))
        following = body[index + 1 : index + 1 + len(new)]
        if [_flat(s.with_changes(leading_lines=[])) for s in following] == [
            _flat(s.with_changes(leading_lines=[])) for s in new
        ]:
            self.report(original, LABEL_NORMS, Finding.ROUTED, scope)
            return updated_node
        self.report(original, LABEL_NORMS, Finding.UNROUTED, scope)
        body[index + 1 : index + 1] = new
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def _input_layer_branch(body) -> tuple[int, cst.If] | None:
    """(index, the statement) of the one top-level ``if self.is_input_layer:``."""
    found = [
        (i, stmt)
        for i, stmt in enumerate(body)
        if isinstance(stmt, cst.If) and dotted(stmt.test) == "self.is_input_layer"
    ]
    return found[0] if len(found) == 1 else None


def _normed_after_raw_residual(branch: cst.If):
    """The anchor of the input layer's branch: ``hidden_states =
    self.hidden_norm(hidden_states)`` right after ``residual = hidden_states``."""
    body = list(branch.body.body)

    def is_anchor(stmt):
        index = body.index(stmt)
        return (
            index > 0
            and _line_is(stmt, "hidden_states = self.hidden_norm(hidden_states)")
            and _line_is(body[index - 1], "residual = hidden_states")
        )

    return is_anchor


LABEL_NORMS = "norm-before-residual"
LABEL_SPECULATORS = "speculators-config"
LABEL_DTYPE = "draft-dtype"
LABEL_CHECK = "draft-check"
TARGET_MODEL_CONFIG = "model_config"


def _validate_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func) == VALIDATE


def _parsed_into(stmt: cst.CSTNode) -> tuple[str, str] | None:
    """(``name``, ``<config>``) for ``name = parse_eagle3_draft_config(draft_hf_config=<config>)``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and _parse_call(small.value)
        and small.value.args
    ):
        return small.targets[0].target.value, code_of(small.value.args[0].value)
    return None


class ParserImportRule(Rule):
    """``from sglang.srt.speculative.eagle3_draft_config import ...`` what the module calls
    of it and does not import: added to that import, else a new one among the module's
    top-level ``sglang`` imports, in isort's order."""

    follows_others = True
    needles = (PARSE, CAPTURE)

    def leave_Module(self, original_node, updated_node):
        used = {name for name in PROVIDED if _contains(updated_node, _calls_to(name))}
        body = list(updated_node.body)
        position = None
        for index, stmt in enumerate(body):
            module = _top_level_sglang_import(stmt)
            if module == EAGLE3_DRAFT_CONFIG_MODULE:
                imported = {dotted(a.name) for a in stmt.body[0].names}
                if used <= imported:
                    return updated_node
                body[index] = _import(used | imported).with_changes(
                    leading_lines=stmt.leading_lines
                )
                return updated_node.with_changes(body=body)
            if module is None:
                continue
            if module > EAGLE3_DRAFT_CONFIG_MODULE:
                position = index if position is None or position <= index else position
                break
            position = index + 1
        if not used:
            return updated_node
        if position is None:
            raise self.fail(original_node, "no top-level sglang import to place the parser's by")
        body.insert(position, _import(used))
        return updated_node.with_changes(body=body)


PROVIDED = (PARSE, VALIDATE, CAPTURE)


def _calls_to(name: str):
    def predicate(node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and dotted(node.func) == name

    return predicate


def _import(names: set[str]) -> cst.BaseStatement:
    return statement(f"from {EAGLE3_DRAFT_CONFIG_MODULE} import {', '.join(sorted(names))}\n")


def _top_level_sglang_import(stmt: cst.CSTNode) -> str | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            module = dotted(small.module)
            if module and module.startswith("sglang."):
                return module
    return None


LABEL_DISAGG = "standalone-disagg"
LABEL_IDLE_VERIFY = "idle-verify-kv"


class _OneStatementRule(_ScopedRule):
    """A rule owning one place, ``(file, scope)``: ``rewrite`` returns the statements that
    replace one of the scope's statements (``None``: not the statement it looks for), or
    raises for a statement of a shape it does not know; ``routed`` says whether a statement is
    already the rewritten one. The place must hold exactly one of either. A rewrite's first
    statement keeps the leading lines of the one it replaces, before its own."""

    place: tuple[str, str] = ("", "")
    label = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.files = frozenset({cls.place[0]})  # the one file it reads: its place's

    def __init__(self, file: str):
        super().__init__(file)
        self.hits = 0
        # statements already rewritten that enclose the block being left
        self.inside_routed = 0

    @classmethod
    def _scopes(cls, file: str) -> set[str]:
        return {cls.place[1]} if file == cls.place[0] else set()

    def visit_If(self, node: cst.If) -> bool | None:
        if self.scope == self.place[1] and self.routed(node):
            self.inside_routed += 1
        return True

    def leave_If(self, original_node, updated_node):
        if self.scope == self.place[1] and self.routed(original_node):
            self.inside_routed -= 1
        return updated_node

    def finish(self, module: cst.Module) -> None:
        for scope in sorted(self._scopes(self.file) - self.seen):
            raise RewriteError(self.file, 1, f"{scope}: not found (the {self.label} change)")

    def routed(self, stmt: cst.CSTNode) -> bool:
        raise NotImplementedError

    def rewrite(self, stmt: cst.CSTNode, column: int) -> list[cst.BaseStatement] | None:
        raise NotImplementedError

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != self.place[1]:
            return updated_node
        if self.inside_routed:
            return updated_node
        body: list[cst.BaseStatement] = []
        for stmt, updated in zip(original_node.body, updated_node.body):
            if self.routed(stmt):
                self.hits += 1
                self.report(stmt, self.label, Finding.ROUTED)
                body.append(updated)
                continue
            new = self.rewrite(stmt, self.column_of(stmt))
            if new is None:
                body.append(updated)
                continue
            self.hits += 1
            self.report(stmt, self.label, Finding.UNROUTED)
            new[0] = new[0].with_changes(
                leading_lines=[*stmt.leading_lines, *new[0].leading_lines]
            )
            body.extend(new)
        return updated_node.with_changes(body=body)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == self.place[1] and self.hits != 1:
            raise self.fail(
                original_node,
                f"{scope}: {self.hits} places of the {self.label} change, the rule knows one",
            )
        return updated_node


def _assigns_attribute(block: cst.BaseSuite, owner: str, attr: str) -> bool:
    """One of the statements of ``block`` (not of a block nested in it) assigns
    ``owner.attr``."""
    return any(
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Assign)
        and any(dotted(t.target) == f"{owner}.{attr}" for t in stmt.body[0].targets)
        for stmt in getattr(block, "body", ())
    )


class PrefillDraftProposalRule(_OneStatementRule):
    """The prefill server hands each request the draft proposal of every algorithm whose draft
    state is top-k proposals (``need_topk()``: EAGLE and STANDALONE), not of ``is_eagle()``
    alone; its hidden states only when it made some (STANDALONE makes none)."""

    concerns = (concerns.STANDALONE_DISAGG,)
    place = DISAGG_PREFILL_DRAFT
    label = LABEL_DISAGG

    def routed(self, stmt):
        return (
            isinstance(stmt, cst.If)
            and _assigns_attribute(stmt.body, "req", "output_topk_p")
            and same_expression(stmt.test, f"{ALGORITHM}.need_topk() and draft_input is not None")
        )

    def rewrite(self, stmt, column):
        if not (isinstance(stmt, cst.If) and _assigns_attribute(stmt.body, "req", "output_topk_p")):
            return None
        if not same_expression(stmt.test, f"{ALGORITHM}.is_eagle() and draft_input is not None"):
            raise self.fail(stmt, f"{self.scope}: the draft proposal is handed over under an "
                            f"unknown condition ({code_of(stmt.test)})")
        body = list(stmt.body.body)
        hidden = [
            i for i, s in enumerate(body)
            if isinstance(s, cst.SimpleStatementLine)
            and _assigns_attribute(cst.IndentedBlock(body=[s]), "req", "hidden_states_tensor")
        ]
        if len(hidden) != 1 or not same_expression(
            body[hidden[0]].body[0].value, "draft_hidden_states_cpu[i].clone()"
        ):
            raise self.fail(stmt, f"{self.scope}: the hidden states handed over are not "
                            "draft_hidden_states_cpu[i].clone()")
        body[hidden[0]] = statement(
            "req.hidden_states_tensor = (\n"
            "    draft_hidden_states_cpu[i].clone()\n"
            "    if draft_hidden_states_cpu is not None\n"
            "    else None\n"
            ")\n",
            column + 4,
        ).with_changes(leading_lines=body[hidden[0]].leading_lines)
        test = cst.parse_expression(f"{ALGORITHM}.need_topk() and draft_input is not None")
        return [
            stmt.with_changes(
                test=test, body=stmt.body.with_changes(body=body), leading_lines=[]
            )
        ]


ALGORITHM = "self.spec_algorithm"


class MetadataDraftProposalRule(_OneStatementRule):
    """``MetadataBuffers.set_buf`` copies a request's draft proposal when it has one, its
    hidden states when it has those: the release's one ``if req.hidden_states_tensor is not
    None:`` becomes two, the top-k copies under ``if req.output_topk_p is not None:``."""

    concerns = (concerns.STANDALONE_DISAGG,)
    place = DISAGG_METADATA_DRAFT
    label = LABEL_DISAGG

    def routed(self, stmt):
        return (
            isinstance(stmt, cst.If)
            and same_expression(stmt.test, "req.output_topk_p is not None")
            and stmt.orelse is None
        )

    def rewrite(self, stmt, column):
        if not (
            isinstance(stmt, cst.If)
            and same_expression(stmt.test, "req.hidden_states_tensor is not None")
            and _assigns_into(stmt.body, "self.output_topk_p")
        ):
            return None
        body = list(stmt.body.body)
        first_hidden = next(
            (i for i, s in enumerate(body) if _mentions(s, "hidden_states_tensor")), None
        )
        topk, hidden = body[:first_hidden], body[first_hidden:] if first_hidden else []
        if (
            stmt.orelse is not None
            or first_hidden is None
            or not all(_mentions_proposal(s) for s in topk)
            or not _assigns_into(cst.IndentedBlock(body=topk), "self.output_topk_index")
            or any(_mentions_proposal(s) for s in hidden)
        ):
            raise self.fail(stmt, f"{self.scope}: the copies of the draft proposal and of the "
                            "hidden states are not in the order the rule knows")
        hidden[0] = hidden[0].with_changes(leading_lines=[])
        proposal = stmt.with_changes(
            leading_lines=[],
            test=cst.parse_expression("req.output_topk_p is not None"),
            body=stmt.body.with_changes(body=topk),
        )
        states = stmt.with_changes(
            test=cst.parse_expression("req.hidden_states_tensor is not None"),
            body=stmt.body.with_changes(body=hidden),
            leading_lines=[],
        )
        return [proposal, states]


def _mentions_proposal(stmt: cst.CSTNode) -> bool:
    return _mentions(stmt, "output_topk_p") or _mentions(stmt, "output_topk_index")


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return _contains(
        node,
        lambda n: (isinstance(n, cst.Name) and n.value == name)
        or (isinstance(n, cst.Attribute) and n.attr.value == name),
    )


def _assigns_into(node: cst.CSTNode, buffer: str) -> bool:
    """``node`` calls ``<buffer>[...].copy_(...)``."""

    def predicate(n: cst.CSTNode) -> bool:
        return (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "copy_"
            and isinstance(n.func.value, cst.Subscript)
            and dotted(n.func.value.value) == buffer
        )

    return _contains(node, predicate)


HIDDEN_STATES_FLAG = "with_hidden_states"


class DisaggDraftInputRule(_OneStatementRule):
    """``SpeculativeAlgorithm.build_disagg_draft_input`` builds STANDALONE's first decode draft
    input as EAGLE's (STANDALONE runs the EAGLE worker): the ``if self.is_eagle():`` that
    calls ``build_eagle_disagg_draft_input`` becomes ``if self.need_topk():``, and the call
    says whether the algorithm's draft input carries hidden states."""

    concerns = (concerns.STANDALONE_DISAGG,)
    place = DISAGG_DRAFT_INPUT
    label = LABEL_DISAGG
    FLAG = f"{HIDDEN_STATES_FLAG}=self.carries_draft_hidden_states()"

    def _builds_eagle_input(self, stmt) -> bool:
        return isinstance(stmt, cst.If) and _mentions(stmt.body, DISAGG_DRAFT_HIDDEN[1])

    def routed(self, stmt):
        return self._builds_eagle_input(stmt) and same_expression(
            stmt.test, "self.need_topk()"
        )

    def rewrite(self, stmt, column):
        if not self._builds_eagle_input(stmt):
            return None
        if not same_expression(stmt.test, "self.is_eagle()"):
            raise self.fail(stmt, f"{self.scope}: EAGLE's draft input is built under an "
                            f"unknown condition ({code_of(stmt.test)})")
        body = list(stmt.body.body)
        last = body[-1]
        call = (
            last.body[0].value
            if isinstance(last, cst.SimpleStatementLine)
            and isinstance(last.body[0], cst.Return)
            else None
        )
        if not (isinstance(call, cst.Call) and dotted(call.func) == DISAGG_DRAFT_HIDDEN[1]):
            raise self.fail(stmt, f"{self.scope}: EAGLE's draft input is not returned by "
                            f"one call of {DISAGG_DRAFT_HIDDEN[1]}")
        args = ", ".join(code_of(arg.value) if arg.keyword is None else
                         f"{arg.keyword.value}={code_of(arg.value)}" for arg in call.args)
        body[-1] = statement(
            f"return {DISAGG_DRAFT_HIDDEN[1]}(\n"
            f"    {args},\n"
            f"    {self.FLAG},\n"
            ")\n",
            column + 4,
        ).with_changes(leading_lines=last.leading_lines)
        new = stmt.with_changes(
            test=cst.parse_expression("self.need_topk()"),
            body=stmt.body.with_changes(body=body),
            leading_lines=[],
        )
        return [
            with_comment(
                new,
                "STANDALONE runs the EAGLE worker: its first decode drafts from the",
                "proposal the prefill server made, as EAGLE's does.",
            )
        ]


class DisaggDraftHiddenRule(_OneStatementRule):
    """``build_eagle_disagg_draft_input`` takes ``with_hidden_states`` (default ``True``: as
    before) and stacks the requests' hidden states only then: STANDALONE's draft input has
    none, as after its own prefill."""

    concerns = (concerns.STANDALONE_DISAGG,)
    place = DISAGG_DRAFT_HIDDEN
    label = LABEL_DISAGG
    GUARD = HIDDEN_STATES_FLAG

    def routed(self, stmt):
        return (
            isinstance(stmt, cst.If)
            and same_expression(stmt.test, self.GUARD)
            and _mentions(stmt.body, "hidden_states_tensor")
        )

    def rewrite(self, stmt, column):
        if not (isinstance(stmt, cst.SimpleStatementLine) and _mentions(stmt, "hidden_states_tensor")):
            return None
        small = stmt.body[0]
        if not (
            len(stmt.body) == 1
            and isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and dotted(small.targets[0].target) == "hidden_states"
        ):
            raise self.fail(stmt, f"{self.scope}: the hidden states are stacked in a "
                            "statement the rule does not know")
        return statements(
            "hidden_states = None\n"
            f"if {self.GUARD}:\n"
            f"    hidden_states = {code_of(small.value)}\n",
            column,
        )

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope != self.place[1]:
            return updated_node
        params = updated_node.params
        names = [p.name.value for p in (*params.params, *params.kwonly_params)]
        if HIDDEN_STATES_FLAG in names:
            return updated_node
        if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.star_kwarg:
            raise self.fail(original_node, f"{scope}: a signature the rule does not know")
        flag = cst.Param(
            name=cst.Name(HIDDEN_STATES_FLAG),
            annotation=cst.Annotation(cst.Name("bool")),
            default=cst.Name("True"),
        )
        *first, last = params.params
        if not first or not isinstance(last.comma, cst.Comma):
            # black puts one parameter a line, each with its comma, the last one too
            raise self.fail(original_node, f"{scope}: a signature the rule does not know")
        new_params = [
            *first,
            last.with_changes(comma=first[-1].comma),
            flag.with_changes(comma=last.comma),
        ]
        return updated_node.with_changes(params=params.with_changes(params=new_params))


class _ClassRule(Rule):
    """A rule owning classes, ``places`` (``(file, class)`` pairs): ``rewrite_class`` returns a
    class's new body (``None``: unchanged) and reports what it found; a class of a place its
    file does not have fails the rewrite (renamed or moved: reported, not skipped)."""

    places: tuple[tuple[str, str], ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.files = frozenset(f for f, _ in cls.places)  # the files its places name

    def __init__(self, file: str):
        super().__init__(file)
        self.found: set[str] = set()

    def rewrite_class(self, node: cst.ClassDef, body: list) -> list | None:
        raise NotImplementedError

    def leave_ClassDef(self, original_node, updated_node):
        name = original_node.name.value
        updated_node = super().leave_ClassDef(original_node, updated_node)
        if (self.file, name) not in self.places or self._scope:
            return updated_node
        self.found.add(name)
        body = self.rewrite_class(original_node, list(updated_node.body.body))
        if body is None:
            return updated_node
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def leave_Module(self, original_node, updated_node):
        missing = [n for f, n in self.places if f == self.file and n not in self.found]
        if missing:
            raise self.fail(original_node, f"no class {', '.join(missing)}")
        return updated_node


def _fields_of(body: list) -> list[int]:
    """The indices of ``body``'s annotated fields."""
    return [
        i
        for i, s in enumerate(body)
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.AnnAssign)
    ]


class IdleVerifyInputRule(_ClassRule):
    """``EagleVerifyInput`` gets the ``kv_indptr`` / ``kv_indices`` fields (``None``) the
    attention backends read of a decode or idle batch's ``spec_info``, after its last field:
    an idle verify batch padded under DP attention is then laid out from its own rows, as an
    idle draft input's is."""

    concerns = (concerns.IDLE_VERIFY_KV,)
    places = (IDLE_VERIFY_INPUT,)
    FIELDS = ("kv_indptr", "kv_indices")

    def rewrite_class(self, node, body):
        name = node.name.value
        fields = _fields_of(body)
        names = {dotted(body[i].body[0].target) for i in fields}
        if set(self.FIELDS) <= names:
            self.report(node, LABEL_IDLE_VERIFY, Finding.ROUTED, name)
            return None
        if names & set(self.FIELDS) or not fields:
            raise self.fail(node, f"{name}: its fields are not the ones the rule knows")
        self.report(node, LABEL_IDLE_VERIFY, Finding.UNROUTED, name)
        new = statements_with_comments(
            "\n# The attention backends read these of a decode or idle batch's spec_info.\n"
            "# A verify input has no KV layout of its own: an idle verify batch (padded\n"
            "# under DP attention) is laid out from its own rows, as an idle draft input's.\n"
            + "".join(f"{field}: Optional[torch.Tensor] = None\n" for field in self.FIELDS),
            4,
        )
        new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), *new[0].leading_lines])
        body[fields[-1] + 1 : fields[-1] + 1] = new
        return body


LABEL_CAPTURE = "capture-rule"
CLASS_CAPTURE = "set_eagle3_layers_to_capture"
LAYER_IDS_PARAM = "eagle_aux_hidden_state_layer_ids"


def _with_indices() -> bool:
    return concerns.enabled(concerns.SPECULATORS_EAGLE3)


class CaptureCallRule(_OneStatementRule):
    """The built target captures through ``set_eagle3_layers_to_capture`` of the added
    module (its class's own method, then a check of what that captured) instead of calling
    the class's method alone; with the speculators format, given the hidden-state indices
    a speculators drafter declares (a new keyword of ``configure_aux_hidden_state_capture``,
    after the layer ids')."""

    concerns = (concerns.DRAFT_CHECK, concerns.SPECULATORS_EAGLE3)
    place = CAPTURE_CALL
    label = LABEL_CAPTURE
    needles = (CLASS_CAPTURE,)

    def _call(self) -> str:
        extra = f", {INDICES_FIELD}" if _with_indices() else ""
        return f"{CAPTURE}(model, {LAYER_IDS_PARAM}{extra})\n"

    def routed(self, stmt: cst.CSTNode) -> bool:
        return (
            isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and same_expression(stmt.body[0].value, self._call().strip())
        )

    def rewrite(self, stmt: cst.CSTNode, column: int) -> list[cst.BaseStatement] | None:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return None
        if _contains(stmt, _calls_to(CAPTURE)):
            raise self.fail(stmt, f"{self.place[1]}: a call of {CAPTURE} the rule does not know")
        if not _contains(stmt, _calls_to(f"model.{CLASS_CAPTURE}")):
            return None
        if code_of(stmt).strip() != f"model.{CLASS_CAPTURE}({LAYER_IDS_PARAM})":
            raise self.fail(stmt, f"{self.place[1]}: the class's capture called in a form the rule does not know")
        return [statement(self._call(), column)]

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope != self.place[1] or not _with_indices():
            return updated_node
        params = list(updated_node.params.kwonly_params)
        names = [p.name.value for p in params]
        if INDICES_FIELD in names:
            return updated_node
        if LAYER_IDS_PARAM not in names:
            raise self.fail(original_node, f"{scope}: no keyword {LAYER_IDS_PARAM}")
        index = names.index(LAYER_IDS_PARAM)
        new = params[index].with_changes(
            name=cst.Name(INDICES_FIELD),
            annotation=None,
            default=cst.Name("None"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        params.insert(index + 1, new)
        return updated_node.with_changes(params=updated_node.params.with_changes(kwonly_params=params))


class CaptureCallerRule(_ScopedRule):
    """The model runner passes ``configure_aux_hidden_state_capture`` the indices its
    resolved ``SpecAuxHiddenStateConfig`` holds, after the layer ids, as it passes every
    other field."""

    concerns = (concerns.SPECULATORS_EAGLE3,)
    places = (CAPTURE_CALLER,)
    files = frozenset({CAPTURE_CALLER[0]})
    needles = (CAPTURE_CALL[1],)
    reads = "the target's capture is configured there"

    def __init__(self, file: str):
        super().__init__(file)
        self.found = 0

    def leave_Call(self, original_node, updated_node):
        if self.scope != CAPTURE_CALLER[1] or dotted(original_node.func) != CAPTURE_CALL[1]:
            return updated_node
        self.found += 1
        args = list(updated_node.args)
        keywords = [a.keyword.value if a.keyword else None for a in args]
        if INDICES_FIELD in keywords:
            self.report(original_node, LABEL_CAPTURE, Finding.ROUTED)
            return updated_node
        if LAYER_IDS_PARAM not in keywords:
            raise self.fail(original_node, f"{self.scope}: {CAPTURE_CALL[1]} without {LAYER_IDS_PARAM}=")
        index = keywords.index(LAYER_IDS_PARAM)
        value = args[index].value
        if not (
            isinstance(value, cst.Attribute)
            and value.attr.value == LAYER_IDS_PARAM
        ):
            raise self.fail(original_node, f"{self.scope}: {LAYER_IDS_PARAM}= is not a field of the config")
        self.report(original_node, LABEL_CAPTURE, Finding.UNROUTED)
        new = args[index].with_changes(
            keyword=cst.Name(INDICES_FIELD),
            value=value.with_changes(attr=cst.Name(INDICES_FIELD)),
        )
        args.insert(index + 1, new)
        return updated_node.with_changes(args=args)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == CAPTURE_CALLER[1] and self.found != 1:
            raise self.fail(original_node, f"{scope}: {self.found} calls of {CAPTURE_CALL[1]}, the rule knows one")
        return updated_node


class CaptureConfigFieldRule(_ClassRule):
    """``SpecAuxHiddenStateConfig`` gets ``eagle_aux_hidden_state_indices`` after
    ``eagle_aux_hidden_state_layer_ids``: what ``_resolve_eagle_aux_hidden_state`` reads of a
    speculators drafter for the capture."""

    concerns = (concerns.SPECULATORS_EAGLE3,)
    places = (CAPTURE_CONFIG,)

    def rewrite_class(self, node, body):
        name = node.name.value
        fields = {dotted(body[i].body[0].target): i for i in _fields_of(body)}
        if INDICES_FIELD in fields:
            self.report(node, LABEL_CAPTURE, Finding.ROUTED, name)
            return None
        if LAYER_IDS_PARAM not in fields:
            raise self.fail(node, f"{name}: no field {LAYER_IDS_PARAM}")
        self.report(node, LABEL_CAPTURE, Finding.UNROUTED, name)
        index = fields[LAYER_IDS_PARAM] + 1
        body[index:index] = statements_with_comments(INDICES_FIELD_TEXT, 4)
        return body


def _captures_end_layer(node: cst.CSTNode) -> bool:
    """``self.end_layer in self.layers_to_capture`` or ``num_layers in ...``."""
    return (
        isinstance(node, cst.Comparison)
        and dotted(node.left) in ("self.end_layer", "num_layers")
        and len(node.comparisons) == 1
        and isinstance(node.comparisons[0].operator, cst.In)
        and dotted(node.comparisons[0].comparator) == "self.layers_to_capture"
    )


def _comments(lines) -> list:
    return [line for line in lines if line.comment is not None]


def _blanks(lines) -> list:
    return [line for line in lines if line.comment is None]


class FinalHiddenStateRule(_ClassRule):
    """The target models whose forward captures the last layer's output say so, for the
    capture check: ``captures_final_hidden_state = True`` before their first method."""

    concerns = (concerns.DRAFT_CHECK,)
    places = FINAL_HIDDEN_STATE_MODELS

    def rewrite_class(self, node, body):
        name = node.name.value
        if any(_assigns(stmt, FINAL_HIDDEN_STATE_FLAG) for stmt in body):
            self.report(node, LABEL_CAPTURE, Finding.ROUTED, name)
            return None
        forward = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"]
        if len(forward) != 1 or not _contains(forward[0], _captures_end_layer):
            raise self.fail(node, f"{name}: its forward does not capture the last layer as the rule knows")
        self.report(node, LABEL_CAPTURE, Finding.UNROUTED, name)
        index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef))
        new = statements_with_comments(FINAL_HIDDEN_STATE_TEXT, 4)
        first = body[index]
        new[0] = new[0].with_changes(
            leading_lines=[*_blanks(first.leading_lines), *new[0].leading_lines]
        )
        body[index:index] = new
        body[index + len(new)] = first.with_changes(
            leading_lines=[cst.EmptyLine(indent=False), *_comments(first.leading_lines)]
        )
        return body


RULES = (
    AuxCountBlockRule,
    AuxCountFunctionRule,
    TargetCaptureRule,
    DraftCheckRule,
    CaptureCallRule,
    CaptureConfigFieldRule,
    CaptureCallerRule,
    FinalHiddenStateRule,
    DraftDtypeRule,
    SpeculatorsConfigRule,
    NormBeforeResidualRule,
    PrefillDraftProposalRule,
    MetadataDraftProposalRule,
    DisaggDraftInputRule,
    DisaggDraftHiddenRule,
    IdleVerifyInputRule,
    ParserImportRule,
)
