"""Import the names the other rules introduced, into the module's existing ``from`` import.

Runs last. A name from ``PROVIDERS`` that the module uses but neither imports nor defines is
added to the module's top-level ``from <provider> import ...``, in isort's order (constants,
classes, functions; case-insensitive), keeping the statement's parenthesised form if it had one.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.syntax import code_of, dotted, statement

PROVIDERS = {
    "EagleDraftInput": "sglang.srt.speculative.eagle_info",
    "EagleDraftExtendInput": "sglang.srt.speculative.eagle_info",
    "get_draft_decode_metadata_batch": "sglang.srt.speculative.eagle_info",
    "set_eagle_draft_dtype": "sglang.srt.speculative.eagle_info",
    "validate_eagle_draft_config": "sglang.srt.speculative.eagle_info",
    "ServerArgs": "sglang.srt.server_args",
    "SpeculativeAlgorithm": "sglang.srt.speculative.spec_info",
    # The parser of the drafter's config (inserted.PARSER_HELPERS): its public functions,
    # eagle_info.py's checks read the drafter through them too.
    "get_eagle_draft_model_config": "sglang.srt.speculative.spec_info",
    "get_eagle_num_aux_hidden_states": "sglang.srt.speculative.spec_info",
    "parse_eagle_use_aux_hidden_state": "sglang.srt.speculative.spec_info",
    "get_eagle_aux_hidden_state_layer_ids": "sglang.srt.speculative.spec_info",
    "invalid_eagle_draft_config": "sglang.srt.speculative.spec_info",
    "read_eagle_aux_hidden_state_layer_ids": "sglang.srt.speculative.spec_info",
}


def isort_key(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name.lower())
    if name[:1].isupper():
        return (1, name.lower())
    return (2, name.lower())


class _Names(cst.CSTVisitor):
    def __init__(self):
        self.used: set[str] = set()
        self.bound: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.used.add(node.value)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        alias = node.asname.name if node.asname else node.name
        if isinstance(alias, cst.Name):
            self.bound.add(alias.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound.add(node.name.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound.add(node.name.value)


class ImportRule(Rule):
    follows_others = True

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module):
        names = _Names()
        updated_node.visit(names)
        missing = sorted(
            name
            for name in PROVIDERS
            if name in names.used and name not in names.bound
        )
        if not missing:
            return updated_node
        body = list(updated_node.body)
        for name in missing:
            module = PROVIDERS[name]
            for index, stmt in enumerate(body):
                if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.ImportFrom)):
                    continue
                node = stmt.body[0]
                if node.module is None or dotted(node.module) != module or isinstance(node.names, cst.ImportStar):
                    continue
                aliases = [code_of(alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for alias in node.names]
                aliases = sorted({*aliases, name}, key=isort_key)
                exploded = node.lpar is not None and isinstance(node.names[-1].comma, cst.Comma)
                names_code = ", ".join(aliases)
                source = (
                    f"from {module} import ({names_code},)\n"
                    if exploded
                    else f"from {module} import {names_code}\n"
                )
                self.report(original_node.body[min(index, len(original_node.body) - 1)], "import", Finding.UNROUTED, "<module>")
                body[index] = statement(source).with_changes(leading_lines=stmt.leading_lines)
                break
            else:
                body.insert(
                    self._sorted_position(body, module),
                    statement(f"from {module} import {name}\n"),
                )
                self.report(original_node, "import", Finding.UNROUTED, "<module>")
        return updated_node.with_changes(body=body)

    def _sorted_position(self, body: list, module: str) -> int:
        """Where isort puts a new ``from <module> import``: after the last top-level
        ``from`` import of the same top-level package that sorts before it."""
        package = module.split(".")[0]
        position = None
        for index, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.ImportFrom):
                other = dotted(stmt.body[0].module) if stmt.body[0].module is not None else ""
                if other and other.split(".")[0] == package and other < module:
                    position = index + 1
        if position is None:  # no import of that package yet: after the last import
            position = 0
            for index, stmt in enumerate(body):
                if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
                    stmt.body[0], (cst.Import, cst.ImportFrom)
                ):
                    position = index + 1
        return position
