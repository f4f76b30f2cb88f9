"""The shapes 0.5.23's rules share: a rule scoped to one function of its site list
(``ScopedRule``), one that inserts or rewrites a single statement there (``OneStatementRule``),
one that edits a class body (``ClassRule``), and small matchers of calls.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding, RewriteError, Rule
from sglang_eagle_sizing.families.release_0_5_23.inserted import PARSE
from sglang_eagle_sizing.syntax import code_of, dotted


def parse_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func) == PARSE


class ScopedRule(Rule):
    """A rule owning some ``(file, scope)`` places: ``finish`` fails for a place whose
    function the file does not have (renamed or moved: reported, not skipped)."""

    places: tuple[tuple[str, str], ...] = ()
    #: what is read at the places, for the message when one is not found
    reads = "the aux-layer count is read there"

    def __init__(self, file: str):
        super().__init__(file)
        self.seen: set[str] = set()

    @classmethod
    def _scopes(cls, file: str) -> set[str]:
        return {scope for f, scope in cls.places if f == file}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        if self.scope in self._scopes(self.file):
            self.seen.add(self.scope)
        return True

    def finish(self, module: cst.Module) -> None:
        for scope in sorted(self._scopes(self.file) - self.seen):
            raise RewriteError(
                self.file, 1, f"{scope}: not found ({self.reads})"
            )


def two_blank_lines():
    return [cst.EmptyLine(), cst.EmptyLine()]


def parsed_into(stmt: cst.CSTNode) -> tuple[str, str] | None:
    """(``name``, ``<config>``) for ``name = parse_eagle3_draft_config(draft_hf_config=<config>)``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and parse_call(small.value)
        and small.value.args
    ):
        return small.targets[0].target.value, code_of(small.value.args[0].value)
    return None


def calls_to(name: str):
    def predicate(node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and dotted(node.func) == name

    return predicate


class OneStatementRule(ScopedRule):
    """A rule owning one place, ``(file, scope)``: ``rewrite`` returns the statements that
    replace one of the scope's statements (``None``: not the statement it looks for), or
    raises for a statement of a shape it does not know; ``routed`` says whether a statement is
    already the rewritten one. The place must hold exactly one of either. A rewrite's first
    statement keeps the leading lines of the one it replaces, before its own."""

    place: tuple[str, str] = ("", "")
    label = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.files = frozenset({cls.place[0]})  # the one file it reads: its place's

    def __init__(self, file: str):
        super().__init__(file)
        self.hits = 0
        # statements already rewritten that enclose the block being left
        self.inside_routed = 0

    @classmethod
    def _scopes(cls, file: str) -> set[str]:
        return {cls.place[1]} if file == cls.place[0] else set()

    def visit_If(self, node: cst.If) -> bool | None:
        if self.scope == self.place[1] and self.routed(node):
            self.inside_routed += 1
        return True

    def leave_If(self, original_node, updated_node):
        if self.scope == self.place[1] and self.routed(original_node):
            self.inside_routed -= 1
        return updated_node

    def finish(self, module: cst.Module) -> None:
        for scope in sorted(self._scopes(self.file) - self.seen):
            raise RewriteError(self.file, 1, f"{scope}: not found (the {self.label} change)")

    def routed(self, stmt: cst.CSTNode) -> bool:
        raise NotImplementedError

    def rewrite(self, stmt: cst.CSTNode, column: int) -> list[cst.BaseStatement] | None:
        raise NotImplementedError

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != self.place[1]:
            return updated_node
        if self.inside_routed:
            return updated_node
        body: list[cst.BaseStatement] = []
        for stmt, updated in zip(original_node.body, updated_node.body):
            if self.routed(stmt):
                self.hits += 1
                self.report(stmt, self.label, Finding.ROUTED)
                body.append(updated)
                continue
            new = self.rewrite(stmt, self.column_of(stmt))
            if new is None:
                body.append(updated)
                continue
            self.hits += 1
            self.report(stmt, self.label, Finding.UNROUTED)
            new[0] = new[0].with_changes(
                leading_lines=[*stmt.leading_lines, *new[0].leading_lines]
            )
            body.extend(new)
        return updated_node.with_changes(body=body)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == self.place[1] and self.hits != 1:
            raise self.fail(
                original_node,
                f"{scope}: {self.hits} places of the {self.label} change, the rule knows one",
            )
        return updated_node


class ClassRule(Rule):
    """A rule owning classes, ``places`` (``(file, class)`` pairs): ``rewrite_class`` returns a
    class's new body (``None``: unchanged) and reports what it found; a class of a place its
    file does not have fails the rewrite (renamed or moved: reported, not skipped)."""

    places: tuple[tuple[str, str], ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.files = frozenset(f for f, _ in cls.places)  # the files its places name

    def __init__(self, file: str):
        super().__init__(file)
        self.found: set[str] = set()

    def rewrite_class(self, node: cst.ClassDef, body: list) -> list | None:
        raise NotImplementedError

    def leave_ClassDef(self, original_node, updated_node):
        name = original_node.name.value
        updated_node = super().leave_ClassDef(original_node, updated_node)
        if (self.file, name) not in self.places or self._scope:
            return updated_node
        self.found.add(name)
        body = self.rewrite_class(original_node, list(updated_node.body.body))
        if body is None:
            return updated_node
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def leave_Module(self, original_node, updated_node):
        missing = [n for f, n in self.places if f == self.file and n not in self.found]
        if missing:
            raise self.fail(original_node, f"no class {', '.join(missing)}")
        return updated_node


def fields_of(body: list) -> list[int]:
    """The indices of ``body``'s annotated fields."""
    return [
        i
        for i, s in enumerate(body)
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.AnnAssign)
    ]
