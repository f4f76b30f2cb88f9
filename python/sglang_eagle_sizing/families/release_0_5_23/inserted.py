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
    # Target layer ids, each read by the target class's own rule
    # (``set_eagle3_layers_to_capture``); None: the target's default layers.
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
            len(layer_ids) if layer_ids else DEFAULT_NUM_AUX_HIDDEN_STATES
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

#: The class contract (``capture-contract``): every target model class that captures EAGLE-3
#: aux hidden states answers, from its config and the drafter's layer ids, which hidden
#: states it captures, and its ``set_eagle3_layers_to_capture`` captures that answer.
CONTRACT = "get_eagle3_layers_to_capture"
CONTRACT_DOCSTRING = (
    "EAGLE-3: the hidden states captured for these layer ids (0: the embeddings,\n"
    "i: the output of layer i - 1), from the model's config alone."
)
#: The path for hidden-state indices beside ``set_eagle3_layers_to_capture(layer_ids)``:
#: every class that declares its capture captures exactly the indices it is handed, and its
#: ``set_eagle3_layers_to_capture`` hands it what ``get_eagle3_layers_to_capture`` answers.
CAPTURE = "set_eagle3_hidden_states_to_capture"
CAPTURE_PARAM = "hidden_state_ids"
CAPTURE_DOCSTRING = (
    "EAGLE-3: capture exactly these hidden states (0: the embeddings, i: the\n"
    "output of layer i - 1)."
)
#: Said by the classes whose model's forward captures the last layer's output (before the
#: final norm) when the answer holds the layer count.
FINAL_HIDDEN_STATE_FLAG = "eagle3_captures_final_hidden_state"
FINAL_HIDDEN_STATE_TEXT = """# EAGLE-3: the forward captures the last layer's output (before the final
# norm) for the hidden state num_hidden_layers.
eagle3_captures_final_hidden_state = True
"""

#: Appended to ``EAGLE3_DRAFT_CONFIG`` by the ``draft-check`` concern: the check of the
#: drafter's keys against its target before any process starts (``VALIDATE``, called by the
#: server arguments' ``DRAFT_CHECK_HOOK``, which imports no model module), and of the target
#: class's capture where 0.5.23 resolves it (``CHECK_CAPTURE``, called by
#: ``_resolve_eagle_aux_hidden_state`` in the target's ``ModelRunner.__init__``, before
#: ``load_model``, beside ``_check_capture_layer_ids_in_range``).
VALIDATE = "validate_eagle3_draft_config"
CHECK_CAPTURE = "check_eagle3_target_capture"
EAGLE3_DRAFT_CHECK = """

def _invalid(draft_hf_config: Any, key: str, value: Any, expected: str) -> ValueError:
    path = getattr(draft_hf_config, "name_or_path", "") or "<unknown>"
    return ValueError(
        f"Invalid {key}={value!r} in the EAGLE-3 draft model config {path}: "
        f"expected {expected}."
    )


def _layer_ids_key(draft_hf_config: Any) -> str:
    if _eagle_config_get(draft_hf_config, _LAYER_IDS_KEY) is not None:
        return f"eagle_config.{_LAYER_IDS_KEY}"
    return _LAYER_IDS_KEY


def _check_layer_ids(draft_hf_config: Any, key: str, value: Any) -> None:
    if value is not None and (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)
        or min(value) < 0
    ):
        raise _invalid(draft_hf_config, key, value, "a non-empty list of layer ids")


def check_eagle3_capture(
    model_cls: type,
    hf_config: Any,
    num_layers: int,
    layer_ids: Optional[List[int]],
    *,
    draft_hf_config: Any,
    declared: Any,
) -> None:
    \"\"\"Refuse layer ids the target class does not capture, by its own contract.

    ``declared``: the ids as the drafter's config declares them, for the message.
    \"\"\"
    name = model_cls.__name__
    if not hasattr(model_cls, "set_eagle3_layers_to_capture"):
        raise ValueError(
            f"The target model {name} does not capture EAGLE-3 aux hidden states "
            "(no set_eagle3_layers_to_capture): --speculative-algorithm EAGLE3 "
            "cannot serve it."
        )
    if not hasattr(model_cls, "get_eagle3_layers_to_capture"):
        return  # the class does not say what it captures: it is not checked
    captured = model_cls.get_eagle3_layers_to_capture(hf_config, layer_ids)
    expected = (
        f"layers the target {name} can capture: it captures hidden states "
        f"{captured} for them (i: the output of layer i - 1)"
    )
    last = num_layers - 1
    limit = f"{num_layers} layers and does not capture the last one's output"
    if getattr(model_cls, "eagle3_captures_final_hidden_state", False):
        last, limit = num_layers, f"{num_layers} layers"
    if captured and (min(captured) < 0 or max(captured) > last):
        value = "none (its default layers)" if declared is None else declared
        raise _invalid(
            draft_hf_config,
            _layer_ids_key(draft_hf_config),
            value,
            f"{expected}, 0 to {last}: it has {limit}",
        )


def validate_eagle3_draft_config(
    draft_config: Eagle3DraftConfig,
    *,
    draft_hf_config: Any,
    target_model_config: Any,
) -> None:
    \"\"\"Refuse an EAGLE-3 drafter whose keys do not fit its target, before any process
    starts (the target class's capture is checked where it is resolved:
    ``check_eagle3_target_capture``).\"\"\"
    if not draft_config.use_aux_hidden_state:
        return
    key = _layer_ids_key(draft_hf_config)
    _check_layer_ids(draft_hf_config, key, draft_config.aux_hidden_state_layer_ids)
    if draft_config.aux_hidden_state_layer_ids is None:
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
    target_hidden_size = target_model_config.hf_text_config.hidden_size
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


def check_eagle3_target_capture(
    capture: Any, *, draft_hf_config: Any, target_model_config: Any
) -> None:
    \"\"\"Refuse, before the target's weights load, the ids of the target's resolved aux
    hidden-state config (``capture``) that its model class does not capture.\"\"\"
    if not capture.eagle_use_aux_hidden_state:
        return
    from sglang.srt.model_loader.utils import get_model_architecture

    model_cls, _ = get_model_architecture(target_model_config)
    layer_ids = capture.eagle_aux_hidden_state_layer_ids
    check_eagle3_capture(
        model_cls,
        target_model_config.hf_config,
        target_model_config.hf_text_config.num_hidden_layers,
        layer_ids,
        draft_hf_config=draft_hf_config,
        declared=layer_ids,
    )
"""

#: The ``top-level-layer-ids`` concern (after ``draft-check``): ids at the top level of the
#: drafter's config (vLLM's key) are indices into the target's hidden states, as
#: transformers' ``output_hidden_states`` counts them; ``eagle_config``'s stay SGLang's
#: layer ids. Indices reach the target as they are: the model runner hands them to the
#: class's ``set_eagle3_hidden_states_to_capture`` (``CAPTURE``), layer ids to its
#: ``set_eagle3_layers_to_capture`` as the release does.
INDICES_FIELD = "eagle_aux_hidden_state_indices"
HIDDEN_STATE_INDICES_FIELD = (
    """    num_aux_hidden_states: int
""",
    """    num_aux_hidden_states: int
    # Indices into the target's hidden states (0: the embeddings, i: the output of
    # layer i - 1) the config declares instead of layer ids; None: layer ids.
    aux_hidden_state_indices: Optional[List[int]] = None
""",
)
HIDDEN_STATE_INDICES_PARSED = (
    """    Layer ids: ``eagle_config``'s (a dict or an object), else the top level's. Their
    number: an explicit ``num_aux_hidden_states``, else the number of layer ids, else
    the target's default layers.
    \"\"\"
    layer_ids = _eagle_config_get(draft_hf_config, _LAYER_IDS_KEY)
    if layer_ids is None:
        layer_ids = getattr(draft_hf_config, _LAYER_IDS_KEY, None)
    num_aux_hidden_states = getattr(draft_hf_config, "num_aux_hidden_states", None)
    if num_aux_hidden_states is None:
        num_aux_hidden_states = (
            len(layer_ids) if layer_ids else DEFAULT_NUM_AUX_HIDDEN_STATES
        )
""",
    """    Layer ids: ``eagle_config``'s (a dict or an object). Else the top level's, which
    are hidden-state indices (vLLM's meaning). Their number: an explicit
    ``num_aux_hidden_states``, else the number of ids, else the target's default layers.
    \"\"\"
    layer_ids = _eagle_config_get(draft_hf_config, _LAYER_IDS_KEY)
    indices = None
    if layer_ids is None:
        indices = getattr(draft_hf_config, _LAYER_IDS_KEY, None)
    declared = layer_ids if layer_ids is not None else indices
    num_aux_hidden_states = getattr(draft_hf_config, "num_aux_hidden_states", None)
    if num_aux_hidden_states is None:
        num_aux_hidden_states = (
            len(declared) if declared else DEFAULT_NUM_AUX_HIDDEN_STATES
        )
""",
)
HIDDEN_STATE_INDICES_RETURNED = (
    """        num_aux_hidden_states=num_aux_hidden_states,
    )
""",
    """        num_aux_hidden_states=num_aux_hidden_states,
        aux_hidden_state_indices=None if indices is None else list(indices),
    )
""",
)
#: The check before load: hidden-state indices are checked as they are, against what the
#: target class's forward captures (``set_eagle3_hidden_states_to_capture`` takes them).
HIDDEN_STATE_INDICES_CHECK_SIGNATURE = (
    """    draft_hf_config: Any,
    declared: Any,
) -> None:
    \"\"\"Refuse layer ids the target class does not capture, by its own contract.

    ``declared``: the ids as the drafter's config declares them, for the message.
    \"\"\"
""",
    """    draft_hf_config: Any,
    declared: Any,
    hidden_state_ids: Optional[List[int]] = None,
) -> None:
    \"\"\"Refuse layer ids (or hidden-state indices) the target class does not
    capture, by its own contract.

    ``declared``: the ids as the drafter's config declares them, for the message.
    ``hidden_state_ids``: the hidden-state indices the drafter declares instead of
    layer ids, captured as they are.
    \"\"\"
""",
)
HIDDEN_STATE_INDICES_CHECK_CAPTURED = (
    """    if not hasattr(model_cls, "get_eagle3_layers_to_capture"):
        return  # the class does not say what it captures: it is not checked
    captured = model_cls.get_eagle3_layers_to_capture(hf_config, layer_ids)
    expected = (
        f"layers the target {name} can capture: it captures hidden states "
        f"{captured} for them (i: the output of layer i - 1)"
    )
""",
    """    if hidden_state_ids is not None:
        if not hasattr(model_cls, "set_eagle3_hidden_states_to_capture"):
            raise _invalid(
                draft_hf_config,
                _layer_ids_key(draft_hf_config),
                declared,
                f"layer ids under eagle_config: these are hidden-state indices, "
                f"and the target {name} takes layer ids only "
                "(no set_eagle3_hidden_states_to_capture)",
            )
        captured = declared = list(hidden_state_ids)
        expected = (
            f"hidden-state indices the target {name} captures "
            "(i: the output of layer i - 1)"
        )
    elif not hasattr(model_cls, "get_eagle3_layers_to_capture"):
        return  # the class does not say what it captures: it is not checked
    else:
        captured = model_cls.get_eagle3_layers_to_capture(hf_config, layer_ids)
        expected = (
            f"layers the target {name} can capture: it captures hidden states "
            f"{captured} for them (i: the output of layer i - 1)"
        )
""",
)
HIDDEN_STATE_INDICES_CHECKED = (
    """    _check_layer_ids(draft_hf_config, key, draft_config.aux_hidden_state_layer_ids)
    if draft_config.aux_hidden_state_layer_ids is None:
        captured = DEFAULT_NUM_AUX_HIDDEN_STATES
        what = "the target's default layers"
    else:
        captured = len(draft_config.aux_hidden_state_layer_ids)
        what = "its layer ids"
""",
    """    _check_layer_ids(draft_hf_config, key, draft_config.aux_hidden_state_layer_ids)
    _check_layer_ids(draft_hf_config, key, draft_config.aux_hidden_state_indices)
    declared = draft_config.aux_hidden_state_layer_ids
    if declared is None:
        declared = draft_config.aux_hidden_state_indices
    if declared is None:
        captured = DEFAULT_NUM_AUX_HIDDEN_STATES
        what = "the target's default layers"
    else:
        captured = len(declared)
        what = "its layer ids"
""",
)
HIDDEN_STATE_INDICES_CAPTURED = (
    """        layer_ids,
        draft_hf_config=draft_hf_config,
        declared=layer_ids,
    )
""",
    """        layer_ids,
        draft_hf_config=draft_hf_config,
        declared=layer_ids,
        hidden_state_ids=capture.eagle_aux_hidden_state_indices,
    )
""",
)

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

    They have no `model_type` (`AutoConfig.from_pretrained` rejects them), a
    `speculators_config`, a `speculators_model_type` naming the drafter, and nest the
    decoder layer's config under `transformer_layer_config`; read as the
    `LlamaForCausalLMEagle3` config they are.
    """
    config_dict, _ = PretrainedConfig.get_config_dict(
        model, revision=revision, **kwargs
    )
    # A config AutoConfig reads (a model_type) is read by it, whatever else it holds.
    if (
        config_dict.get("model_type") is not None
        or config_dict.get("speculators_config") is None
    ):
        return None
    config = speculators_eagle3_to_llama_config(config_dict, f"{model}/config.json")
    config._name_or_path = str(model)
    return config
'''

#: After ``_check_oot_speculative_algorithm`` in ``arg_groups/speculative_hook.py``, and
#: called by ``_handle_eagle_family`` after it (the ``draft-check`` concern): the drafter is
#: checked against its target with the server arguments, before any process loads weights.
DRAFT_CHECK_HOOK = "_handle_eagle3_draft_check"
#: how ``arg_groups/speculative_hook.py`` reads the server arguments (0.5.19 on)
RESOLVING_VIEW = "resolving_view"
DRAFT_CHECK_FUNCTION = '''

def _handle_eagle3_draft_check(server_args: ServerArgs) -> None:
    """Refuse an EAGLE-3 draft model its target cannot feed, before any weights load."""
    from sglang.srt.speculative.eagle3_draft_config import (
        parse_eagle3_draft_config,
        validate_eagle3_draft_config,
    )
    from sglang.srt.utils.hf_transformers_utils import get_config

    cfg = resolving_view(server_args)
    if cfg.speculative_algorithm != "EAGLE3":
        return
    if cfg.speculative_draft_model_path in (None, cfg.model_path):
        return
    draft = get_config(
        cfg.speculative_draft_model_path,
        trust_remote_code=cfg.trust_remote_code,
        revision=cfg.speculative_draft_model_revision,
    )
    validate_eagle3_draft_config(
        parse_eagle3_draft_config(draft_hf_config=draft),
        draft_hf_config=draft,
        target_model_config=model_config_of(server_args),
    )
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

#: The server-argument helpers the two functions above use, each with what a release before
#: 0.5.19 (no ``resolving_view``, ``model_config_of`` nor ``declare_resolution``) writes in
#: ``_handle_eagle_family`` instead: the fields read and written on ``server_args`` itself.
BEFORE_RESOLVING_VIEW = (
    ("    cfg = resolving_view(server_args)\n", ""),
    (
        'if cfg.dtype != "auto" or cfg.speculative_algorithm not in ("EAGLE", "EAGLE3"):',
        "if server_args.dtype != \"auto\" or server_args.speculative_algorithm not in (\n"
        '        "EAGLE",\n'
        '        "EAGLE3",\n'
        "    ):",
    ),
    ("cfg.", "server_args."),
    ("model_config_of(server_args)", "server_args.get_model_config()"),
    (
        'declare_resolution(server_args, "_handle_eagle_draft_dtype", dtype=dtype)',
        "server_args.dtype = dtype",
    ),
)


def before_resolving_view(function: str) -> str:
    """``function`` (``DRAFT_CHECK_FUNCTION`` or ``DRAFT_DTYPE_FUNCTION``) as a release before
    0.5.19 writes it."""
    for new, old in BEFORE_RESOLVING_VIEW:
        function = function.replace(new, old)
    return function


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

#: Each EAGLE-3 capture of Gemma-3's ``Gemma3TextModel.forward`` (the ``gemma3-aux-residual``
#: concern): the decoder layer returns its branch and the residual stream apart, and the
#: layer's output is their sum; before the first layer (no residual yet) the embeddings.
GEMMA3_CAPTURE = (
    "aux_hidden_states.append(\n"
    "    hidden_states if residual is None else hidden_states + residual\n"
    ")"
)
