"""Expose ``draft_runner`` on the multi-layer v2 draft worker (its first step's runner),
so ``get_draft_runner`` resolves it like every other v2 draft worker."""

from __future__ import annotations

from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import ROUTING
from sglang_eagle_sizing.families.release_0_5_11.sites import DRAFT_RUNNER_WORKERS
from sglang_eagle_sizing.syntax import assigned, statement, with_comment


class DraftRunnerRule(Rule):
    concerns = (ROUTING,)
    files = frozenset(file for file, _ in DRAFT_RUNNER_WORKERS)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if len(self._scope) != 1 or original_node.name.value != "__init__":
            return updated_node
        runner = DRAFT_RUNNER_WORKERS.get((self.file, self._scope[0]))
        if runner is None:
            return updated_node
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        list_attribute = runner.split("[")[0]
        anchor = None
        for index, stmt in enumerate(body):
            target = assigned(stmt)
            if target == "self.draft_runner":
                self.report(original_body[index], "draft_runner", Finding.ROUTED, scope)
                return updated_node
            if target == list_attribute:
                anchor = index
        if anchor is None:
            raise self.fail(original_node, f"{scope}: {list_attribute} is never set")
        self.report(original_body[anchor], "draft_runner", Finding.UNROUTED, scope)
        column = self.column_of(original_body[0])
        new = statement(f"self.draft_runner = {runner}\n", column)
        new = with_comment(
            new, "The first step's runner: what hidden_size_for(self) reads.", column=column
        )
        body.insert(anchor + 1, new)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
