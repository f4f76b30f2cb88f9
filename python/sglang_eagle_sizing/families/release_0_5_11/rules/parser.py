"""Put the parser of the drafter's config into ``spec_info.py``, right after
``SpeculativeAlgorithm`` (``inserted.PARSER_HELPERS``).

The parser's one dependency is ``SpeculativeAlgorithm``, and ``spec_info.py`` imports only
``typing``, ``enum`` and ``abc`` at run time (0.5.9 to 0.5.11): a model file
(``llama_eagle3.py``) imports the parser from there without the scheduler stack that
``eagle_info.py`` imports (``schedule_batch``, ``sgl_kernel``, the model runner). The workers and
``eagle_info.py``'s checks import it from there too.

The site is found by structure: the module-level class ``SpeculativeAlgorithm``. A module
without it is reported as an unknown site and left as it is (apply stops).
"""

from __future__ import annotations

import functools

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import PARSER
from sglang_eagle_sizing.families.release_0_5_11.sites import PARSER_FILE
from sglang_eagle_sizing.syntax import statements

FILE, ANCHOR = PARSER_FILE


@functools.cache
def names() -> tuple[str, ...]:
    """The functions ``inserted.PARSER_HELPERS`` defines (parsed when a rule first asks)."""
    return tuple(node.name.value for node in statements(inserted.PARSER_HELPERS))


class ParserRule(Rule):
    concerns = (PARSER,)
    files = frozenset({FILE})

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module):
        functions = {
            node.name.value: node
            for node in original_node.body
            if isinstance(node, cst.FunctionDef)
        }
        expected = names()
        present = [name for name in expected if name in functions]
        if len(present) == len(expected):
            self.report(functions[expected[0]], "parser", Finding.ROUTED, "<module>")
            return updated_node
        if present:
            raise self.fail(
                functions[present[0]],
                f"some of the parser's functions ({', '.join(present)}) are defined, "
                "not all: edited by hand?",
            )
        body = list(updated_node.body)
        index = next(
            (
                i
                for i, node in enumerate(original_node.body)
                if isinstance(node, cst.ClassDef) and node.name.value == ANCHOR
            ),
            None,
        )
        if index is None:
            # Not the module the parser was written for: reported, left as it is.
            self.report(original_node, "parser", Finding.UNKNOWN, "<module>")
            return updated_node
        self.report(original_node.body[index], "parser", Finding.UNROUTED, "<module>")
        blank = [cst.EmptyLine(indent=False)] * 2
        helpers = [
            node.with_changes(leading_lines=blank)
            for node in statements(inserted.PARSER_HELPERS)
        ]
        body[index + 1 : index + 1] = helpers
        return updated_node.with_changes(body=body)
