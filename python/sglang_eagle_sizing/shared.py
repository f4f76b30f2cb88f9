"""What both release families match or insert the same way, in their own places: the
target's own reading of the drafter's ``eagle_config`` (``CaptureTryRule``), and the texts of
the speculators-format EAGLE-3 converter and of the ``norm_before_residual`` residual."""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding, RewriteError, Rule
from sglang_eagle_sizing.syntax import assigned, code_of, contains, dotted, statements


def eagle_config_source(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``X`` in ``getattr(X, "eagle_config", ...)`` inside ``node``."""
    result = None

    class _Visitor(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            nonlocal result
            if (
                dotted(n.func) == "getattr"
                and len(n.args) >= 2
                and isinstance(n.args[1].value, cst.SimpleString)
                and n.args[1].value.evaluated_value == "eagle_config"
            ):
                result = n.args[0].value

    node.visit(_Visitor())
    return result


LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"


def layer_ids_owner(stmt: cst.CSTNode) -> str | None:
    """``owner`` when ``stmt`` assigns ``owner.eagle_aux_hidden_state_layer_ids`` (in a ``try``
    too): ``self`` in 0.5.11's ``ModelRunner``, ``config`` in 0.5.23's capture resolution."""
    owner = None

    def predicate(node: cst.CSTNode) -> bool:
        nonlocal owner
        if isinstance(node, cst.Assign):
            for target in node.targets:
                name = dotted(target.target) or ""
                if name.endswith("." + LAYER_IDS_KEY):
                    owner = name.rsplit(".", 1)[0]
                    return True
        return False

    contains(stmt, predicate)
    return owner


class CaptureTryRule(Rule):
    """The target's own reading of the drafter's ``eagle_config`` (``owner.eagle_use_aux_hidden_state
    = True``, then a ``try`` that assigns ``owner.eagle_aux_hidden_state_layer_ids`` and swallows
    any failure) replaced by ``replacement``, in the function ``place`` names. Both release
    families have it; each says where and with what."""

    #: (file, ``Class.method``) of the reading
    place: tuple[str, str] = ("", "")

    def __init__(self, file: str):
        super().__init__(file)
        self.found = False
        self.seen = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        self.seen = self.seen or self.scope == self.place[1]
        return True

    def finish(self, module: cst.Module) -> None:
        if not self.seen:
            raise RewriteError(self.file, 1, f"{self.place[1]}: not found (the target's capture)")

    def routed(self, stmt: cst.CSTNode) -> bool:
        """Whether ``stmt`` is what ``replacement`` writes first."""
        raise NotImplementedError

    def replacement(self, owner: str, hf_config: str) -> str:
        raise NotImplementedError

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != self.place[1]:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if self.routed(stmt):
                self.found = True
                self.report(original_node.body[index], "target-capture", Finding.ROUTED)
                return updated_node
            owner = layer_ids_owner(stmt) if isinstance(stmt, cst.Try) else None
            if owner is None:
                continue
            self.found = True
            self.report(original_node.body[index], "target-capture", Finding.UNROUTED)
            source = eagle_config_source(stmt)
            if source is None:
                raise self.fail(original_node.body[index], "eagle_config read in a form the rule does not know")
            flag = f"{owner}.eagle_use_aux_hidden_state"
            start = index - 1 if index > 0 and assigned(body[index - 1]) == flag else index
            new = statements(
                self.replacement(owner, code_of(source)), self.column_of(original_node.body[index])
            )
            new[0] = new[0].with_changes(leading_lines=body[start].leading_lines)
            body[start : index + 1] = new
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == self.place[1] and not self.found:
            raise self.fail(original_node, f"{scope}: the target's eagle_config parsing was not found")
        return updated_node


# -- inserted by both families -------------------------------------------------------

#: Before ``get_config``.
SPECULATORS_CONFIG_FUNCTIONS = '''
def is_speculators_eagle3_config(config_dict: dict) -> bool:
    """Whether a config.json is in the speculators library's format: no model_type
    and a speculators_config (its speculators_model_type names the drafter)."""
    return (
        config_dict.get("model_type") is None
        and config_dict.get("speculators_config") is not None
    )


def speculators_eagle3_to_llama_config(config_dict: dict, path: str = "config.json"):
    """The LlamaForCausalLMEagle3 config of a speculators-format EAGLE-3 drafter.

    The format nests the decoder layer's config under transformer_layer_config and
    keeps the drafter's own keys at the top level: the aux hidden-state indices (as
    declared: the top-level key counts hidden states), the draft vocabulary and the
    norm variants llama_eagle3.py reads.
    """
    from transformers import LlamaConfig

    def refuse(key: str, value, reason: str) -> ValueError:
        return ValueError(f"{path}: {key}={value!r}: {reason}")

    drafter = config_dict.get("speculators_model_type")
    if drafter != "eagle3":
        raise refuse(
            "speculators_model_type",
            drafter,
            "only eagle3 drafters load as LlamaForCausalLMEagle3",
        )
    layer = dict(config_dict.get("transformer_layer_config") or {})
    model_type = layer.pop("model_type", None)
    if model_type in (None, "qwen3"):
        # The library builds a Qwen3 layer for these (none named: its default).
        raise refuse(
            "transformer_layer_config.model_type",
            model_type,
            "the speculators library drafts with a Qwen3 decoder layer, whose "
            "attention RMS-normalizes each head's queries and keys (self_attn.q_norm, "
            "self_attn.k_norm) before RoPE; LlamaForCausalLMEagle3's llama layer "
            "has no such norms",
        )
    if model_type != "llama":
        raise refuse(
            "transformer_layer_config.model_type",
            model_type,
            "LlamaForCausalLMEagle3 computes a llama decoder layer",
        )
    num_layers = layer.get("num_hidden_layers", 1)
    if num_layers != 1:
        raise refuse(
            "transformer_layer_config.num_hidden_layers",
            num_layers,
            "LlamaForCausalLMEagle3 has one decoder layer",
        )
    if config_dict.get("norm_before_fc") and config_dict.get("fc_norm"):
        raise refuse("fc_norm", True, "norm_before_fc is set too; choose one")
    dtype = config_dict.get("dtype") or config_dict.get("torch_dtype")
    if dtype is not None:
        layer.pop("torch_dtype", None)
        layer["dtype"] = dtype
    config = LlamaConfig(**layer)
    config.architectures = ["LlamaForCausalLMEagle3"]
    config.tie_word_embeddings = False
    config.draft_vocab_size = config_dict.get("draft_vocab_size")
    if config_dict.get("target_hidden_size") is not None:
        config.target_hidden_size = config_dict["target_hidden_size"]
    layer_ids = config_dict.get("eagle_aux_hidden_state_layer_ids")
    if layer_ids is not None:
        # The format counts the target's hidden states as output_hidden_states does
        # (0: the embeddings, k: the output of layer k - 1), as the top-level key
        # means: kept as declared, for that key's reader to check, so that both
        # accept the same indices.
        config.eagle_aux_hidden_state_layer_ids = layer_ids
    # An absent norm_before_residual is true, as vLLM reads the format.
    config.norm_before_residual = bool(config_dict.get("norm_before_residual", True))
    for key in ("norm_before_fc", "fc_norm", "norm_output"):
        setattr(config, key, bool(config_dict.get(key, False)))
    return config


def auto_config_or_speculators_eagle3(
    model: str, trust_remote_code: bool = False, **kwargs
):
    """AutoConfig.from_pretrained, reading a speculators-format EAGLE-3 drafter as
    its LlamaForCausalLMEagle3 config."""
    try:
        config = AutoConfig.from_pretrained(
            model, trust_remote_code=trust_remote_code, **kwargs
        )
    except (ValueError, KeyError) as error:
        # The speculators format has no model_type, which transformers 5 refuses.
        try:
            config_dict, _ = PretrainedConfig.get_config_dict(model, **kwargs)
        except (OSError, ValueError):
            raise error
        if not is_speculators_eagle3_config(config_dict):
            raise
    else:
        # transformers 4 falls back to a model type named in the model's path.
        if not hasattr(config, "speculators_config"):
            return config
        config_dict, _ = PretrainedConfig.get_config_dict(model, **kwargs)
        if not is_speculators_eagle3_config(config_dict):
            return config
    config = speculators_eagle3_to_llama_config(config_dict, f"{model}/config.json")
    config._name_or_path = str(model)
    return config
'''

AUTO_CONFIG_CALL = "AutoConfig.from_pretrained"

#: After ``hidden_states = self.hidden_norm(hidden_states)`` in the mid layer's ``forward``.
NORM_BEFORE_RESIDUAL = """
if self.norm_before_residual:
    residual = hidden_states
"""
