"""Every EAGLE worker reads and validates its drafter's config before it builds the draft model,
and keeps what it parsed.

Right before the statement of ``__init__`` that builds and loads the draft model
(``super().__init__(...)`` or ``TpModelWorker(...)``, per ``sites.AUX_FLAG_WORKERS``), the rule
inserts the start-up block (``START_UP``): the drafter's ``ModelConfig`` from its config alone
(``get_eagle_draft_model_config``), ``validate_eagle_draft_config`` against the target, and the
two attributes the classmethods read, ``eagle_use_aux_hidden_state`` and
``eagle_num_aux_hidden_states``; last, ``set_eagle_draft_dtype`` gives ``server_args.dtype`` and
that config the target's resolved dtype when, at ``--dtype auto``, the drafter's config gives
another. The draft ``TpModelWorker`` is handed that config (``model_config=draft_model_config``,
``rules/draft_model_config.py``): the drafter's config is built once. 0.5.11's inline parsing of the flag after the draft model is
built (``self.eagle_use_aux_hidden_state = False`` followed by an ``if ...is_eagle3():`` block)
goes. A bad drafter then stops the worker before any weight loads.
"""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import DTYPE, PARSER, VALIDATION
from sglang_eagle_sizing.families.release_0_5_11.sites import (
    AUX_FLAG_WORKERS,
    SERVER_ARGS,
    TARGET_MODEL_CONFIG,
)
from sglang_eagle_sizing.shared import eagle_config_source
from sglang_eagle_sizing.syntax import (
    assigned,
    code_of,
    contains,
    dotted,
    keyword_arg,
    local_assigned,
    names_read,
    statements,
    with_comment,
)

FLAG = "self.eagle_use_aux_hidden_state"
NUM_AUX = "self.eagle_num_aux_hidden_states"
PARSER_CALL = "parse_eagle_use_aux_hidden_state"
COUNTER = "get_eagle_num_aux_hidden_states"
VALIDATOR = "validate_eagle_draft_config"
READER = "get_eagle_draft_model_config"
DTYPE_CHOOSER = "set_eagle_draft_dtype"
DRAFT_MODEL_CONFIG = "draft_model_config"

START_UP_COMMENT = ("The drafter's config, read before its weights load.",)


def start_up_block() -> str:
    """The start-up block of the concerns the rules write now."""
    lines = [f"{DRAFT_MODEL_CONFIG} = {READER}({SERVER_ARGS})\n"]
    if enabled(VALIDATION):
        lines.append(
            f"{VALIDATOR}(self.speculative_algorithm, {DRAFT_MODEL_CONFIG}, "
            f"{TARGET_MODEL_CONFIG})\n"
        )
    if enabled(PARSER):
        lines.append(
            f"{FLAG} = {PARSER_CALL}(self.speculative_algorithm, "
            f"{DRAFT_MODEL_CONFIG}.hf_config)\n"
        )
        lines.append(f"{NUM_AUX} = {COUNTER}({DRAFT_MODEL_CONFIG}.hf_config)\n")
    if enabled(DTYPE):
        lines.append(
            f"{DTYPE_CHOOSER}({SERVER_ARGS}, {DRAFT_MODEL_CONFIG}, {TARGET_MODEL_CONFIG})\n"
        )
    return "".join(lines)


def _builds_draft_model(builder: str):
    """A predicate: the node calls ``builder`` (``super().__init__`` or a class name)."""

    def predicate(node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.Call)
            and code_of(node.func).replace(" ", "") == builder
        )

    return predicate


class _PassDraftModelConfig(cst.CSTTransformer):
    """Add ``model_config=draft_model_config`` to the call of ``builder``: the draft
    ``TpModelWorker`` takes the config the start-up block built."""

    def __init__(self, builder: str):
        self.builds = _builds_draft_model(builder)

    def leave_Call(self, original_node, updated_node):
        if not self.builds(original_node) or keyword_arg(updated_node, "model_config"):
            return updated_node
        args = list(updated_node.args)
        new = cst.Arg(
            keyword=cst.Name("model_config"),
            value=cst.Name(DRAFT_MODEL_CONFIG),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        if args:
            # The new argument takes the last one's comma (a call one argument a line),
            # the last one the comma of the one before it.
            new = new.with_changes(comma=args[-1].comma)
            comma = (
                args[-2].comma
                if len(args) > 1
                else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            )
            args[-1] = args[-1].with_changes(comma=comma)
        return updated_node.with_changes(args=[*args, new])


def _assigns_flag(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Assign) and any(
        dotted(t.target) in (FLAG, NUM_AUX) for t in node.targets
    )


def _bare(stmt: cst.BaseStatement) -> str:
    """A statement as Python reads it: how a formatter wrapped it does not matter."""
    code = code_of(stmt.with_changes(leading_lines=[])).strip()
    try:
        return ast.dump(ast.parse(textwrap.dedent(code)))
    except SyntaxError:
        return code


class AuxFlagRule(Rule):
    concerns = (PARSER, VALIDATION, DTYPE)
    files = frozenset(file for file, _ in AUX_FLAG_WORKERS)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if len(self._scope) != 1 or original_node.name.value != "__init__":
            return updated_node
        builder = AUX_FLAG_WORKERS.get((self.file, self._scope[0]))
        if builder is None:
            return updated_node
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        builds = _builds_draft_model(builder)
        anchor = next((i for i, s in enumerate(body) if contains(s, builds)), None)
        if anchor is None:
            raise self.fail(
                original_node, f"{scope}: no statement calls {builder}(...)"
            )
        if enabled(PARSER):
            body[anchor] = body[anchor].visit(_PassDraftModelConfig(builder))
        start_up = statements(start_up_block(), self.column_of(original_body[anchor]))
        wanted = [_bare(s) for s in start_up]
        size = len(start_up)
        if anchor >= size and [_bare(s) for s in body[anchor - size : anchor]] == wanted:
            rest = body[: anchor - size] + body[anchor:]
            if not any(contains(s, _assigns_flag) for s in rest):
                passed = body[anchor].deep_equals(updated_node.body.body[anchor])
                status = Finding.ROUTED if passed else Finding.UNROUTED
                self.report(original_body[anchor - size + 2], "aux-flag", status, scope)
                return updated_node.with_changes(
                    body=updated_node.body.with_changes(body=body)
                )
        # 0.5.11's inline parsing: `flag = <default>` then `if ...: ... flag = ...`.
        kept: list[cst.BaseStatement] = []
        kept_anchor = 0
        index = 0
        while index < len(body):
            stmt = body[index]
            if not contains(stmt, _assigns_flag):
                if index == anchor:
                    kept_anchor = len(kept)
                kept.append(stmt)
                index += 1
                continue
            follower = body[index + 1] if index + 1 < len(body) else None
            if not (
                assigned(stmt) == FLAG
                and isinstance(follower, cst.If)
                and contains(follower, _assigns_flag)
                and eagle_config_source(follower) is not None
            ):
                raise self.fail(
                    original_body[index],
                    f"{scope}: {FLAG} set in a form the rule does not know",
                )
            self._refuse_fork_statements(
                scope, original_body[index + 1], body[:index] + body[index + 2 :]
            )
            self.report(original_body[index], "aux-flag", Finding.UNROUTED, scope)
            index += 2
        if len(kept) == len(body):  # no flag at all: the multi-layer workers
            self.report(original_body[anchor], "aux-flag", Finding.UNROUTED, scope)
        start_up[0] = with_comment(
            start_up[0], *START_UP_COMMENT, column=self.column_of(original_body[anchor])
        )
        kept[kept_anchor:kept_anchor] = start_up
        return updated_node.with_changes(body=updated_node.body.with_changes(body=kept))

    def _refuse_fork_statements(
        self, scope: str, parse: cst.If, rest: list[cst.BaseStatement]
    ) -> None:
        """The inline parse goes whole: refuse it if it holds a statement the rule does not
        own (only the flag, the count and locals read nowhere else are the parse's)."""
        if parse.orelse is not None:
            raise self.fail(
                parse.orelse,
                f"{scope}: the parse of {FLAG} has an else branch the rule does not own; "
                "removing the parse would drop it (move it out by hand, then run apply "
                "again)",
            )
        read_elsewhere = set().union(*(names_read(s) for s in rest)) if rest else set()
        for stmt in parse.body.body:
            if assigned(stmt) in (FLAG, NUM_AUX):
                continue
            local = local_assigned(stmt)
            if local is not None and local not in read_elsewhere:
                continue
            raise self.fail(
                stmt,
                f"{scope}: a statement of the fork's inside the parse of {FLAG}, which "
                "the rule removes (the start-up block before the draft model parses the "
                "flag); removing it would drop this statement. Move it out of that `if` "
                "by hand, then run apply again",
            )
