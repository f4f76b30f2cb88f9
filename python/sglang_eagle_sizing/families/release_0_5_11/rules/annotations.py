"""Quote signature annotations that name ``TYPE_CHECKING``-only imports.

Without ``from __future__ import annotations``, a function's annotations are evaluated when the
``def`` runs; a name imported only under ``if TYPE_CHECKING:`` is then undefined and the module
fails to import (0.5.11's ``multi_layer_eagle_worker.py``: ``-> ModelRunner``). Quoting the
annotation is the smallest fix and reads as such in the diff.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import ANNOTATION
from sglang_eagle_sizing.syntax import code_of, contains, dotted


def _type_checking_names(module: cst.Module) -> set[str]:
    names: set[str] = set()
    runtime: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.If) and dotted(stmt.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            target = names
            blocks = stmt.body.body
        elif isinstance(stmt, cst.SimpleStatementLine):
            target = runtime
            blocks = [stmt]
        else:
            continue
        for block in blocks:
            if not isinstance(block, cst.SimpleStatementLine):
                continue
            for small in block.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        bound = alias.asname.name if alias.asname else alias.name
                        if isinstance(bound, cst.Name):
                            target.add(bound.value)
    return names - runtime


def _has_future_annotations(module: cst.Module) -> bool:
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if (
                    isinstance(small, cst.ImportFrom)
                    and small.module is not None
                    and dotted(small.module) == "__future__"
                    and not isinstance(small.names, cst.ImportStar)
                    and any(a.name.value == "annotations" for a in small.names)
                ):
                    return True
    return False


class TypeCheckingAnnotationRule(Rule):
    concerns = (ANNOTATION,)
    needles = ("TYPE_CHECKING",)

    def visit_Module(self, node: cst.Module) -> bool:
        self._names = set() if _has_future_annotations(node) else _type_checking_names(node)
        return bool(self._names)

    def leave_Annotation(self, original_node: cst.Annotation, updated_node: cst.Annotation):
        names = self._names
        if not contains(original_node.annotation, lambda n: isinstance(n, cst.Name) and n.value in names):
            return updated_node
        if isinstance(original_node.annotation, (cst.SimpleString, cst.ConcatenatedString)):
            return updated_node
        # Only signatures are evaluated at def time; body annotations are not.
        if not self._in_signature:
            return updated_node
        self.report(original_node, "annotation", Finding.UNROUTED)
        quoted = cst.SimpleString('"' + code_of(original_node.annotation) + '"')
        return updated_node.with_changes(annotation=quoted)

    _in_signature = False

    def visit_Parameters(self, node: cst.Parameters) -> bool:
        self._in_signature = True
        return True

    def leave_Parameters(self, original_node, updated_node):
        self._in_signature = False
        return updated_node

    def visit_FunctionDef_returns(self, node: cst.FunctionDef) -> None:
        self._in_signature = True

    def leave_FunctionDef_returns(self, node: cst.FunctionDef) -> None:
        self._in_signature = False
