"""``draft-check``: the EAGLE-3 drafter is checked against its target before any weights
load, in two places: its keys where the server arguments decide for the drafter, before any
process starts (``_handle_eagle3_draft_check``, calling ``validate_eagle3_draft_config``; no
model module imported), and what the target class's contract (``capture-contract``)
captures for its ids where 0.5.23 resolves the target's capture
(``_resolve_eagle_aux_hidden_state``, calling ``check_eagle3_target_capture``).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    CHECK_CAPTURE,
    DRAFT_CHECK_FUNCTION,
    DRAFT_CHECK_HOOK,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import ScopedRule, calls_to
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_dtype import (
    DrafterHookRule,
    _imports,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    DRAFT_CHECK_ANCHOR,
    TARGET_CAPTURE,
)
from sglang_eagle_sizing.syntax import contains, dotted, keyword_argument, statements


class DraftCheckRule(DrafterHookRule):
    """The drafter is checked first thing in ``_handle_eagle_family``, after the algorithm's
    own check (``_check_oot_speculative_algorithm``, 0.5.23 on) or its view of the
    arguments: ``inserted.DRAFT_CHECK_FUNCTION``."""

    concerns = (concerns.DRAFT_CHECK,)
    anchor = DRAFT_CHECK_ANCHOR
    fallback_text = "a first statement (before 0.5.23)"
    hook = DRAFT_CHECK_HOOK
    function = DRAFT_CHECK_FUNCTION
    label = "draft-check"

    @staticmethod
    def fallback(body):
        # first thing, after the function's own imports and its view of the arguments
        # (``cfg = resolving_view(server_args)``, 0.5.19 on) where it starts so
        leading = 0
        for stmt in body:
            if not (_imports(stmt) or _assigns_cfg(stmt)):
                break
            leading += 1
        return leading - 1


def _assigns_cfg(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Assign)
        and dotted(stmt.body[0].targets[0].target) == "cfg"
    )


class TargetCaptureCheckRule(ScopedRule):
    """The target class's capture is checked where 0.5.23 resolves it: at the end of the
    ``if spec_algorithm.is_eagle3():`` block of ``_resolve_eagle_aux_hidden_state`` (the
    target's ``ModelRunner.__init__``, before ``load_model``), ``CHECK_CAPTURE`` on the
    config it resolved (``inserted.EAGLE3_DRAFT_CHECK``).

    Before 0.5.20 the function takes no ``model_config``: the rule adds the keyword, after
    ``server_args`` as 0.5.20 has it, and passes it from its caller, which has it
    (``resolve_spec_aux_hidden_state_config``); a caller without it is refused."""

    concerns = (concerns.DRAFT_CHECK,)
    places = (TARGET_CAPTURE,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = (TARGET_CAPTURE[1],)
    reads = "the target's aux hidden states are resolved there"
    ANCHOR = "spec_algorithm.is_eagle3"

    def __init__(self, file: str):
        super().__init__(file)
        self.hits = 0
        #: the function takes no ``model_config`` (before 0.5.20): the rule adds it
        self.adds_parameter = False

    def visit_Module(self, node: cst.Module) -> bool | None:
        super().visit_Module(node)
        self.adds_parameter = any(
            TARGET_MODEL_CONFIG not in _keywords(function)
            for function in m.findall(
                node, m.FunctionDef(name=m.Name(TARGET_CAPTURE[1]))
            )
        )
        return True

    def _call(self, owner: str, hf_config: str) -> str:
        return (
            f"{CHECK_CAPTURE}(\n"
            f"    {owner},\n"
            f"    draft_hf_config={hf_config},\n"
            f"    target_model_config={TARGET_MODEL_CONFIG},\n"
            ")\n"
        )

    def leave_If(self, original_node, updated_node):
        if self.scope != TARGET_CAPTURE[1] or not (
            isinstance(original_node.test, cst.Call)
            and dotted(original_node.test.func) == self.ANCHOR
        ):
            return updated_node
        self.hits += 1
        body = list(updated_node.body.body)
        if any(contains(s, calls_to(CHECK_CAPTURE)) for s in body):
            self.report(original_node, LABEL, Finding.ROUTED)
            return updated_node
        self.report(original_node, LABEL, Finding.UNROUTED)
        owners = {
            (dotted(t.target) or "").rsplit(".", 1)[0]
            for s in body
            for small in (s.body if isinstance(s, cst.SimpleStatementLine) else ())
            if isinstance(small, cst.Assign)
            for t in small.targets
            if (dotted(t.target) or "").endswith(".eagle_use_aux_hidden_state")
        }
        if len(owners) != 1:
            raise self.fail(
                original_node,
                f"{TARGET_CAPTURE[1]}: no one config the EAGLE-3 block resolves "
                "(its eagle_use_aux_hidden_state)",
            )
        (owner,) = owners
        call = statements(
            self._call(owner, f"{DRAFT_MODEL_CONFIG}.hf_config"),
            self.column_of(original_node.body.body[0]),
        )
        return updated_node.with_changes(
            body=updated_node.body.with_changes(body=[*body, *call])
        )

    def visit_Call(self, node: cst.Call) -> bool | None:
        if (
            self.adds_parameter
            and dotted(node.func) == TARGET_CAPTURE[1]
            and not self._passes_model_config(node)
        ):
            self.report(node, LABEL, Finding.UNROUTED)
        return True

    def leave_Call(self, original_node, updated_node):
        if not (
            self.adds_parameter
            and dotted(original_node.func) == TARGET_CAPTURE[1]
            and not self._passes_model_config(original_node)
        ):
            return updated_node
        if TARGET_MODEL_CONFIG not in self.caller_names:
            raise self.fail(
                original_node,
                f"{self.scope}: calls {TARGET_CAPTURE[1]} without a "
                f"{TARGET_MODEL_CONFIG} to pass it",
            )
        return updated_node.with_changes(
            args=_after_keyword(
                updated_node.args,
                "server_args",
                keyword_argument(TARGET_MODEL_CONFIG, cst.Name(TARGET_MODEL_CONFIG)),
            )
        )

    @staticmethod
    def _passes_model_config(call: cst.Call) -> bool:
        return any(
            arg.keyword is not None and arg.keyword.value == TARGET_MODEL_CONFIG
            for arg in call.args
        )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        self.caller_names = _keywords(node)
        return True

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == TARGET_CAPTURE[1] and self.hits != 1:
            raise self.fail(
                original_node,
                f"{scope}: {self.hits} `if {self.ANCHOR}():` blocks, the rule knows one",
            )
        if scope == TARGET_CAPTURE[1] and TARGET_MODEL_CONFIG not in _keywords(
            original_node
        ):
            kwonly = updated_node.params.kwonly_params
            if not kwonly:
                raise self.fail(
                    original_node,
                    f"{scope}: no {TARGET_MODEL_CONFIG} parameter, and no keyword-only "
                    "parameters to add it among",
                )
            updated_node = updated_node.with_changes(
                params=updated_node.params.with_changes(
                    kwonly_params=_after_keyword(
                        kwonly,
                        "server_args",
                        kwonly[0].with_changes(
                            name=cst.Name(TARGET_MODEL_CONFIG),
                            annotation=cst.Annotation(cst.Name("ModelConfig")),
                            default=None,
                            equal=cst.MaybeSentinel.DEFAULT,
                        ),
                    )
                )
            )
        return updated_node


def _keywords(function: cst.FunctionDef) -> set[str]:
    return {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}


def _after_keyword(items, keyword: str, new):
    """``items`` (call arguments or parameters) with ``new`` after the one named ``keyword``
    (last when there is none), taking its place's comma and whitespace."""
    items = list(items)
    names = [
        (item.keyword if isinstance(item, cst.Arg) else item.name) for item in items
    ]
    index = next(
        (i + 1 for i, name in enumerate(names) if name is not None and name.value == keyword),
        len(items),
    )
    if not items:
        return [new]
    before = items[index - 1]
    new = new.with_changes(comma=before.comma)
    if index == len(items) and not isinstance(before.comma, cst.Comma):
        items[-1] = before.with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
    return [*items[:index], new, *items[index:]]


#: the target's ``ModelConfig`` and the draft's (a local), in ``_resolve_eagle_aux_hidden_state``
TARGET_MODEL_CONFIG = "model_config"
DRAFT_MODEL_CONFIG = "draft_model_config"
LABEL = "draft-check"
