"""Route the extend-phase idle inputs of the v1 workers, and rebuild the verify-made ones.

In 0.5.11, ``forward_draft_extend_after_decode`` builds an idle input only when every request
has finished (``if not input_is_idle and <none verified>: ... create_idle_input(...)``), with an
inline width; an input that arrives idle keeps the one ``EagleVerifyInput.verify`` built without
a worker in reach. The rule moves the idle input out of that ``if`` into its own
``if batch.forward_mode.is_idle():`` right after it (``prepare_for_idle`` makes the batch idle),
so both idle cases get an ``EagleDraftExtendInput`` sized by this worker. The inline width that
only fed the old call goes.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import SIZING_CONCERNS
from sglang_eagle_sizing.families.release_0_5_11.rules.idle_inputs import (
    idle_input_call,
    replaced_locals,
    route_args,
    routed_args,
)
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind, Phase, site_for
from sglang_eagle_sizing.syntax import (
    code_of,
    dotted,
    drop_unused_locals,
    local_assigned,
    statement,
    with_comment,
)

REBUILD_COMMENT = (
    "Also replaces an idle input made by EagleVerifyInput.verify, which has no",
    "worker in reach: the draft-extend input takes this worker's sizes.",
)

FILES = frozenset(
    s.file for s in SITES if s.kind is Kind.IDLE_INPUT and s.phase is Phase.EXTEND
)


def _site_assignment(stmt: cst.CSTNode) -> cst.Assign | None:
    """``<batch>.spec_info = <Class>.create_idle_input(...)`` as a one-statement line."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and idle_input_call(small.value):
            return small
    return None


def _idle_test(node: cst.CSTNode) -> str | None:
    """``batch`` for ``if batch.forward_mode.is_idle():``."""
    if isinstance(node, cst.Call) and not node.args:
        name = dotted(node.func)
        if name and name.endswith(".forward_mode.is_idle"):
            return name[: -len(".forward_mode.is_idle")]
    return None


class ExtendIdleRule(Rule):
    concerns = SIZING_CONCERNS
    files = FILES

    def leave_FunctionDef(self, original_node, updated_node):
        site = site_for(self.file, self.scope)
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if site is None or site.kind is not Kind.IDLE_INPUT or site.phase is not Phase.EXTEND:
            return updated_node
        if not enabled(site.concern):
            return updated_node
        input_class = site.phase.input_class
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        for index, stmt in enumerate(body):
            if not isinstance(stmt, cst.If):
                continue
            # Routed: `if batch.forward_mode.is_idle(): batch.spec_info = <routed>`
            batch = _idle_test(stmt.test)
            assign = _site_assignment(stmt.body.body[0]) if stmt.body.body else None
            if batch is not None and assign is not None:
                if not routed_args(assign.value, input_class, site.worker):
                    raise self.fail(
                        original_body[index],
                        f"{site.scope}: idle input sized by hand; expected "
                        f"{input_class}.hidden_size_for({site.worker})",
                    )
                self.report(original_body[index].body.body[0], site.phase.value, Finding.ROUTED, site.scope)
                return updated_node
            # Unrouted: the idle input sits inside this `if`.
            inner = list(stmt.body.body)
            hits = [i for i, s in enumerate(inner) if _site_assignment(s) is not None]
            if not hits:
                continue
            (hit,) = hits
            assign = _site_assignment(inner[hit])
            self.report(original_body[index].body.body[hit], site.phase.value, Finding.UNROUTED, site.scope)
            target = dotted(assign.targets[0].target)
            if target is None or not target.endswith(".spec_info"):
                raise self.fail(original_body[index], f"{site.scope}: idle input assigned to {code_of(assign.targets[0].target)!r}")
            batch = target[: -len(".spec_info")]
            after = inner[hit + 1 :]
            if after:
                raise self.fail(
                    original_body[index].body.body[hit + 1],
                    f"{site.scope}: a statement follows the idle input inside the "
                    "`if`; the rule moves the idle input out of that `if` (into `if "
                    f"{batch}.forward_mode.is_idle():` after it), so this statement "
                    "would run before the idle input exists. Place it after the idle "
                    "input by hand (the rule does not guess under which condition it "
                    "must run), then run apply again",
                )
            kept = inner[:hit]
            if all(_only_feeds(s, assign.value) for s in kept):
                raise self.fail(
                    original_body[index],
                    f"{site.scope}: nothing left in the if once the idle input moves out",
                )
            call = route_args(assign.value, input_class, site.worker)
            rebuild = statement(
                f"if {batch}.forward_mode.is_idle():\n"
                f"    {target} = {code_of(call)}\n",
                self.column_of(original_body[index]),
            )
            rebuild = rebuild.with_changes(
                body=rebuild.body.with_changes(
                    body=[
                        with_comment(
                            rebuild.body.body[0].with_changes(
                                leading_lines=_comments(inner[hit])
                            ),
                            *REBUILD_COMMENT,
                            column=self.column_of(original_body[index]) + 4,
                        )
                    ]
                )
            )
            body[index] = stmt.with_changes(body=stmt.body.with_changes(body=kept))
            body.insert(index + 1, rebuild)
            updated_node = updated_node.with_changes(
                body=updated_node.body.with_changes(body=body)
            )
            return drop_unused_locals(updated_node, replaced_locals(assign.value))
        raise self.fail(original_node, f"{site.scope}: extend-phase idle input not found")


def _comments(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    """The fork's comment lines above a statement, to move with it (blank lines dropped)."""
    return [
        line.with_changes(indent=True, whitespace=cst.SimpleWhitespace(""))
        for line in stmt.leading_lines
        if line.comment is not None
    ]


def _only_feeds(stmt: cst.CSTNode, call: cst.Call) -> bool:
    """Whether ``stmt`` only reads a local the idle-input call takes as its width or dtype."""
    return local_assigned(stmt) in replaced_locals(call)
