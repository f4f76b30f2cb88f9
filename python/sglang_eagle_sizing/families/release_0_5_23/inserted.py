"""What the patch inserts into SGLang 0.5.23, as SGLang code in its own idiom."""

from __future__ import annotations

#: The module ``speculative/eagle3_draft_config.py``: config only (model files import it),
#: in the idiom of ``dflash_utils.DFlashDraftConfig`` / ``parse_dflash_draft_config``.
EAGLE3_DRAFT_CONFIG_FILE = "speculative/eagle3_draft_config.py"
EAGLE3_DRAFT_CONFIG_MODULE = "sglang.srt.speculative.eagle3_draft_config"
PARSE = "parse_eagle3_draft_config"

EAGLE3_DRAFT_CONFIG = '''\
"""The EAGLE-3 drafter's aux hidden states, read from its config alone.

What reads an EAGLE-3 drafter's aux hidden states (which target layers, how many) reads
them from ``parse_eagle3_draft_config``, so no two readers can disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

# Layers the target captures for a drafter that names none
# (``set_eagle3_layers_to_capture(None)``).
DEFAULT_NUM_AUX_HIDDEN_STATES = 3

_LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"


@dataclass(frozen=True)
class Eagle3DraftConfig:
    use_aux_hidden_state: bool
    # Target layers whose output is captured (SGLang's numbering: layer k's output);
    # None: the target's default layers.
    aux_hidden_state_layer_ids: Optional[List[int]]
    num_aux_hidden_states: int


def _eagle_config_get(draft_hf_config: Any, key: str, default: Any = None) -> Any:
    eagle_config = getattr(draft_hf_config, "eagle_config", None) or {}
    if isinstance(eagle_config, dict):
        return eagle_config.get(key, default)
    return getattr(eagle_config, key, default)


def parse_eagle3_draft_config(*, draft_hf_config: Any) -> Eagle3DraftConfig:
    """Read which target layers an EAGLE-3 drafter concatenates, and how many.

    Layer ids: ``eagle_config``'s (a dict or an object), else the top level's. Their
    number: an explicit ``num_aux_hidden_states``, else the number of layer ids, else
    the target's default layers.
    """
    layer_ids = _eagle_config_get(draft_hf_config, _LAYER_IDS_KEY)
    if layer_ids is None:
        layer_ids = getattr(draft_hf_config, _LAYER_IDS_KEY, None)
    num_aux_hidden_states = getattr(draft_hf_config, "num_aux_hidden_states", None)
    if num_aux_hidden_states is None:
        num_aux_hidden_states = (
            DEFAULT_NUM_AUX_HIDDEN_STATES if layer_ids is None else len(layer_ids)
        )
    use_aux_hidden_state = _eagle_config_get(
        draft_hf_config, "use_aux_hidden_state", True
    )
    return Eagle3DraftConfig(
        use_aux_hidden_state=bool(use_aux_hidden_state),
        aux_hidden_state_layer_ids=None if layer_ids is None else list(layer_ids),
        num_aux_hidden_states=num_aux_hidden_states,
    )
'''

#: Appended to ``EAGLE3_DRAFT_CONFIG`` by the ``draft-check`` concern: the check of the
#: drafter's config before any weights load, and the target's capture by its own class's rule
#: once the model is built (``CAPTURE``, called by ``configure_aux_hidden_state_capture``).
VALIDATE = "validate_eagle3_draft_config"
CAPTURE = "set_eagle3_layers_to_capture"
EAGLE3_DRAFT_CHECK = """

def _invalid(draft_hf_config: Any, key: str, value: Any, expected: str) -> ValueError:
    path = getattr(draft_hf_config, "name_or_path", "") or "<unknown>"
    return ValueError(
        f"Invalid {key}={value!r} in the EAGLE-3 draft model config {path}: "
        f"expected {expected}."
    )


def _check_layer_ids(draft_hf_config: Any, key: str, value: Any) -> None:
    if value is not None and (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)
        or min(value) < 0
    ):
        raise _invalid(draft_hf_config, key, value, "a non-empty list of layer ids")


def validate_eagle3_draft_config(
    draft_config: Eagle3DraftConfig, *, draft_hf_config: Any, target_hf_config: Any
) -> None:
    \"\"\"Refuse an EAGLE-3 drafter its target cannot feed, before any weights load.

    Which hidden state a layer id names is the target class's rule, checked once the
    model is built (``set_eagle3_layers_to_capture``); here only ids past every rule.
    \"\"\"
    if not draft_config.use_aux_hidden_state:
        return
    nested_key = f"eagle_config.{_LAYER_IDS_KEY}"
    nested_ids = _eagle_config_get(draft_hf_config, _LAYER_IDS_KEY)
    top_level_ids = getattr(draft_hf_config, _LAYER_IDS_KEY, None)
    _check_layer_ids(draft_hf_config, nested_key, nested_ids)
    _check_layer_ids(draft_hf_config, _LAYER_IDS_KEY, top_level_ids)
    if nested_ids is not None and top_level_ids is not None:
        if list(nested_ids) != list(top_level_ids):
            raise _invalid(
                draft_hf_config,
                _LAYER_IDS_KEY,
                top_level_ids,
                f"the layers of {nested_key}={nested_ids!r}",
            )
    if top_level_ids is None and nested_ids is None:
        captured = DEFAULT_NUM_AUX_HIDDEN_STATES
        what = "the target's default layers"
    else:
        captured = len(draft_config.aux_hidden_state_layer_ids)
        what = "its layer ids"
    if draft_config.num_aux_hidden_states != captured:
        raise _invalid(
            draft_hf_config,
            "num_aux_hidden_states",
            draft_config.num_aux_hidden_states,
            f"{captured}, the number of {what}",
        )
    target_hidden_size = target_hf_config.hidden_size
    hidden_size_in = getattr(draft_hf_config, "target_hidden_size", None)
    if hidden_size_in is None and draft_hf_config.hidden_size != target_hidden_size:
        raise _invalid(
            draft_hf_config,
            "hidden_size",
            draft_hf_config.hidden_size,
            f"{target_hidden_size}, the target's hidden size (or a "
            "target_hidden_size key saying the drafter's fc reads it)",
        )
    if hidden_size_in is not None and hidden_size_in != target_hidden_size:
        raise _invalid(
            draft_hf_config,
            "target_hidden_size",
            hidden_size_in,
            f"{target_hidden_size}, the target's hidden size",
        )
    layer_ids = draft_config.aux_hidden_state_layer_ids
    num_layers = getattr(target_hf_config, "num_hidden_layers", None)
    if layer_ids is not None and num_layers is not None and max(layer_ids) > num_layers:
        raise _invalid(
            draft_hf_config,
            _LAYER_IDS_KEY,
            layer_ids,
            f"ids up to {num_layers}: the target has {num_layers} layers",
        )


def _capture_holder(model: Any) -> Optional[Any]:
    # The module the target class keeps layers_to_capture on (None: a pipeline stage
    # before the last, which captures nothing).
    holders = [m for m in model.modules() if getattr(m, "layers_to_capture", None)]
    return holders[0] if len(holders) == 1 else None


def _last_capturable(holder: Any) -> int:
    num_layers = len(holder.layers)
    if getattr(holder, "captures_final_hidden_state", False):
        return num_layers
    return num_layers - 1


def _capture(model: Any, layer_ids: Optional[List[int]]) -> Optional[Any]:
    try:
        model.set_eagle3_layers_to_capture(layer_ids)
    except IndexError:
        # A class that flags each captured layer indexes its layers by what it
        # captures: an index past them is refused by the caller.
        holder = _capture_holder(model)
        if holder is None or max(holder.layers_to_capture) <= _last_capturable(holder):
            raise
        return holder
    return _capture_holder(model)


def set_eagle3_layers_to_capture(model: Any, layer_ids: Optional[List[int]]) -> None:
    \"\"\"Have the target capture an EAGLE-3 drafter's aux hidden states by its class's
    own ``set_eagle3_layers_to_capture``, and refuse what it cannot capture.

    Each class reads layer ids by its own rule (most capture the input of layer id + 1;
    DeepSeek-V2/V3 and GLM-4-MoE-Lite take the ids as given unless the first is 1;
    GPT-OSS takes ids ending at its layer count as given), so what it captures is read
    back: ``layers_to_capture`` holds hidden-state indices, 0 the embeddings and i the
    input of layer i. The last layer's output only where the model captures it
    (``captures_final_hidden_state``).
    \"\"\"
    holder = _capture(model, layer_ids)
    if holder is None:
        return
    captured = list(holder.layers_to_capture)
    last = _last_capturable(holder)
    if min(captured) < 0 or max(captured) > last:
        num_layers = len(holder.layers)
        if last < num_layers:
            limit = f"{num_layers} layers and does not capture the last one's output"
        else:
            limit = f"{num_layers} layers"
        raise ValueError(
            f"Invalid {_LAYER_IDS_KEY}={layer_ids!r} for the target "
            f"{type(model).__name__}: it captures hidden states {captured} for them "
            f"(i: the input of layer i), expected up to {last}: it has {limit}."
        )
"""

#: The ``speculators-eagle3`` concern (after ``draft-check``): a speculators drafter's ids
#: are indices into the target's hidden states (``output_hidden_states``, 0 the embeddings).
#: ``Eagle3DraftConfig`` carries them as declared, the check before load refuses the
#: final hidden state, and the capture gives each class the ids that make it capture
#: exactly them, whatever its rule, or refuses the drafter.
SPECULATORS_INDICES_FIELD = (
    """    num_aux_hidden_states: int
""",
    """    num_aux_hidden_states: int
    # Indices into the target's hidden states (0: the embeddings) as a speculators
    # drafter declares them; None for other drafters.
    aux_hidden_state_indices: Optional[List[int]] = None
""",
)
SPECULATORS_INDICES_PARSED = (
    """        num_aux_hidden_states=num_aux_hidden_states,
    )
""",
    """        num_aux_hidden_states=num_aux_hidden_states,
        aux_hidden_state_indices=getattr(
            draft_hf_config, "speculators_eagle_aux_hidden_state_layer_ids", None
        ),
    )
""",
)
SPECULATORS_INDICES_CHECK = (
    """    layer_ids = draft_config.aux_hidden_state_layer_ids
    num_layers = getattr(target_hf_config, "num_hidden_layers", None)
""",
    """    layer_ids = draft_config.aux_hidden_state_layer_ids
    num_layers = getattr(target_hf_config, "num_hidden_layers", None)
    indices = draft_config.aux_hidden_state_indices
    if indices is not None and num_layers is not None and max(indices) >= num_layers:
        # output_hidden_states[num_layers] is after the final norm; a target that
        # captures its last layer's output captures it before.
        raise _invalid(
            draft_hf_config,
            _LAYER_IDS_KEY,
            indices,
            f"hidden-state indices up to {num_layers - 1}: the target has "
            f"{num_layers} layers and index {num_layers}, the final hidden state "
            "after the norm, is not captured",
        )
""",
)
SPECULATORS_INDICES_CAPTURE = (
    """def set_eagle3_layers_to_capture(model: Any, layer_ids: Optional[List[int]]) -> None:
""",
    """def set_eagle3_layers_to_capture(
    model: Any,
    layer_ids: Optional[List[int]],
    hidden_state_indices: Optional[List[int]] = None,
) -> None:
""",
)
SPECULATORS_INDICES_RESOLVED = (
    """    (``captures_final_hidden_state``).
    \"\"\"
    holder = _capture(model, layer_ids)
""",
    """    (``captures_final_hidden_state``).

    ``hidden_state_indices`` (a speculators drafter's) name the hidden states to capture
    whatever the class's rule: the class gets the ids that make it capture them.
    \"\"\"
    if hidden_state_indices is not None:
        found = []
        for ids in ([i - 1 for i in hidden_state_indices], list(hidden_state_indices)):
            holder = _capture(model, ids)
            if holder is None or list(holder.layers_to_capture) == hidden_state_indices:
                return
            found.append(f"{list(holder.layers_to_capture)} for ids {ids}")
        raise ValueError(
            f"Invalid {_LAYER_IDS_KEY}={hidden_state_indices!r} (hidden-state indices) "
            f"for the target {type(model).__name__}: it captures hidden states "
            f"{' and '.join(found)}, never these."
        )
    holder = _capture(model, layer_ids)
""",
)

#: The target's ``configure_aux_hidden_state_capture`` calls ``CAPTURE`` instead of the
#: class's method (``draft-check``), with the indices the speculators concern adds to the
#: resolved ``SpecAuxHiddenStateConfig`` (``eagle_aux_hidden_state_indices``).
INDICES_FIELD = "eagle_aux_hidden_state_indices"
INDICES_FIELD_TEXT = """# Indices into the target's hidden states a speculators drafter declares
# (0: the embeddings), captured as they are.
eagle_aux_hidden_state_indices: Any = None
"""

#: Class attribute of the target models whose forward captures the last layer's output
#: (before the final norm) when ``layers_to_capture`` holds the layer count
#: (``draft-check``).
FINAL_HIDDEN_STATE_FLAG = "captures_final_hidden_state"
FINAL_HIDDEN_STATE_TEXT = """# EAGLE-3: layers_to_capture may hold the layer count: the last layer's
# output, captured before the final norm.
captures_final_hidden_state = True
"""

#: Before ``HfModelConfigParser`` in ``utils/hf_transformers/config.py`` (the
#: ``speculators-eagle3`` concern), in the idiom of ``_try_load_longcat_config`` and
#: ``_try_load_raw_mamba_config``: read before ``AutoConfig``, ``None`` for another format.
#: The converter is 0.5.11's (``inserted.SPECULATORS_CONFIG_FUNCTIONS``).
SPECULATORS_LOADER = "_try_load_speculators_eagle3_config"
SPECULATORS_LOADER_FUNCTION = '''
def _try_load_speculators_eagle3_config(
    model, revision: Optional[str], **kwargs
) -> Optional[PretrainedConfig]:
    """Recognize EAGLE-3 drafters saved by the speculators library (vLLM's format).

    They have no `model_type` (`AutoConfig.from_pretrained` rejects them) and nest the
    decoder layer's config under `transformer_layer_config`; read as the
    `LlamaForCausalLMEagle3` config they are.
    """
    config_dict, _ = PretrainedConfig.get_config_dict(
        model, revision=revision, **kwargs
    )
    if "speculators_config" not in config_dict:
        return None
    config = speculators_eagle3_to_llama_config(config_dict, f"{model}/config.json")
    config._name_or_path = str(model)
    return config
'''

#: After ``_handle_iquest_q1_mtp_draft`` in ``arg_groups/speculative_hook.py``, and called by
#: ``_handle_eagle_family`` after it (the ``draft-dtype`` concern).
DRAFT_DTYPE_HOOK = "_handle_eagle_draft_dtype"
DRAFT_DTYPE_FUNCTION = '''

def _handle_eagle_draft_dtype(server_args: ServerArgs) -> None:
    """At --dtype auto, build an EAGLE draft model in its target's dtype.

    The draft model reads the target's hidden states as they are (fc, the draft-extend
    buffers, the PD transfer), so a draft config saved in another dtype than the
    target's (a float16 drafter for a bfloat16 target) must not decide its own. The
    draft's ModelConfig takes --dtype, so --dtype becomes the target's resolved dtype.
    STANDALONE drafts from tokens alone and keeps its own dtype.
    """
    from sglang.srt.configs.model_config import _get_and_verify_dtype
    from sglang.srt.utils.hf_transformers_utils import get_config, get_hf_text_config

    cfg = resolving_view(server_args)
    if cfg.dtype != "auto" or cfg.speculative_algorithm not in ("EAGLE", "EAGLE3"):
        return
    if cfg.speculative_draft_model_path in (None, cfg.model_path):
        return
    target_dtype = model_config_of(server_args).dtype
    draft = get_config(
        cfg.speculative_draft_model_path,
        trust_remote_code=cfg.trust_remote_code,
        revision=cfg.speculative_draft_model_revision,
    )
    draft_dtype = _get_and_verify_dtype(get_hf_text_config(draft), "auto")
    if draft_dtype == target_dtype:
        return
    dtype = str(target_dtype).removeprefix("torch.")
    declare_resolution(server_args, "_handle_eagle_draft_dtype", dtype=dtype)
    logger.info(
        "--dtype auto: the draft model %s is built in the target's %s, not %s.",
        cfg.speculative_draft_model_path,
        dtype,
        str(draft_dtype).removeprefix("torch."),
    )
'''

#: After ``self.hidden_norm = RMSNorm(...)`` in ``llama_eagle3.LlamaDecoderLayer.__init__``
#: (the ``speculators-norms`` concern), read like upstream's ``norm_before_fc``: from
#: ``eagle_config`` or the top level. The forward's part is 0.5.11's
#: (``inserted.NORM_BEFORE_RESIDUAL``), in the input layer's branch.
NORM_BEFORE_RESIDUAL_FLAG = """
# Whether the input layer's residual is the normed target hidden states
# (norm_before_residual).
eagle_config = getattr(config, "eagle_config", None) or {}
self.norm_before_residual = bool(
    eagle_config.get(
        "norm_before_residual", getattr(config, "norm_before_residual", False)
    )
)
"""
