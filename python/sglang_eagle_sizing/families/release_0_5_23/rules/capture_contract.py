"""``capture-contract``: every target model class declares which hidden states it captures for
an EAGLE-3 drafter's layer ids, readable from its config alone, and captures by that answer.

Each class of 0.5.23 computes ``layers_to_capture`` inside ``set_eagle3_layers_to_capture``,
by its own rule, on the built model. The rule here moves that computation, as it is, into a
classmethod ``get_eagle3_layers_to_capture(hf_config, layer_ids)`` beside it (``self.config``
becomes ``hf_config``, the config the class is built with) and has the method assign what the
classmethod returns: what the method captures and what the classmethod answers are one
expression. A class that hands the capture to an inner model (``self.language_model``) it builds
from a class of its own file's names answers by that class's classmethod.

The method's statements are read by shape: the pipeline guard (``if not ...is_last_rank:
return``) and the ``capture_aux_hidden_states`` flags stay in the method; the statements that
compute the indices and the one assignment (or call) that hands them to the layer stack
(``self.model.layers_to_capture = ...``, ``self.model.set_eagle3_layers_to_capture(...)``, a
local ``layers_to_capture``) become the classmethod's; what follows that hand-over (flagging
layers) stays. Any other shape, or a ``self`` the classmethod cannot read from the config, is
refused with its line.
"""

from __future__ import annotations

import contextlib
import contextvars
import json

import libcst as cst

from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    CAPTURE,
    CAPTURE_DOCSTRING,
    CAPTURE_PARAM,
    CONTRACT,
    CONTRACT_DOCSTRING,
    FINAL_HIDDEN_STATE_FLAG,
    FINAL_HIDDEN_STATE_TEXT,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    CAPTURE_CONTRACT_GROUPS,
    FINAL_HIDDEN_STATE_CLASSES,
    FINAL_HIDDEN_STATE_HOLDERS,
)
from sglang_eagle_sizing.syntax import (
    assigns,
    code_of,
    contains,
    dotted,
    names_read,
    statement,
    statements_with_comments,
)

SETTER = "set_eagle3_layers_to_capture"
LAYER_IDS = "layer_ids"
HF_CONFIG = "hf_config"
LABEL = "capture-contract"
#: the hand-overs of the computed indices to the layer stack
SINK_ATTRIBUTES = ("self.model.layers_to_capture", "self.language_model.layers_to_capture")
SINK_CALL = "self.model.set_eagle3_layers_to_capture"
SINK_LOCAL = "layers_to_capture"
FLAG = "capture_aux_hidden_states"


class ContractError(Exception):
    def __init__(self, node: cst.CSTNode, message: str):
        super().__init__(message)
        self.node = node


def _setter(body) -> cst.FunctionDef | None:
    found = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == SETTER]
    return found[0] if len(found) == 1 else None


def _has(body, name: str) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in body)


def _param(setter: cst.FunctionDef) -> cst.Param | None:
    params = setter.params.params
    if len(params) == 2 and params[0].name.value == "self":
        return params[1]
    return None


def _is_guard(stmt) -> bool:
    return (
        isinstance(stmt, cst.If)
        and stmt.orelse is None
        and "is_last_rank" in code_of(stmt.test)
        and all(
            isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Return)
            for s in stmt.body.body
        )
    )


def _is_flag(stmt) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Assign)
        and len(stmt.body[0].targets) == 1
        and (dotted(stmt.body[0].targets[0].target) or "").endswith("." + FLAG)
    )


def _sink(stmt) -> tuple[str, cst.BaseExpression] | None:
    """(``kind``, the indices) for a hand-over statement: ``kind`` the target it assigns
    or the call it makes."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = dotted(small.targets[0].target)
        if target in (*SINK_ATTRIBUTES, SINK_LOCAL) and dotted(small.value) != SINK_LOCAL:
            return target, small.value
    if (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and dotted(small.value.func) == SINK_CALL
        and len(small.value.args) == 1
        # handing over a local computed before is not the computation
        and dotted(small.value.args[0].value) != SINK_LOCAL
    ):
        return SINK_CALL, small.value.args[0].value
    return None


def _has_sink(node) -> bool:
    return contains(node, lambda n: isinstance(n, cst.SimpleStatementLine) and _sink(n) is not None)


def _hands_over(setter: cst.FunctionDef) -> bool:
    """Whether the method captures what the class declares, or asks an inner model."""
    asks_contract = contains(
        setter, lambda n: isinstance(n, cst.Call) and dotted(n.func) == f"self.{CAPTURE}"
    ) and contains(
        setter, lambda n: isinstance(n, cst.Call) and dotted(n.func) == f"self.{CONTRACT}"
    )
    return asks_contract or (not _has_sink(setter) and contains(setter, _calls_inner_setter))


def _calls_inner_setter(node) -> bool:
    name = dotted(node.func) if isinstance(node, cst.Call) else None
    return bool(name) and name.startswith("self.") and name.endswith("." + SETTER)


class _ToClassmethod(cst.CSTTransformer):
    """The rule block as the classmethod's body: flags dropped, hand-overs returned,
    ``self.config`` read as ``hf_config``."""

    def __init__(self):
        super().__init__()
        self.kinds: set[str] = set()
        self.flags: list[str] = []

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if _is_flag(original_node):
            self.flags.append(code_of(original_node.body[0]).strip())
            return cst.RemovalSentinel.REMOVE
        sink = _sink(original_node)
        if sink is None:
            return updated_node
        kind, _ = sink
        self.kinds.add(kind)
        value = _sink(updated_node)[1]
        return updated_node.with_changes(body=[cst.Return(value=value)])

    def leave_Attribute(self, original_node, updated_node):
        if dotted(original_node) == "self.config":
            return cst.Name(HF_CONFIG)
        return updated_node

    def leave_Call(self, original_node, updated_node):
        # the layer count, built by make_layers from the config
        if (
            dotted(original_node.func) == "len"
            and len(original_node.args) == 1
            and dotted(original_node.args[0].value) == "self.model.layers"
        ):
            return cst.parse_expression(f"{HF_CONFIG}.num_hidden_layers")
        return updated_node


def _returns_annotation(param: cst.Param) -> str:
    ann = code_of(param.annotation.annotation) if param.annotation else ""
    if ann.startswith("Optional[") and ann.endswith("]"):
        return ann[len("Optional[") : -1]
    return "List[int]"


def _classmethod(param: cst.Param, body_code: str) -> cst.BaseStatement:
    ann = code_of(param.annotation.annotation) if param.annotation else "Optional[List[int]]"
    text = (
        "@classmethod\n"
        f"def {CONTRACT}(\n"
        f"    cls, {HF_CONFIG}, {LAYER_IDS}: {ann} = None\n"
        f") -> {_returns_annotation(param)}:\n"
        f'    """{CONTRACT_DOCSTRING}"""\n'
        + "".join("    " + line if line.strip() else line for line in body_code.splitlines(True))
    )
    return _indent_docstring(statement(text, 4), "    " * 2)


def _indent_docstring(function: cst.FunctionDef, indent: str) -> cst.FunctionDef:
    """The docstring's continuation lines at the body's indentation (black formats the
    function at column 0; the class body puts it at 4)."""
    first = function.body.body[0]
    string = first.body[0].value
    lines = string.value.split("\n")
    value = "\n".join([lines[0], *(indent + line.lstrip() for line in lines[1:])])
    first = first.with_changes(
        body=[first.body[0].with_changes(value=string.with_changes(value=value))]
    )
    return function.with_changes(
        body=function.body.with_changes(body=[first, *function.body.body[1:]])
    )


def _capture_method(param: cst.Param, body: list) -> cst.FunctionDef:
    """``set_eagle3_hidden_states_to_capture(self, hidden_state_ids)`` with ``body`` after
    its docstring."""
    text = (
        f"def {CAPTURE}(self, {CAPTURE_PARAM}: {_returns_annotation(param)}):\n"
        f'    """{CAPTURE_DOCSTRING}"""\n'
    )
    method = _indent_docstring(statement(text, 4), "    " * 2)
    first = method.body.body[0]
    return method.with_changes(body=method.body.with_changes(body=[first, *body]))


def _setter_body(docstring: list) -> list:
    """The method ``set_eagle3_layers_to_capture`` as it is left: the class's rule, handed to
    the path for hidden-state indices."""
    call = f"self.{CAPTURE}(\n    self.{CONTRACT}(self.config, {LAYER_IDS})\n)\n"
    return [*docstring, *statements_with_comments(call, 8)]


def _rule_contract(setter: cst.FunctionDef, param: cst.Param):
    """(the classmethod, the method's new body, the capture method's body after its
    docstring) for a method that computes its indices."""
    body = list(setter.body.body)
    docstring = []
    if (
        body
        and isinstance(body[0], cst.SimpleStatementLine)
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, cst.SimpleString)
    ):
        docstring, body = body[:1], body[1:]
    guards = []
    while body and _is_guard(body[0]):
        guards.append(body.pop(0))
    flags = []
    rule = []
    with_sink = [i for i, s in enumerate(body) if _has_sink(s)]
    if not with_sink:
        raise ContractError(setter, f"{SETTER}: no layers_to_capture the rule knows")
    last = with_sink[-1]
    for stmt in body[: last + 1]:
        if _is_flag(stmt) and not rule:
            flags.append(stmt)
        else:
            rule.append(stmt)
    post = body[last + 1 :]
    for stmt in post:
        if contains(stmt, lambda n: isinstance(n, cst.Return) and n.value is not None):
            raise ContractError(stmt, f"{SETTER}: returns a value after the capture")
    to_classmethod = _ToClassmethod()
    moved = [s.visit(to_classmethod) for s in rule]
    if len(to_classmethod.kinds) != 1:
        raise ContractError(
            setter,
            f"{SETTER}: its indices go to {sorted(to_classmethod.kinds)}, the rule knows one place",
        )
    (kind,) = to_classmethod.kinds
    for stmt, original in zip(moved, rule):
        if "self" in names_read(stmt):
            raise ContractError(
                original,
                f"{SETTER}: reads the model ({code_of(stmt).strip().splitlines()[0]}), not only its config",
            )
    # the flags the branches set, set once before them
    inner = sorted(set(to_classmethod.flags))
    names = {code_of(f.body[0]).strip() for f in flags}
    for flag in inner:
        if flag not in names:
            flags.append(statement(flag + "\n"))
            names.add(flag)
    if inner and not _every_branch_flags(rule, inner):
        raise ContractError(setter, f"{SETTER}: a branch does not set {FLAG}")
    post_reads = {n for s in post for n in names_read(s)}
    for stmt in rule:
        local = _local(stmt)
        if local is not None and local != SINK_LOCAL and local in post_reads:
            raise ContractError(stmt, f"{SETTER}: {local} is read after the capture")
    body_code = "".join(code_of(s) if i else _stripped_leading(s) for i, s in enumerate(moved))
    classmethod = _classmethod(param, body_code)
    if kind == SINK_CALL:
        hand_over = f"{SINK_CALL}({CAPTURE_PARAM})\n"
    else:
        hand_over = f"{kind} = list({CAPTURE_PARAM})\n"
    after_guards = [*flags, *statements_with_comments(hand_over, 8)]
    if guards and _blank_before(body[0]) and not _blank_before(after_guards[0]):
        # the blank line after the guards, once (a flag kept from the body carries it)
        after_guards[0] = after_guards[0].with_changes(
            leading_lines=[cst.EmptyLine(indent=False), *after_guards[0].leading_lines]
        )
    return classmethod, _setter_body(docstring), [*guards, *after_guards, *post]


def _blank_before(stmt) -> bool:
    return bool(stmt.leading_lines) and stmt.leading_lines[0].comment is None


def _stripped_leading(stmt) -> str:
    if isinstance(stmt, (cst.SimpleStatementLine, cst.If, cst.For)):
        return code_of(
            stmt.with_changes(
                leading_lines=[l for l in stmt.leading_lines if l.comment is not None]
            )
        )
    return code_of(stmt)


def _every_branch_flags(rule, flags) -> bool:
    """Whether every ``if`` of the rule that sets a flag sets them all, in each branch."""
    for stmt in rule:
        if not contains(stmt, _is_flag):
            continue
        if not isinstance(stmt, cst.If) or stmt.orelse is None:
            return False
        for branch in (stmt.body, stmt.orelse.body):
            found = {code_of(s.body[0]).strip() for s in branch.body if _is_flag(s)}
            if not set(flags) <= found:
                return False
    return True


def _local(stmt) -> str | None:
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
        target = stmt.body[0].targets[0].target
        if isinstance(target, cst.Name):
            return target.value
    return None


def _delegate(
    setter: cst.FunctionDef, class_body, module_names: set[str]
) -> tuple[str, str] | None:
    """(the inner class, its config) for a method that only hands ``layer_ids`` to
    ``self.<inner>.set_eagle3_layers_to_capture``, the inner built in ``__init__``."""
    calls = []

    class _Find(cst.CSTVisitor):
        def visit_Call(self, n):
            name = dotted(n.func) or ""
            if name.startswith("self.") and name.endswith("." + SETTER):
                calls.append(name)

    setter.visit(_Find())
    if len(calls) != 1 or _has_sink(setter):
        return None
    inner = calls[0].removesuffix("." + SETTER)
    inits = [s for s in class_body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
    if len(inits) != 1:
        return None
    config_param = inits[0].params.params[1].name.value if len(inits[0].params.params) > 1 else None
    built = []

    class _Built(cst.CSTVisitor):
        def visit_Assign(self, n):
            if (
                len(n.targets) == 1
                and dotted(n.targets[0].target) == inner
                and isinstance(n.value, cst.Call)
            ):
                built.append(n.value)

    inits[0].visit(_Built())
    built = [c for c in built if isinstance(c.func, cst.Name)]
    if len(built) != 1 or config_param is None:
        return None
    imported = ""
    if built[0].func.value not in module_names:
        imports = _local_imports(inits[0], built[0].func.value)
        if len(imports) != 1:
            return None
        imported = imports[0]
    call = built[0]
    config = [a for a in call.args if a.keyword is not None and a.keyword.value == "config"]
    config = config or [a for a in call.args if a.keyword is None][:1]
    if not config:
        return None
    expression = code_of(config[0].value)
    renamed = cst.parse_expression(expression).visit(_Rename(config_param, HF_CONFIG))
    if "self" in names_read(renamed):
        return None
    return call.func.value, code_of(renamed), imported


def _local_imports(function: cst.FunctionDef, name: str) -> list[str]:
    """``from ... import name`` statements inside ``function``, as code."""
    found = []

    class _Find(cst.CSTVisitor):
        def visit_ImportFrom(self, n):
            if not isinstance(n.names, cst.ImportStar) and any(
                (a.asname.name if a.asname else a.name).value == name for a in n.names
            ):
                found.append(f"from {dotted(n.module)} import {name}\n")

    function.visit(_Find())
    return found


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str):
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original_node, updated_node):
        return (
            updated_node.with_changes(value=self.new)
            if original_node.value == self.old
            else updated_node
        )


class _ToCaptureDelegate(cst.CSTTransformer):
    """A delegating method's statements as its capture method's: the inner model's
    ``set_eagle3_hidden_states_to_capture`` asked (and tested for) with the indices."""

    def leave_Name(self, original_node, updated_node):
        if original_node.value == LAYER_IDS:
            return updated_node.with_changes(value=CAPTURE_PARAM)
        return updated_node

    def leave_Attribute(self, original_node, updated_node):
        if original_node.attr.value == SETTER:
            return updated_node.with_changes(attr=cst.Name(CAPTURE))
        return updated_node

    def leave_SimpleString(self, original_node, updated_node):
        if original_node.value in (f'"{SETTER}"', f"'{SETTER}'"):
            return updated_node.with_changes(value=f'"{CAPTURE}"')
        return updated_node


def _delegating_capture(setter: cst.FunctionDef, param: cst.Param) -> cst.FunctionDef:
    body = list(setter.body.body)
    if (
        body
        and isinstance(body[0], cst.SimpleStatementLine)
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, cst.SimpleString)
    ):
        body = body[1:]
    body = [s.visit(_ToCaptureDelegate()) for s in body]
    if body:
        body[0] = body[0].with_changes(
            leading_lines=[l for l in body[0].leading_lines if l.comment is not None]
        )
    return _capture_method(param, body)


def _delegating_classmethod(
    param: cst.Param, inner: str, config: str, imported: str
) -> cst.BaseStatement:
    body = f"{imported}\n" if imported else ""
    return _classmethod(param, f"{body}return {inner}.{CONTRACT}({config}, {LAYER_IDS})\n")


def _module_names(module: cst.Module) -> set[str]:
    names: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and not isinstance(
                    small.names, cst.ImportStar
                ):
                    for alias in small.names:
                        names.add((alias.asname.name if alias.asname else alias.name).value)
    return names


#: The release's facts (``sites.release_facts``) the rules write for: set by ``for_release``;
#: 0.5.23's when unset (a source rewritten alone, as the rules' own tests do).
_FACTS: contextvars.ContextVar[dict] = contextvars.ContextVar(
    "capture_contract_facts",
    default={
        "final_hidden_state": sorted({n for _, n in FINAL_HIDDEN_STATE_HOLDERS}),
        "holders": sorted({n for _, n in FINAL_HIDDEN_STATE_HOLDERS}),
    },
)


@contextlib.contextmanager
def for_release(text: str | None):
    """Within the block, the rules write for the release whose facts are ``text``."""
    token = _FACTS.set(json.loads(text)) if text else None
    try:
        yield
    finally:
        if token is not None:
            _FACTS.reset(token)


def release_fact(name: str) -> bool:
    """A yes/no fact of the release (``sites.release_facts``); yes when not read (0.5.23's)."""
    return bool(_FACTS.get().get(name, True))


def _captures_final_hidden_state(file: str, name: str) -> bool:
    """Whether the class's model's forward captures the last layer's output (read from that
    forward in the release: ``sites.release_facts``)."""
    holder = FINAL_HIDDEN_STATE_CLASSES.get((file, name))
    return holder is not None and holder[1] in _FACTS.get()["final_hidden_state"]


def _first_def(module: cst.Module, names: tuple[str, ...]) -> cst.FunctionDef | None:
    found: list[cst.FunctionDef] = []

    class _Find(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            if node.name.value in names and not found:
                found.append(node)
            return not found

    module.visit(_Find())
    return found[0] if found else None


class CaptureContractRule(Rule):
    """Every class of ``sites.CAPTURE_CONTRACT_MODELS`` that defines
    ``set_eagle3_layers_to_capture(self, layer_ids)`` gets ``get_eagle3_layers_to_capture``
    before it; a class of ``sites.FINAL_HIDDEN_STATE_CLASSES`` also says that its forward
    captures the last layer's output. The inner models whose method takes the indices
    (``layers_to_capture``) are the holders their outer classes hand them to."""

    # the patch's own methods too: a file that lost the setter but kept them is refused
    needles = (SETTER, CONTRACT, CAPTURE)
    #: the concern of ``CAPTURE_CONTRACT_GROUPS`` whose files the rule rewrites
    group = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.concerns = (cls.group,)
        cls.files = frozenset(f"models/{name}.py" for name in CAPTURE_CONTRACT_GROUPS[cls.group])

    def __init__(self, file: str):
        super().__init__(file)
        self.module_names: set[str] = set()
        self.found: set[str] = set()
        self.declared = 0

    def visit_Module(self, node):
        self.module_names = _module_names(node)
        return super().visit_Module(node)

    def leave_ClassDef(self, original_node, updated_node):
        name = original_node.name.value
        updated_node = super().leave_ClassDef(original_node, updated_node)
        if self._scope:
            return updated_node
        self.found.add(name)
        body = list(updated_node.body.body)
        setter = _setter(body)
        if setter is None:
            return updated_node
        param = _param(setter)
        if param is None or param.name.value != LAYER_IDS:
            return updated_node  # a holder: takes the indices its outer class computes
        self.declared += 1
        try:
            body = self._declare(name, body, setter, param)
        except ContractError as error:
            raise self.fail(error.node, f"{name}.{error}")
        if body is None:
            return updated_node
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def _declare(self, name, body, setter, param):
        flag_wanted = _captures_final_hidden_state(self.file, name)
        has_flag = any(assigns(s, FINAL_HIDDEN_STATE_FLAG) for s in body)
        declared = _has(body, CONTRACT) and _has(body, CAPTURE) and _hands_over(setter)
        if declared and has_flag == flag_wanted:
            self.report(setter, LABEL, Finding.ROUTED, name)
            return None
        self.report(setter, LABEL, Finding.UNROUTED, name)
        if has_flag and not flag_wanted:
            # the forward no longer captures the last layer's output (an upstream change):
            # the flag would let ids naming it pass the check and be dropped
            at = next(i for i, s in enumerate(body) if assigns(s, FINAL_HIDDEN_STATE_FLAG))
            removed = body.pop(at)
            if at < len(body):
                kept = [l for l in removed.leading_lines if l.comment is None]
                own = [l for l in body[at].leading_lines if l.comment is not None]
                body[at] = body[at].with_changes(leading_lines=[*kept, *own])
            if declared:
                return body
            setter = _setter(body)
        if (_has(body, CONTRACT) or _has(body, CAPTURE)) and not declared:
            # the method computes its own indices again (an upstream change of its rule):
            # the declaration is made anew from it
            body = [
                s
                for s in body
                if not (isinstance(s, cst.FunctionDef) and s.name.value in (CONTRACT, CAPTURE))
            ]
            setter = _setter(body)
        index = body.index(setter)
        if not _has(body, CONTRACT):
            delegate = _delegate(setter, body, self.module_names)
            if delegate is not None:
                classmethod = _delegating_classmethod(param, *delegate)
                new_setter = setter
                capture = _delegating_capture(setter, param)
            else:
                classmethod, new_body, capture_body = _rule_contract(setter, param)
                new_setter = setter.with_changes(body=setter.body.with_changes(body=new_body))
                capture = _capture_method(param, capture_body)
            classmethod = classmethod.with_changes(leading_lines=setter.leading_lines)
            new_setter = new_setter.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            capture = capture.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            body[index : index + 1] = [classmethod, new_setter, capture]
        if flag_wanted and not has_flag:
            first = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef))
            new = statements_with_comments(FINAL_HIDDEN_STATE_TEXT, 4)
            method = body[first]
            new[0] = new[0].with_changes(
                leading_lines=[
                    *[l for l in method.leading_lines if l.comment is None],
                    *new[0].leading_lines,
                ]
            )
            body[first:first] = new
            body[first + len(new)] = method.with_changes(
                leading_lines=[
                    cst.EmptyLine(indent=False),
                    *[l for l in method.leading_lines if l.comment is not None],
                ]
            )
        return body

    def leave_Module(self, original_node, updated_node):
        missing = [
            n for f, n in FINAL_HIDDEN_STATE_CLASSES if f == self.file and n not in self.found
        ]
        missing += [
            f"{n} (its {holder} in {holder_file})"
            for (f, n), (holder_file, holder) in FINAL_HIDDEN_STATE_CLASSES.items()
            if f == self.file and n in self.found and holder not in _FACTS.get()["holders"]
        ]
        if missing:
            raise self.fail(original_node, f"no class {', '.join(missing)}")
        if not self.declared:
            leftover = _first_def(original_node, (CONTRACT, CAPTURE))
            if leftover is not None:
                raise self.fail(
                    leftover,
                    f"{leftover.name.value}: the patch's method without {SETTER}({LAYER_IDS}) "
                    "beside it (a merge kept half the capture-contract change)",
                )
            raise self.fail(original_node, f"{SETTER}({LAYER_IDS}): not found (no class here)")
        return updated_node


class AddOneCaptureContractRule(CaptureContractRule):
    """The classes that add 1 and hold ``layers_to_capture`` on their model."""

    group = concerns.CAPTURE_CONTRACT


class HandedOnCaptureContractRule(CaptureContractRule):
    """The classes that add 1 and hand the indices on: an inner model's method, flags on the
    layers, a multimodal model's inner model."""

    group = concerns.CAPTURE_CONTRACT_HANDED_ON


class OwnRulesCaptureContractRule(CaptureContractRule):
    """The classes with rules of their own (DeepSeek-V2/V3, GLM-4-MoE-Lite, GPT-OSS), those
    that capture the last layer's output, and those that ask their language model."""

    group = concerns.CAPTURE_CONTRACT_OWN_RULES
