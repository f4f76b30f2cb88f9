"""Put the sizing contract into ``eagle_info.py``: the helpers, the decode-phase classmethods
on ``EagleDraftInput`` and the extend-phase class ``EagleDraftExtendInput``. The parser of the
drafter's config the helpers read is ``spec_info.py``'s (``rules/parser.py``)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import libcst as cst
from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import (
    ATTENTION_BACKENDS,
    DTYPE,
    EXTEND_WIDTH,
    ROUTING,
    TARGET_CAPTURE,
    VALIDATION,
)
from sglang_eagle_sizing.families.release_0_5_11.sites import (
    CONTRACT_FILE,
    DecodePhase,
    ExtendPhase,
)
from sglang_eagle_sizing.syntax import statements

#: Whether the release's ``ModelConfig`` has ``spec_hidden_size`` (0.5.11 does; 0.5.9 and
#: 0.5.10 do not, and read the width through ``inserted.SPEC_HIDDEN_SIZE_HELPER``).
_HAS_SPEC_HIDDEN_SIZE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "has_spec_hidden_size", default=True
)


@contextlib.contextmanager
def release_model_config(model_config_text: str | None) -> Iterator[None]:
    """Within the block, the contract is written for a release whose
    ``configs/model_config.py`` reads ``model_config_text`` (None: not read, 0.5.11's)."""
    has = model_config_text is None or "spec_hidden_size" in model_config_text
    token = _HAS_SPEC_HIDDEN_SIZE.set(has)
    try:
        yield
    finally:
        _HAS_SPEC_HIDDEN_SIZE.reset(token)


def for_release(source: str) -> str:
    return inserted.for_release(source, _HAS_SPEC_HIDDEN_SIZE.get())


def enabled_helpers() -> str:
    """The helpers of the concerns the rules write now, in the order they stand."""
    pieces = dict(inserted.HELPERS_BY_CONCERN)
    if not _HAS_SPEC_HIDDEN_SIZE.get() and enabled(ROUTING):
        pieces[ROUTING] += inserted.SPEC_HIDDEN_SIZE_HELPER
    return "".join(source for concern, source in pieces.items() if enabled(concern))

CLASSMETHOD_NAMES = ("hidden_size_for", "dtype_for")


def _defined(body, kind) -> dict[str, cst.CSTNode]:
    return {node.name.value: node for node in body if isinstance(node, kind)}


def _blank(node: cst.CSTNode, count: int) -> cst.CSTNode:
    return node.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * count)


class ContractRule(Rule):
    concerns = (TARGET_CAPTURE, VALIDATION, DTYPE, ROUTING, ATTENTION_BACKENDS)
    files = frozenset({CONTRACT_FILE})

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef):
        updated_node = super().leave_ClassDef(original_node, updated_node)
        if not enabled(ROUTING) or original_node.name.value != DecodePhase or self._scope:
            return updated_node
        methods = _defined(updated_node.body.body, cst.FunctionDef)
        present = [name for name in CLASSMETHOD_NAMES if name in methods]
        if len(present) == len(CLASSMETHOD_NAMES):
            self.report(original_node, "decode-contract", Finding.ROUTED, DecodePhase)
            return updated_node
        if present:
            raise self.fail(
                original_node,
                f"{DecodePhase} defines {', '.join(present)} but not all of "
                f"{', '.join(CLASSMETHOD_NAMES)}: edited by hand?",
            )
        self.report(original_node, "decode-contract", Finding.UNROUTED, DecodePhase)
        (shown_in_class,) = statements(for_release(inserted.DECODE_CLASSMETHODS))
        new_methods = [_blank(node, 1) for node in shown_in_class.body.body]
        body = list(updated_node.body.body)
        anchor = methods.get("create_idle_input")
        index = body.index(anchor) + 1 if anchor is not None else len(body)
        body[index:index] = new_methods
        return updated_node.with_changes(
            body=updated_node.body.with_changes(body=body)
        )

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module):
        body = list(updated_node.body)
        classes = _defined(body, cst.ClassDef)
        functions = _defined(body, cst.FunctionDef)
        original_classes = _defined(original_node.body, cst.ClassDef)
        if DecodePhase not in classes:
            raise self.fail(original_node, f"no class {DecodePhase}: not SGLang's eagle_info.py?")
        anchor_line = original_classes[DecodePhase]

        # The extend-phase class, right after EagleDraftInput.
        if not enabled(EXTEND_WIDTH):
            pass
        elif ExtendPhase in classes:
            self.report(original_classes[ExtendPhase], "extend-contract", Finding.ROUTED, ExtendPhase)
        else:
            self.report(anchor_line, "extend-contract", Finding.UNROUTED, ExtendPhase)
            (new_class,) = statements(for_release(inserted.EXTEND_CLASS))
            index = body.index(classes[DecodePhase]) + 1
            body.insert(index, _blank(new_class, 2))

        # The helpers, before the first class of the module.
        original_functions = _defined(original_node.body, cst.FunctionDef)
        source = enabled_helpers()
        names = tuple(node.name.value for node in statements(source))
        present = [name for name in names if name in functions]
        first_class = next(node for node in original_node.body if isinstance(node, cst.ClassDef))
        if not names:
            pass
        elif len(present) == len(names):
            self.report(original_functions[names[0]], "helpers", Finding.ROUTED, "<module>")
        elif present:
            raise self.fail(
                original_functions[present[0]],
                f"some of the sizing helpers ({', '.join(present)}) are defined, "
                "not all: edited by hand?",
            )
        else:
            self.report(first_class, "helpers", Finding.UNROUTED, "<module>")
            helpers = [_blank(node, 2) for node in statements(source)]
            index = next(i for i, node in enumerate(body) if isinstance(node, cst.ClassDef))
            # The decorators/blank lines of the class stay with the class.
            body[index:index] = helpers
        return updated_node.with_changes(body=body)
