"""``standalone-disagg``: STANDALONE's draft proposal crosses PD disaggregation without the
hidden states it does not have.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.rules.base import OneStatementRule
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    DISAGG_DRAFT_HIDDEN,
    DISAGG_DRAFT_INPUT,
    DISAGG_METADATA_DRAFT,
    DISAGG_PREFILL_DRAFT,
)
from sglang_eagle_sizing.syntax import (
    code_of,
    contains,
    dotted,
    same_expression,
    statement,
    statements,
    unparenthesized,
    with_comment,
)

LABEL_DISAGG = "standalone-disagg"


def _assigns_attribute(block: cst.BaseSuite, owner: str, attr: str) -> bool:
    """One of the statements of ``block`` (not of a block nested in it) assigns
    ``owner.attr``."""
    return any(
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Assign)
        and any(dotted(t.target) == f"{owner}.{attr}" for t in stmt.body[0].targets)
        for stmt in getattr(block, "body", ())
    )


class PrefillDraftProposalRule(OneStatementRule):
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
        source = _handed_over(body[hidden[0]].body[0].value) if len(hidden) == 1 else None
        if source is None:
            raise self.fail(stmt, f"{self.scope}: the hidden states handed over are not "
                            "draft_hidden_states_cpu[i].clone() (0.5.19 on) nor "
                            "draft_input.hidden_states[i].cpu().clone() (before)")
        value = code_of(unparenthesized(body[hidden[0]].body[0].value))
        body[hidden[0]] = statement(
            "req.hidden_states_tensor = (\n"
            f"    {value}\n"
            f"    if {source} is not None\n"
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

#: what the prefill server hands over as a request's hidden states, by release: a row of
#: the batch's states copied to the CPU before the loop (0.5.19 on), or inside it (0.5.18)
HANDED_OVER = (
    "draft_hidden_states_cpu[i].clone()",
    "draft_input.hidden_states[i].cpu().clone()",
)


def _handed_over(value: cst.BaseExpression) -> str | None:
    """The states ``value`` takes its row from (``None``: not a form of ``HANDED_OVER``)."""
    for form in HANDED_OVER:
        if same_expression(value, form):
            return form.split("[", 1)[0]
    return None


class MetadataDraftProposalRule(OneStatementRule):
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
    return contains(
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

    return contains(node, predicate)


HIDDEN_STATES_FLAG = "with_hidden_states"


class DisaggDraftInputRule(OneStatementRule):
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


class DisaggDraftHiddenRule(OneStatementRule):
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
