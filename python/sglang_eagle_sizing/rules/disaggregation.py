"""Route the PD-disaggregation metadata buffers through the decode-phase contract.

``Scheduler.init_disaggregation`` sizes ``MetadataBuffers`` with
``hidden_size=(<draft width> if <speculative> else 16)`` and a matching
``hidden_states_dtype=``; the speculative branch of each becomes
``EagleDraftInput.hidden_size_for(self.draft_worker)`` / ``dtype_for``. The condition and the
non-speculative fallback stay as they are.
"""

from __future__ import annotations

import libcst as cst

from ..engine import Finding, Rule
from ..sites import Kind, SITES, site_for
from ..syntax import dotted, keyword_arg, same_expression

FILES = frozenset(s.file for s in SITES if s.kind is Kind.METADATA_BUFFER)
KEYWORDS = {"hidden_size": "hidden_size_for", "hidden_states_dtype": "dtype_for"}


def _conditional(arg: cst.Arg | None) -> cst.IfExp | None:
    return arg.value if arg is not None and isinstance(arg.value, cst.IfExp) else None


class MetadataBufferRule(Rule):
    files = FILES

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
        if all(same_expression(conditionals[k].body, wanted[k]) for k in KEYWORDS):
            self.report(original_node, site.phase.value, Finding.ROUTED)
            return updated_node
        self.report(original_node, site.phase.value, Finding.UNROUTED)
        args = []
        for arg in updated_node.args:
            name = arg.keyword.value if arg.keyword is not None else None
            if name in KEYWORDS:
                arg = arg.with_changes(
                    value=arg.value.with_changes(body=cst.parse_expression(wanted[name]))
                )
            args.append(arg)
        return updated_node.with_changes(args=args)
