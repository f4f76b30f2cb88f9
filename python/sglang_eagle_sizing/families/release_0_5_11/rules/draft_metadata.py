"""Build the EAGLE draft steps' attention metadata for the batch the steps run: the one DP
attention pads.

Under DP attention ``ModelRunner.forward`` pads every batch to the size the ranks agreed on
(``ForwardBatch.prepare_mlp_sync_batch``). Without CUDA graphs the EAGLE draft builds the
attention metadata of all its steps once, before the first step (``EAGLEWorker.draft``,
``EagleDraftWorker.draft``: ``self.draft_attn_backend.init_forward_metadata(forward_batch)``),
then runs each step with ``skip_attn_backend_init=True``: a rank with fewer requests than
another (MAX_LEN padding) runs its steps with more query rows than the metadata has, and
Triton's ``decode_attention_fwd`` stops at ``assert q.shape[0] <= kv_indptr.shape[0] - 1``
(FlashInfer plans for the rows it was given). The rule makes the metadata be built for the
padded batch: ``get_draft_decode_metadata_batch(forward_batch, <draft runner>)``
(``inserted.DRAFT_METADATA_HELPERS``) pads a copy as the steps will be padded, and gives
the batch itself where no padding applies, so nothing changes for any other batch.

This is not a sizing site and no idle input is involved: a DP-attention batch with requests
on every rank needs it to serve at all without CUDA graphs (``docs/design.md``).
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import ATTENTION_BACKENDS
from sglang_eagle_sizing.families.release_0_5_11.sites import DRAFT_METADATA_CALLS
from sglang_eagle_sizing.syntax import code_of, dotted, statement, with_comment

LABEL = "padded-draft-metadata"
INIT = "self.draft_attn_backend.init_forward_metadata"
HELPER = inserted.DRAFT_METADATA_HELPER_NAME
COMMENT = ("DP attention pads each draft step's batch: build for the padded one.",)


def _init_call(stmt: cst.CSTNode) -> cst.Call | None:
    """``self.draft_attn_backend.init_forward_metadata(...)`` as a statement of its own."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        expr = stmt.body[0]
        if isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call):
            if dotted(expr.value.func) == INIT:
                return expr.value
    return None


class DraftMetadataRule(Rule):
    concerns = (ATTENTION_BACKENDS,)
    files = frozenset(file for file, _ in DRAFT_METADATA_CALLS)
    needles = ("init_forward_metadata",)

    def __init__(self, file: str):
        super().__init__(file)
        self._found: set[str] = set()

    def leave_SimpleStatementLine(self, original_node, updated_node):
        runner = DRAFT_METADATA_CALLS.get((self.file, self.scope))
        call = _init_call(original_node)
        if runner is None or call is None:
            return updated_node
        if self.scope in self._found:
            raise self.fail(original_node, f"{self.scope}: {INIT}(...) is called twice")
        self._found.add(self.scope)
        (arg,) = call.args
        value = arg.value
        if isinstance(value, cst.Call) and dotted(value.func) == HELPER:
            self.report(original_node, LABEL, Finding.ROUTED, self.scope)
            return updated_node
        if not (isinstance(value, cst.Name) and value.value == "forward_batch"):
            raise self.fail(
                original_node,
                f"{self.scope}: {INIT}({code_of(value)}), expected forward_batch",
            )
        self.report(original_node, LABEL, Finding.UNROUTED, self.scope)
        column = self.column_of(original_node)
        new = statement(f"{INIT}(\n    {HELPER}(forward_batch, {runner})\n)\n", column)
        new = new.with_changes(leading_lines=updated_node.leading_lines)
        return with_comment(new, *COMMENT, column=column)

    def finish(self, module: cst.Module) -> None:
        missing = sorted(
            scope for file, scope in DRAFT_METADATA_CALLS if file == self.file
            if scope not in self._found
        )
        if missing:
            raise self.fail(module, f"{missing[0]}: no {INIT}(forward_batch) to build for")
