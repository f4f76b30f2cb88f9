"""``idle-verify-kv``: the idle verify input carries the KV fields the attention backends
read.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.rules.base import ClassRule, fields_of
from sglang_eagle_sizing.families.release_0_5_23.sites import IDLE_VERIFY_INPUT
from sglang_eagle_sizing.syntax import dotted, statements_with_comments

LABEL_IDLE_VERIFY = "idle-verify-kv"


class IdleVerifyInputRule(ClassRule):
    """``EagleVerifyInput`` gets the ``kv_indptr`` / ``kv_indices`` fields (``None``) the
    attention backends read of a decode or idle batch's ``spec_info``, after its last field:
    an idle verify batch padded under DP attention is then laid out from its own rows, as an
    idle draft input's is."""

    concerns = (concerns.IDLE_VERIFY_KV,)
    places = (IDLE_VERIFY_INPUT,)
    FIELDS = ("kv_indptr", "kv_indices")

    def rewrite_class(self, node, body):
        name = node.name.value
        fields = fields_of(body)
        names = {dotted(body[i].body[0].target) for i in fields}
        if set(self.FIELDS) <= names:
            self.report(node, LABEL_IDLE_VERIFY, Finding.ROUTED, name)
            return None
        if names & set(self.FIELDS) or not fields:
            raise self.fail(node, f"{name}: its fields are not the ones the rule knows")
        self.report(node, LABEL_IDLE_VERIFY, Finding.UNROUTED, name)
        new = statements_with_comments(
            "\n# The attention backends read these of a decode or idle batch's spec_info.\n"
            "# A verify input has no KV layout of its own: an idle verify batch (padded\n"
            "# under DP attention) is laid out from its own rows, as an idle draft input's.\n"
            + "".join(f"{field}: Optional[torch.Tensor] = None\n" for field in self.FIELDS),
            4,
        )
        new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), *new[0].leading_lines])
        body[fields[-1] + 1 : fields[-1] + 1] = new
        return body
