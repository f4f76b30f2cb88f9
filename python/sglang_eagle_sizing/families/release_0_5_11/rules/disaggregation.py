"""Route the PD-disaggregation metadata buffers through the decode-phase contract, with one
condition on both servers.

``Scheduler.init_disaggregation`` sizes ``MetadataBuffers`` on the prefill and on the decode
server with ``hidden_size=(<draft width> if <speculative> else 16)`` and a matching
``hidden_states_dtype=``. The prefill server writes its item into the decode server's slot
(the transfer uses the prefill side's item length), so both must agree. In 0.5.11 they do
not: the prefill condition includes STANDALONE, the decode one does not. Every such
conditional becomes ``EagleDraftInput.hidden_size_for(self.draft_worker) if CONDITION else
16`` (and ``dtype_for``), with the same ``CONDITION`` on both servers; the non-speculative
fallback stays as it is.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import PD_STANDALONE, SIZING_CONCERNS
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind, site_for
from sglang_eagle_sizing.syntax import (
    code_of,
    dotted,
    drop_unused_locals,
    keyword_arg,
    names_read,
    same_expression,
    statement,
)

FILES = frozenset(s.file for s in SITES if s.kind is Kind.METADATA_BUFFER)
KEYWORDS = {"hidden_size": "hidden_size_for", "hidden_states_dtype": "dtype_for"}
#: Which servers carry the draft state: the EAGLE family, whose draft worker the contract
#: resolves (0.5.11's prefill condition; its decode one left STANDALONE out).
CONDITION = "self.spec_algorithm.is_eagle() or self.spec_algorithm.is_standalone()"


def _conditional(arg: cst.Arg | None) -> cst.IfExp | None:
    return arg.value if arg is not None and isinstance(arg.value, cst.IfExp) else None


class MetadataBufferRule(Rule):
    concerns = SIZING_CONCERNS
    files = FILES

    def __init__(self, file: str):
        super().__init__(file)
        self._rewritten = False
        #: per enclosing function, the locals the replaced widths and dtypes read (0.5.10's
        #: ``model_config.hidden_size``): gone with them when nothing else reads them
        self._replaced: list[set[str]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        self._replaced.append(set())
        return super().visit_FunctionDef(node)

    def leave_FunctionDef(self, original_node, updated_node):
        replaced = self._replaced.pop() - {"self"}
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        return drop_unused_locals(updated_node, replaced) if replaced else updated_node

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if not self._rewritten:
            return updated_node
        self._rewritten = False
        # Render through black: the shared condition may wrap differently.
        rendered = statement(
            code_of(updated_node.with_changes(leading_lines=[])),
            self.column_of(original_node),
        )
        return rendered.with_changes(leading_lines=updated_node.leading_lines)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        if dotted(original_node.func) != "MetadataBuffers" or keyword_arg(original_node, "hidden_size") is None:
            return updated_node
        site = site_for(self.file, self.scope)
        if site is None or site.kind is not Kind.METADATA_BUFFER:
            self.report(original_node, "metadata-buffer", Finding.UNKNOWN)
            return updated_node
        input_class = site.phase.input_class
        wanted = {k: f"{input_class}.{m}({site.worker})" for k, m in KEYWORDS.items()}
        conditionals = {k: _conditional(keyword_arg(original_node, k)) for k in KEYWORDS}
        missing = [k for k, c in conditionals.items() if c is None]
        if missing:
            raise self.fail(
                original_node,
                f"{site.scope}: MetadataBuffers({missing[0]}=...) is not "
                "'<speculative> if <condition> else <fallback>'",
            )
        if all(
            same_expression(conditionals[k].body, wanted[k])
            and same_expression(conditionals[k].test, CONDITION)
            for k in KEYWORDS
        ):
            self.report(original_node, site.phase.value, Finding.ROUTED)
            return updated_node
        self.report(original_node, site.phase.value, Finding.UNROUTED)
        args = []
        for arg in updated_node.args:
            name = arg.keyword.value if arg.keyword is not None else None
            if name in KEYWORDS:
                arg = arg.with_changes(
                    value=arg.value.with_changes(
                        body=cst.parse_expression(wanted[name]),
                        test=(
                            cst.parse_expression(CONDITION)
                            if enabled(PD_STANDALONE)
                            else arg.value.test
                        ),
                    )
                )
            args.append(arg)
        self._rewritten = True
        if self._replaced:
            for name in KEYWORDS:
                self._replaced[-1] |= names_read(conditionals[name].body)
        return updated_node.with_changes(args=args)
