"""Idle inputs carry what the attention backends read of a padded idle batch.

Under DP attention an idle rank's batch is padded (``ForwardBatch.prepare_mlp_sync_batch``) and
``ModelRunner.forward_idle`` re-initialises the attention metadata whenever the padded batch is
not empty. The Triton and FlashInfer backends then read ``spec_info.kv_indptr`` and
``spec_info.kv_indices``: 0.5.11's idle ``EagleDraftInput`` (and so ``EagleDraftExtendInput``)
leaves them ``None``, and ``EagleVerifyInput`` has no such fields at all. This rule

- gives ``EagleDraftInput.create_idle_input`` (inherited by ``EagleDraftExtendInput``) and
  ``EagleVerifyInput.create_idle_input`` empty index pointers (one zero, no indices) and a
  docstring saying why;
- adds the two fields to ``EagleVerifyInput``, and a ``device`` parameter to its
  ``create_idle_input`` in place of the hard-coded ``device="cuda"``;
- passes ``device=<the worker's device>`` at every call of ``EagleVerifyInput.create_idle_input``
  (``VERIFY_IDLE_CALLERS``); a call elsewhere is reported as unknown;
- gives the v2 workers' draft-extend input, which they build inline (``EagleDraftInput(...)`` in
  ``_draft_extend_for_decode``), the same pointers when the batch is idle, where it becomes the
  batch's ``spec_info`` (``V2_EXTEND``).
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import IDLE_INPUTS
from sglang_eagle_sizing.families.release_0_5_11.sites import (
    CONTRACT_FILE,
    SPEC,
    V2_EXTEND_INPUT_FILE,
    DecodePhase,
)
from sglang_eagle_sizing.syntax import code_of, dotted, keyword_arg, statement, statements

VerifyInput = "EagleVerifyInput"
LABEL = "idle-attention"
DEVICE_LABEL = "idle-device"

#: Every caller of ``EagleVerifyInput.create_idle_input`` in 0.5.11, and the expression of its
#: device there (each worker sets ``self.device = server_args.device``).
VERIFY_IDLE_CALLERS: dict[tuple[str, str], str] = {
    (SPEC + "eagle_worker.py", "EAGLEWorker.draft"): "self.device",
    (SPEC + "eagle_worker_v2.py", "EagleDraftWorker.draft"): "self.device",
    (SPEC + "multi_layer_eagle_worker.py", "MultiLayerEagleWorker.draft"): "self.device",
    (SPEC + "multi_layer_eagle_worker_v2.py", "MultiLayerEagleDraftWorker.draft"): "self.device",
}

KWARG_NAMES = tuple(name for name, _ in inserted.IDLE_ATTENTION_KWARGS)

#: The v2 draft-extend input (built inline by the v2 workers) becomes the batch's spec_info here.
V2_EXTEND = (V2_EXTEND_INPUT_FILE, "EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache")


def _returned_call(function: cst.FunctionDef) -> cst.Call | None:
    """The ``cls(...)`` of ``return cls(...)``, the method's last statement."""
    last = function.body.body[-1] if function.body.body else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        value = last.body[0].value
        if isinstance(value, cst.Call) and dotted(value.func) == "cls":
            return value
    return None


class _CudaToDevice(cst.CSTTransformer):
    """``device="cuda"`` keyword arguments become ``device=device``."""

    def leave_Arg(self, original_node, updated_node):
        if (
            updated_node.keyword is not None
            and updated_node.keyword.value == "device"
            and isinstance(updated_node.value, cst.SimpleString)
            and updated_node.value.evaluated_value == "cuda"
        ):
            return updated_node.with_changes(value=cst.Name("device"))
        return updated_node


def _with_device_parameter(function: cst.FunctionDef) -> cst.FunctionDef:
    names = [p.name.value for p in function.params.params]
    if "device" in names:
        return function
    # A default keeps every caller the release does not know working as before.
    device = cst.Param(
        name=cst.Name("device"),
        annotation=cst.Annotation(cst.parse_expression("str")),
        default=cst.SimpleString('"cuda"'),
    )
    params = function.params.with_changes(params=[*function.params.params, device])
    return function.with_changes(params=params).visit(_CudaToDevice())


def _indent_docstring(function: cst.FunctionDef, column: int) -> cst.FunctionDef:
    """Black indents a docstring's lines for the column it formatted at (0); the method
    sits at ``column``, and libcst does not indent inside a string."""
    first = function.body.body[0]
    string = first.body[0].value if isinstance(first, cst.SimpleStatementLine) else None
    if not isinstance(string, cst.SimpleString) or "\n" not in string.value:
        return function
    head, *rest = string.value.split("\n")
    lines = [head, *((" " * column + line) if line else line for line in rest)]
    first = first.with_changes(body=[first.body[0].with_changes(value=string.with_changes(value="\n".join(lines)))])
    return function.with_changes(body=function.body.with_changes(body=[first, *function.body.body[1:]]))


class IdleAttentionRule(Rule):
    concerns = (IDLE_INPUTS,)
    files = frozenset({CONTRACT_FILE, V2_EXTEND[0]} | {file for file, _ in VERIFY_IDLE_CALLERS})
    needles = ("create_idle_input", "prepare_for_extend_to_fill_draft_kvcache")

    # -- eagle_info_v2.py: the v2 draft-extend input of an idle batch ----------------------
    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if (self.file, scope) != V2_EXTEND:
            return updated_node
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        modes = [
            i for i, stmt in enumerate(body)
            if isinstance(stmt, cst.SimpleStatementLine)
            and isinstance(stmt.body[0], cst.Assign)
            and dotted(stmt.body[0].targets[0].target) == "batch.forward_mode"
        ]
        if len(modes) != 1:
            raise self.fail(original_node, f"{scope}: expected one batch.forward_mode = ...")
        (index,) = modes
        following = body[index + 1] if index + 1 < len(body) else None
        if following is not None and "self.kv_indptr" in code_of(following):
            self.report(original_body[index], LABEL, Finding.ROUTED, scope)
            return updated_node
        self.report(original_body[index], LABEL, Finding.UNROUTED, scope)
        body.insert(index + 1, statement(inserted.V2_EXTEND_IDLE_POINTERS, self.column_of(original_body[index])))
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    # -- eagle_info.py: the idle inputs themselves ------------------------------------
    def _idle_method(self, original: cst.FunctionDef, updated: cst.FunctionDef, class_name: str):
        """Check or rewrite one ``create_idle_input``; returns the method to keep."""
        call = _returned_call(updated)
        if call is None:
            raise self.fail(original, f"{class_name}.create_idle_input does not end in return cls(...)")
        present = [name for name in KWARG_NAMES if keyword_arg(call, name) is not None]
        if class_name == VerifyInput:
            has_device = any(p.name.value == "device" for p in updated.params.params)
        else:
            has_device = True
        if len(present) == len(KWARG_NAMES) and has_device:
            return updated, Finding.ROUTED
        if present:
            raise self.fail(
                original,
                f"{class_name}.create_idle_input sets {', '.join(present)} but not all of "
                f"{', '.join(KWARG_NAMES)}: edited by hand?",
            )
        args = [arg.with_changes(comma=cst.MaybeSentinel.DEFAULT) for arg in call.args]
        for name, value in inserted.IDLE_ATTENTION_KWARGS:
            args.append(
                cst.Arg(
                    keyword=cst.Name(name),
                    value=cst.parse_expression(value),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""),
                        whitespace_after=cst.SimpleWhitespace(""),
                    ),
                )
            )
        body = list(updated.body.body)
        body[-1] = body[-1].with_changes(body=[cst.Return(value=call.with_changes(args=args))])
        (docstring,) = statements(inserted.IDLE_INPUT_DOCSTRING)
        if not (isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr)
                and isinstance(body[0].body[0].value, cst.SimpleString)):
            body.insert(0, docstring)
        function = updated.with_changes(body=updated.body.with_changes(body=body))
        if class_name == VerifyInput:
            function = _with_device_parameter(function)
        # Black lays the new arguments out as SGLang's formatter would.
        column = self.column_of(original)
        formatted = _indent_docstring(
            statement(code_of(function.with_changes(leading_lines=[])), column), column
        )
        return formatted.with_changes(leading_lines=updated.leading_lines), Finding.UNROUTED

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef):
        updated_node = super().leave_ClassDef(original_node, updated_node)
        name = original_node.name.value
        if self.file != CONTRACT_FILE or self._scope or name not in (DecodePhase, VerifyInput):
            return updated_node
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        index = next(
            (i for i, node in enumerate(body)
             if isinstance(node, cst.FunctionDef) and node.name.value == "create_idle_input"),
            None,
        )
        if index is None:
            raise self.fail(original_node, f"{name} has no create_idle_input")
        original_method = next(
            node for node in original_body
            if isinstance(node, cst.FunctionDef) and node.name.value == "create_idle_input"
        )
        body[index], status = self._idle_method(original_method, body[index], name)
        if name == VerifyInput:
            fields = {
                dotted(node.body[0].target)
                for node in body
                if isinstance(node, cst.SimpleStatementLine) and isinstance(node.body[0], cst.AnnAssign)
            }
            missing = [field for field in KWARG_NAMES if field not in fields]
            if missing and status == Finding.ROUTED:
                raise self.fail(original_node, f"{name} has no field {missing[0]}: edited by hand?")
            if missing:
                last_field = max(
                    i for i, node in enumerate(body)
                    if isinstance(node, cst.SimpleStatementLine) and isinstance(node.body[0], cst.AnnAssign)
                )
                (shown_in_class,) = statements(inserted.VERIFY_ATTENTION_FIELDS)
                new_fields = list(shown_in_class.body.body)
                new_fields[0] = new_fields[0].with_changes(
                    leading_lines=[cst.EmptyLine(indent=False), *new_fields[0].leading_lines]
                )
                body[last_field + 1 : last_field + 1] = new_fields
        self.report(original_method, LABEL, status, f"{name}.create_idle_input")
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    # -- the workers: every caller of EagleVerifyInput.create_idle_input passes its device --
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        if dotted(original_node.func) != f"{VerifyInput}.create_idle_input":
            return updated_node
        if self.file == CONTRACT_FILE:
            self.report(original_node, DEVICE_LABEL, Finding.UNKNOWN)
            return updated_node
        device = VERIFY_IDLE_CALLERS.get((self.file, self.scope))
        if device is None:
            self.report(original_node, DEVICE_LABEL, Finding.UNKNOWN)
            return updated_node
        if keyword_arg(original_node, "device") is not None:
            self.report(original_node, DEVICE_LABEL, Finding.ROUTED)
            return updated_node
        self.report(original_node, DEVICE_LABEL, Finding.UNROUTED)
        # Keep the call's layout: the new argument takes the last one's comma (up to the
        # closing parenthesis) and the last one takes the comma between arguments.
        args = list(updated_node.args)
        last = args[-1]
        between = args[0].comma if len(args) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        new_arg = cst.Arg(
            keyword=cst.Name("device"),
            value=cst.parse_expression(device),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
            comma=last.comma,
        )
        args[-1] = last.with_changes(comma=between)
        args.append(new_arg)
        return updated_node.with_changes(args=args)
