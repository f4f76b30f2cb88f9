"""``speculators-eagle3``: a speculators-format EAGLE-3 drafter's config is read as the
``LlamaForCausalLMEagle3`` config it describes, and its declared layer ids reach the capture.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing import shared
from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    INDICES_FIELD,
    INDICES_FIELD_TEXT,
    SPECULATORS_LOADER,
    SPECULATORS_LOADER_FUNCTION,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import (
    ClassRule,
    ScopedRule,
    fields_of,
    two_blank_lines,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_check import (
    LABEL_CAPTURE,
    LAYER_IDS_PARAM,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    CAPTURE_CALL,
    CAPTURE_CALLER,
    CAPTURE_CONFIG,
    CONFIG_READ,
)
from sglang_eagle_sizing.syntax import (
    contains,
    dotted,
    same_expression,
    statement,
    statements_with_comments,
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


class SpeculatorsConfigRule(ScopedRule):
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
        #: ``parse``'s ``def``, for the line a refusal names
        self.parse_def: cst.FunctionDef | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        result = super().visit_FunctionDef(node)
        if self.scope == CONFIG_READ[1] and self.parse_def is None:
            self.parse_def = node
        return result

    @staticmethod
    def _fallback_to(stmt: cst.CSTNode, name: str) -> bool:
        # `if config is None: config = <name>(...)`
        return (
            isinstance(stmt, cst.If)
            and same_expression(stmt.test, "config is None")
            and len(stmt.body.body) == 1
            and contains(stmt.body, lambda n: isinstance(n, cst.Call) and dotted(n.func) == name)
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
                self.parse_def or original_node,
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
            f.with_changes(leading_lines=two_blank_lines()) for f in [*_converter(), *loader]
        ]
        body[index:index] = functions
        body[index + len(functions)] = body[index + len(functions)].with_changes(
            leading_lines=two_blank_lines()
        )
        return updated_node.with_changes(body=body)


LABEL_SPECULATORS = "speculators-config"


class CaptureCallerRule(ScopedRule):
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


class CaptureConfigFieldRule(ClassRule):
    """``SpecAuxHiddenStateConfig`` gets ``eagle_aux_hidden_state_indices`` after
    ``eagle_aux_hidden_state_layer_ids``: what ``_resolve_eagle_aux_hidden_state`` reads of a
    speculators drafter for the capture."""

    concerns = (concerns.SPECULATORS_EAGLE3,)
    places = (CAPTURE_CONFIG,)

    def rewrite_class(self, node, body):
        name = node.name.value
        fields = {dotted(body[i].body[0].target): i for i in fields_of(body)}
        if INDICES_FIELD in fields:
            self.report(node, LABEL_CAPTURE, Finding.ROUTED, name)
            return None
        if LAYER_IDS_PARAM not in fields:
            raise self.fail(node, f"{name}: no field {LAYER_IDS_PARAM}")
        self.report(node, LABEL_CAPTURE, Finding.UNROUTED, name)
        index = fields[LAYER_IDS_PARAM] + 1
        body[index:index] = statements_with_comments(INDICES_FIELD_TEXT, 4)
        return body
