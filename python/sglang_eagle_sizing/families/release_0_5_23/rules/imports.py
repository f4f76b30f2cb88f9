"""The imports of what the rules insert calls (``parse_eagle3_draft_config``,
``check_eagle3_target_capture``), added where they are used (the server arguments' check imports in its body).
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Rule
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    CHECK_CAPTURE,
    EAGLE3_DRAFT_CONFIG_MODULE,
    PARSE,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import calls_to
from sglang_eagle_sizing.syntax import contains, dotted, statement


class ParserImportRule(Rule):
    """``from sglang.srt.speculative.eagle3_draft_config import ...`` what the module calls
    of it and does not import: added to that import, else a new one among the module's
    top-level ``sglang`` imports, in isort's order."""

    follows_others = True
    needles = (PARSE, CHECK_CAPTURE)

    def leave_Module(self, original_node, updated_node):
        used = {name for name in PROVIDED if _called_unimported(updated_node, name)}
        body = list(updated_node.body)
        position = None
        for index, stmt in enumerate(body):
            module = _top_level_sglang_import(stmt)
            if module == EAGLE3_DRAFT_CONFIG_MODULE:
                imported = {dotted(a.name) for a in stmt.body[0].names}
                if used <= imported:
                    return updated_node
                body[index] = _import(used | imported).with_changes(
                    leading_lines=stmt.leading_lines
                )
                return updated_node.with_changes(body=body)
            if module is None:
                continue
            if module > EAGLE3_DRAFT_CONFIG_MODULE:
                position = index if position is None or position <= index else position
                break
            position = index + 1
        if not used:
            return updated_node
        if position is None:
            raise self.fail(original_node, "no top-level sglang import to place the parser's by")
        body.insert(position, _import(used))
        return updated_node.with_changes(body=body)


PROVIDED = (PARSE, CHECK_CAPTURE)


def _called_unimported(module: cst.Module, name: str) -> bool:
    """Whether ``name`` is called outside every function that imports it in its body (as
    the server arguments' functions do)."""

    def imports_it(node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.ImportFrom)
            and not isinstance(node.names, cst.ImportStar)
            and any(dotted(alias.name) == name for alias in node.names)
        )

    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and contains(stmt, imports_it):
            continue
        if contains(stmt, calls_to(name)):
            return True
    return False


def _import(names: set[str]) -> cst.BaseStatement:
    return statement(f"from {EAGLE3_DRAFT_CONFIG_MODULE} import {', '.join(sorted(names))}\n")


def _top_level_sglang_import(stmt: cst.CSTNode) -> str | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            module = dotted(small.module)
            if module and module.startswith("sglang."):
                return module
    return None
