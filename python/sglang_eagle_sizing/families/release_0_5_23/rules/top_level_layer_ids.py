"""``top-level-layer-ids``: the target's capture reads the drafter's ids through the parser,
top-level ids (hidden-state indices) included, and hands them to the target as they are.

Four places, one rule each: the resolution (``_resolve_eagle_aux_hidden_state``) reads the
parser and fills the struct's layer ids and its new ``eagle_aux_hidden_state_indices``
field (``SpecAuxHiddenStateConfig``); the model runner hands that field to
``configure_aux_hidden_state_capture``, which gives indices to the class's
``set_eagle3_hidden_states_to_capture`` (the capture contract's path) and layer ids to its
``set_eagle3_layers_to_capture``, as the release does. No class's rule is searched for the
layer ids that would give the indices.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import CAPTURE, INDICES_FIELD, PARSE
from sglang_eagle_sizing.families.release_0_5_23.rules.base import (
    ClassRule,
    OneStatementRule,
    fields_of,
    parsed_into,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    CONFIGURE_CAPTURE,
    CONFIGURE_CAPTURE_CALL,
    SPEC_AUX_CONFIG,
    TARGET_CAPTURE,
)
from sglang_eagle_sizing.shared import CaptureTryRule
from sglang_eagle_sizing.syntax import dotted, statements_with_comments

LAYER_IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
LABEL = "hidden-state-indices"
SETTER = "set_eagle3_layers_to_capture"


class TargetCaptureRule(CaptureTryRule):
    """The target captures what the parser reads: 0.5.11's rule (``rules/target_capture.py``)
    on 0.5.23's place, with the parser's lines for the ``= True`` default and the
    ``try: eagle_config.get(...) ... except Exception:`` after it."""

    concerns = (concerns.TOP_LEVEL_LAYER_IDS,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = (LAYER_IDS_FIELD,)
    place = TARGET_CAPTURE

    def routed(self, stmt: cst.CSTNode) -> bool:
        return parsed_into(stmt) is not None

    def replacement(self, owner: str, hf_config: str) -> str:
        return (
            f"eagle3_draft_config = {PARSE}(\n"
            f"    draft_hf_config={hf_config}\n"
            ")\n"
            f"{owner}.eagle_use_aux_hidden_state = eagle3_draft_config.use_aux_hidden_state\n"
            f"{owner}.{LAYER_IDS_FIELD} = (\n"
            "    eagle3_draft_config.aux_hidden_state_layer_ids\n"
            ")\n"
            f"{owner}.{INDICES_FIELD} = eagle3_draft_config.aux_hidden_state_indices\n"
        )


class IndicesFieldRule(ClassRule):
    """``SpecAuxHiddenStateConfig`` gets ``eagle_aux_hidden_state_indices`` after its
    ``eagle_aux_hidden_state_layer_ids`` field."""

    concerns = (concerns.TOP_LEVEL_LAYER_IDS,)
    places = (SPEC_AUX_CONFIG,)
    needles = (SPEC_AUX_CONFIG[1],)

    def rewrite_class(self, node, body):
        name = node.name.value
        fields = {dotted(body[i].body[0].target): i for i in fields_of(body)}
        if INDICES_FIELD in fields:
            self.report(node, LABEL, Finding.ROUTED, name)
            return None
        if LAYER_IDS_FIELD not in fields:
            raise self.fail(node, f"{name}: no {LAYER_IDS_FIELD} field to put the indices by")
        self.report(node, LABEL, Finding.UNROUTED, name)
        new = statements_with_comments(
            "# Hidden-state indices the draft declares instead of layer ids (vLLM's\n"
            "# top-level ids: 0 the embeddings, i the output of layer i - 1).\n"
            f"{INDICES_FIELD}: Any = None\n",
            4,
        )
        index = fields[LAYER_IDS_FIELD] + 1
        body[index:index] = new
        return body


class ConfigureCaptureRule(OneStatementRule):
    """In ``configure_aux_hidden_state_capture``: the keyword ``eagle_aux_hidden_state_indices``
    after ``eagle_aux_hidden_state_layer_ids``, and ``model.set_eagle3_layers_to_capture(...)``
    given only when no indices are: indices go to ``set_eagle3_hidden_states_to_capture``."""

    concerns = (concerns.TOP_LEVEL_LAYER_IDS,)
    place = CONFIGURE_CAPTURE
    needles = (CONFIGURE_CAPTURE[1],)
    label = LABEL
    reads = "the model is handed the drafter's ids there"

    def routed(self, stmt: cst.CSTNode) -> bool:
        return (
            isinstance(stmt, cst.If)
            and dotted(getattr(stmt.test, "left", None)) == INDICES_FIELD
        )

    def rewrite(self, stmt, column):
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return None
        call = stmt.body[0].value if isinstance(stmt.body[0], cst.Expr) else None
        if not (isinstance(call, cst.Call) and (dotted(call.func) or "").endswith("." + SETTER)):
            return None
        model = dotted(call.func).removesuffix("." + SETTER)
        if [dotted(a.value) for a in call.args] != [LAYER_IDS_FIELD] or not model:
            raise self.fail(stmt, f"{SETTER} called with what the rule does not know")
        return statements_with_comments(
            f"if {INDICES_FIELD} is not None:\n"
            "    # Hidden-state indices, captured as they are; layer ids are read by the\n"
            "    # model class's own rule.\n"
            f"    {model}.{CAPTURE}({INDICES_FIELD})\n"
            "else:\n"
            f"    {model}.{SETTER}({LAYER_IDS_FIELD})\n",
            column,
        )

    def leave_FunctionDef(self, original_node, updated_node):
        if self.scope == self.place[1]:
            updated_node = self._with_parameter(original_node, updated_node)
        return super().leave_FunctionDef(original_node, updated_node)

    def _with_parameter(self, original_node, updated_node):
        params = list(updated_node.params.kwonly_params)
        names = [p.name.value for p in params]
        if INDICES_FIELD in names:
            return updated_node
        if LAYER_IDS_FIELD not in names:
            raise self.fail(
                original_node, f"{self.scope}: no keyword {LAYER_IDS_FIELD} to put the indices by"
            )
        index = names.index(LAYER_IDS_FIELD) + 1
        before = params[index - 1]
        params.insert(
            index,
            before.with_changes(
                name=cst.Name(INDICES_FIELD),
                annotation=None,
                default=cst.Name("None"),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            ),
        )
        return updated_node.with_changes(
            params=updated_node.params.with_changes(kwonly_params=params)
        )


class ConfigureCaptureCallRule(OneStatementRule):
    """The model runner's call of ``configure_aux_hidden_state_capture`` hands it the struct's
    ``eagle_aux_hidden_state_indices`` after its layer ids."""

    concerns = (concerns.TOP_LEVEL_LAYER_IDS,)
    place = CONFIGURE_CAPTURE_CALL
    needles = (CONFIGURE_CAPTURE[1],)
    label = LABEL
    reads = "the model's capture is configured there"

    @staticmethod
    def _call(stmt) -> cst.Call | None:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            small = stmt.body[0]
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                if dotted(small.value.func) == CONFIGURE_CAPTURE[1]:
                    return small.value
        return None

    def routed(self, stmt: cst.CSTNode) -> bool:
        call = self._call(stmt)
        return call is not None and any(
            a.keyword is not None and a.keyword.value == INDICES_FIELD for a in call.args
        )

    def rewrite(self, stmt, column):
        call = self._call(stmt)
        if call is None:
            return None
        args = list(call.args)
        keywords = [a.keyword.value if a.keyword else None for a in args]
        if LAYER_IDS_FIELD not in keywords:
            raise self.fail(stmt, f"{CONFIGURE_CAPTURE[1]}: no {LAYER_IDS_FIELD}= to put the indices by")
        at = keywords.index(LAYER_IDS_FIELD)
        value = dotted(args[at].value)
        if not value or not value.endswith("." + LAYER_IDS_FIELD):
            raise self.fail(stmt, f"{CONFIGURE_CAPTURE[1]}: {LAYER_IDS_FIELD}= from what the rule does not know")
        owner = value.removesuffix("." + LAYER_IDS_FIELD)
        args.insert(
            at + 1,
            args[at].with_changes(
                keyword=cst.Name(INDICES_FIELD),
                value=cst.parse_expression(f"{owner}.{INDICES_FIELD}"),
            ),
        )
        return [stmt.with_changes(body=[stmt.body[0].with_changes(value=call.with_changes(args=args))], leading_lines=[])]
