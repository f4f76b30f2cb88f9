"""The code this patch inserts into SGLang, as it will read there.

Everything here is SGLang code (``torch``, ``dataclass``, ``List``, ``Optional`` and
``SpeculativeAlgorithm`` are names ``eagle_info.py`` has in scope); it imports nothing from this package. It is kept
black-formatted; a test checks that.

- ``HELPERS``: module-level functions of ``srt/speculative/eagle_info.py``: the draft-runner
  resolution and the one parser of the drafter's ``eagle_config``.
- ``DECODE_CLASSMETHODS``: ``EagleDraftInput.hidden_size_for`` / ``dtype_for`` (shown in
  their class; the methods are added to the existing ``EagleDraftInput``).
- ``EXTEND_CLASS``: ``EagleDraftExtendInput`` with its own ``hidden_size_for`` / ``dtype_for``.
"""

HELPERS = '''
def get_draft_runner(worker):
    """Return the draft model runner of an EAGLE worker.

    ``worker`` is a v1 worker (itself the draft ``TpModelWorker``: ``model_runner``),
    a v2 draft worker (``draft_runner``), a v2 worker (its ``draft_worker``'s), or a
    CUDA-graph runner's ``eagle_worker``.
    """
    draft_runner = getattr(worker, "draft_runner", None)
    if draft_runner is not None:
        return draft_runner
    if hasattr(worker, "model_runner"):
        return worker.model_runner
    return get_draft_runner(worker.draft_worker)


def _spec_hidden_size(model_config) -> int:
    return getattr(model_config, "spec_hidden_size", model_config.hidden_size)


def _get_eagle_config(draft_hf_config):
    """The drafter's ``eagle_config``: None, a dict, or an object with attributes."""
    eagle_config = getattr(draft_hf_config, "eagle_config", None)
    if isinstance(eagle_config, (str, bytes, int, float, list, tuple, set)):
        raise ValueError(
            f"Invalid eagle_config={eagle_config!r} in the draft model config "
            f"{getattr(draft_hf_config, 'name_or_path', '')!r}: expected a dict, "
            "an object with attributes, or nothing."
        )
    return eagle_config


def _get_eagle_config_value(eagle_config, key: str, default):
    if isinstance(eagle_config, dict):
        return eagle_config.get(key, default)
    return getattr(eagle_config, key, default)


def parse_eagle_use_aux_hidden_state(
    speculative_algorithm: SpeculativeAlgorithm, draft_hf_config
) -> bool:
    """Whether the draft model consumes the target's auxiliary hidden states.

    Only EAGLE-3 does, unless the drafter's ``eagle_config.use_aux_hidden_state`` is
    false. This is the one parser of the flag: every EAGLE worker reads it here, so
    the hidden-state sizes of all workers agree.
    """
    if not speculative_algorithm.is_eagle3():
        return False
    eagle_config = _get_eagle_config(draft_hf_config)
    if eagle_config is None:
        return True
    use_aux_hidden_state = _get_eagle_config_value(
        eagle_config, "use_aux_hidden_state", True
    )
    if not isinstance(use_aux_hidden_state, bool):
        raise ValueError(
            f"Invalid eagle_config.use_aux_hidden_state={use_aux_hidden_state!r} in "
            f"the draft model config {getattr(draft_hf_config, 'name_or_path', '')!r}: "
            "expected true or false."
        )
    return use_aux_hidden_state


def get_eagle_aux_hidden_state_layer_ids(draft_hf_config) -> Optional[List[int]]:
    """The target layers whose hidden states EAGLE-3 captures, as the drafter names them in
    ``eagle_config.eagle_aux_hidden_state_layer_ids``; None: the target's default layers.
    """
    eagle_config = _get_eagle_config(draft_hf_config)
    if eagle_config is None:
        return None
    layer_ids = _get_eagle_config_value(
        eagle_config, "eagle_aux_hidden_state_layer_ids", None
    )
    if layer_ids is None:
        return None
    if (
        not isinstance(layer_ids, (list, tuple))
        or not layer_ids
        or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layer_ids
        )
    ):
        raise ValueError(
            f"Invalid eagle_config.eagle_aux_hidden_state_layer_ids={layer_ids!r} in the "
            f"draft model config {getattr(draft_hf_config, 'name_or_path', '')!r}: "
            "expected a non-empty list of target layer indices."
        )
    return list(layer_ids)


def get_eagle_num_aux_hidden_states(draft_hf_config) -> int:
    """Number of target layers whose hidden states EAGLE-3 concatenates.

    The length of the drafter's ``eagle_config.eagle_aux_hidden_state_layer_ids``
    when given, else the three layers the target captures by default.
    """
    layer_ids = get_eagle_aux_hidden_state_layer_ids(draft_hf_config)
    return len(layer_ids) if layer_ids else 3


def _config_path(model_config) -> str:
    path = getattr(model_config, "model_path", None)
    return path or getattr(model_config.hf_config, "name_or_path", "") or "<unknown>"


def validate_eagle_draft_config(
    speculative_algorithm: SpeculativeAlgorithm, draft_model_config, target_model_config
) -> None:
    """Check at start-up that an EAGLE-3 drafter consumes what the target produces.

    With aux hidden states the target concatenates the hidden states of
    ``get_eagle_num_aux_hidden_states`` of its layers; a drafter that declares another
    ``target_hidden_size`` or number of aux hidden states, or whose ``fc`` takes
    another width, would fail with a shape error in the middle of serving instead.
    """
    if not speculative_algorithm.is_eagle3():
        return
    draft_hf_config = draft_model_config.hf_config

    def error(key: str, value, problem: str) -> ValueError:
        return ValueError(
            f"Invalid {key}={value!r} in the draft model config "
            f"{_config_path(draft_model_config)} for the target model config "
            f"{_config_path(target_model_config)}: {problem}"
        )

    try:
        use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
            speculative_algorithm, draft_hf_config
        )
        num_aux = get_eagle_num_aux_hidden_states(draft_hf_config)
    except ValueError as exc:
        raise ValueError(
            f"{exc} Target model config: {_config_path(target_model_config)}."
        ) from None
    if not use_aux_hidden_state:
        return
    layer_ids = get_eagle_aux_hidden_state_layer_ids(draft_hf_config)
    target_hidden_size = target_model_config.hidden_size
    declared_target_hidden_size = getattr(draft_hf_config, "target_hidden_size", None)
    if (
        declared_target_hidden_size is not None
        and declared_target_hidden_size != target_hidden_size
    ):
        raise error(
            "target_hidden_size",
            declared_target_hidden_size,
            f"the target's hidden_size is {target_hidden_size}.",
        )
    declared_num_aux = getattr(draft_hf_config, "num_aux_hidden_states", None)
    if declared_num_aux is not None and declared_num_aux != num_aux:
        raise error(
            "num_aux_hidden_states",
            declared_num_aux,
            f"the target captures {num_aux} aux hidden states.",
        )
    top_level_layer_ids = getattr(
        draft_hf_config, "eagle_aux_hidden_state_layer_ids", None
    )
    if top_level_layer_ids is not None and (
        not isinstance(top_level_layer_ids, (list, tuple))
        or len(top_level_layer_ids) != num_aux
    ):
        raise error(
            "eagle_aux_hidden_state_layer_ids",
            top_level_layer_ids,
            f"the target captures {num_aux} aux hidden states "
            "(eagle_config.eagle_aux_hidden_state_layer_ids, else 3).",
        )
    if "LlamaForCausalLMEagle3" in (draft_hf_config.architectures or []):
        # llama_eagle3.py builds fc with 3 * (target_hidden_size or hidden_size) inputs.
        fc_width = 3 * (declared_target_hidden_size or draft_model_config.hidden_size)
        if fc_width != num_aux * target_hidden_size:
            raise error(
                "eagle_config.eagle_aux_hidden_state_layer_ids",
                layer_ids,
                f"the target produces {num_aux} x {target_hidden_size} = "
                f"{num_aux * target_hidden_size} features but the draft model's fc "
                f"takes {fc_width}.",
            )
'''

DECODE_CLASSMETHODS = '''
class EagleDraftInput:
    @classmethod
    def hidden_size_for(cls, worker) -> int:
        """Width of the hidden states carried between draft steps.

        They are the draft model's own output: the draft runner's ``spec_hidden_size``.
        ``worker`` is anything ``get_draft_runner`` accepts.
        """
        return _spec_hidden_size(get_draft_runner(worker).model_config)

    @classmethod
    def dtype_for(cls, worker) -> torch.dtype:
        """Dtype of the hidden states carried between draft steps: the draft model's."""
        return get_draft_runner(worker).model_config.dtype
'''

EXTEND_CLASS = '''
@dataclass
class EagleDraftExtendInput(EagleDraftInput):
    """Draft input of the draft-extend forward that follows verify.

    Its ``hidden_states`` are produced by the target model, not by the draft model,
    so they are sized by ``hidden_size_for`` below rather than by the decode-phase
    contract of ``EagleDraftInput``.
    """

    @classmethod
    def hidden_size_for(cls, worker) -> int:
        """Width of the target hidden states fed to the draft-extend forward.

        - EAGLE-3 with auxiliary hidden states: the target concatenates the hidden
          states of its captured layers, ``num_aux * target hidden_size``.
        - STANDALONE: the draft model's ``spec_hidden_size``; the draft model does
          not read the target's hidden states.
        - Otherwise (EAGLE, EAGLE-3 without aux, MTP): the target's
          ``spec_hidden_size``.
        """
        draft_model_config = get_draft_runner(worker).model_config
        target_model_config = worker.target_worker.model_config
        if (
            worker.speculative_algorithm.is_eagle3()
            and worker.eagle_use_aux_hidden_state
        ):
            num_aux = get_eagle_num_aux_hidden_states(draft_model_config.hf_config)
            return num_aux * target_model_config.hidden_size
        if worker.speculative_algorithm.is_standalone():
            return _spec_hidden_size(draft_model_config)
        return _spec_hidden_size(target_model_config)

    @classmethod
    def dtype_for(cls, worker) -> torch.dtype:
        """Dtype of the draft-extend hidden states: the draft model's.

        The draft model consumes them and the draft-extend CUDA graph is captured
        with this dtype, so the idle input and the graph buffer agree.
        """
        return get_draft_runner(worker).model_config.dtype
'''
