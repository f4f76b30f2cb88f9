"""The code this patch inserts into SGLang, as it will read there.

Everything here is SGLang code (``torch``, ``dataclass``, ``List``, ``Optional``, ``Tuple``
and ``SpeculativeAlgorithm`` are names the target module has in scope); of this package it
imports only the texts both families insert (``shared.py``). It is kept black-formatted; a test
checks that.

- ``PARSER_HELPERS``: module-level functions of ``srt/speculative/spec_info.py``, after
  ``SpeculativeAlgorithm``: the one parser of the drafter's ``eagle_config`` (flag, aux layer
  ids and their number) and the config-only read of the drafter. ``spec_info.py`` imports
  only ``typing`` and ``enum`` at run time, so a model file (``llama_eagle3.py``) reads the
  drafter's config without importing the scheduler stack ``eagle_info.py`` pulls in. Every
  refusal is one ``ValueError`` built by ``invalid_eagle_draft_config``.
- ``HELPERS``: module-level functions of ``srt/speculative/eagle_info.py``, in pieces by the
  concern that inserts them (``HELPERS_BY_CONCERN``): the target's capture check; the
  start-up validation; the dtype the draft model is built with (``set_eagle_draft_dtype``);
  the draft-runner resolution; the batch the draft's attention metadata is built for. They
  read the drafter's config through the parser's readers, imported from ``spec_info``.
- ``DECODE_CLASSMETHODS``: ``EagleDraftInput.hidden_size_for`` / ``dtype_for`` (shown in
  their class; the methods are added to the existing ``EagleDraftInput``).
- ``EXTEND_CLASS``: ``EagleDraftExtendInput`` with its own ``hidden_size_for`` / ``dtype_for``.
"""

import re

from sglang_eagle_sizing.shared import (  # noqa: F401 (inserted by both families)
    AUTO_CONFIG_CALL,
    NORM_BEFORE_RESIDUAL,
    SPECULATORS_CONFIG_FUNCTIONS,
)

ROUTING_HELPERS = '''
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
'''

#: A release whose ``ModelConfig`` has no ``spec_hidden_size`` (0.5.9, 0.5.10) gets this helper
#: too, and every ``X.spec_hidden_size`` the contract reads becomes ``_spec_hidden_size(X)``
#: (``for_release``); 0.5.11's patch reads ``spec_hidden_size`` itself.
SPEC_HIDDEN_SIZE_HELPER = '''
def _spec_hidden_size(model_config) -> int:
    # ModelConfig names the width of the hidden states spec_hidden_size in later releases.
    return getattr(model_config, "spec_hidden_size", model_config.hidden_size)
'''


def for_release(source: str, has_spec_hidden_size: bool) -> str:
    """``source`` as a release reads it: as written where ``ModelConfig`` has
    ``spec_hidden_size``, else through ``_spec_hidden_size``."""
    if has_spec_hidden_size:
        return source
    return re.sub(r"([\w.()]+)\.spec_hidden_size\b", r"_spec_hidden_size(\1)", source)


#: After ``SpeculativeAlgorithm`` in ``speculative/spec_info.py`` (the ``parser`` concern).
PARSER_HELPERS = '''
def invalid_eagle_draft_config(
    draft_hf_config, key: str, value, expected: str, target_path: Optional[str] = None
) -> ValueError:
    """Build the error raised for a draft model config an EAGLE worker cannot serve:
    the key (``None``: missing), its value, what was expected and the paths."""
    draft_path = getattr(draft_hf_config, "name_or_path", "") or "<unknown>"
    where = f"the draft model config {draft_path}"
    if target_path is not None:
        where += f" for the target model config {target_path}"
    return ValueError(f"Invalid {key}={value!r} in {where}: expected {expected}.")


def _get_eagle_config_value(draft_hf_config, key: str, default):
    """``key`` of the drafter's ``eagle_config``: missing, None, a dict or an object."""
    eagle_config = getattr(draft_hf_config, "eagle_config", None)
    if eagle_config is None:
        return default
    if isinstance(eagle_config, dict):
        return eagle_config.get(key, default)
    if isinstance(eagle_config, (str, bytes, int, float, list, tuple, set)):
        raise invalid_eagle_draft_config(
            draft_hf_config,
            "eagle_config",
            eagle_config,
            "a dict, an object with attributes, or nothing",
        )
    return getattr(eagle_config, key, default)


def parse_eagle_use_aux_hidden_state(
    speculative_algorithm: SpeculativeAlgorithm, draft_hf_config
) -> bool:
    """Whether the draft model consumes the target's auxiliary hidden states: EAGLE-3
    does, unless its ``eagle_config.use_aux_hidden_state`` is false."""
    if not speculative_algorithm.is_eagle3():
        return False
    flag = _get_eagle_config_value(draft_hf_config, "use_aux_hidden_state", True)
    # null, 0 and 1 read by their truth value, as before; anything else is refused.
    if flag is not None and flag not in (0, 1):
        raise invalid_eagle_draft_config(
            draft_hf_config, "eagle_config.use_aux_hidden_state", flag, "true or false"
        )
    return bool(flag)


def read_eagle_aux_hidden_state_layer_ids(
    draft_hf_config,
) -> Tuple[Optional[str], Optional[List[int]]]:
    """(the key that declares them, the target layers the drafter names for EAGLE-3 to
    capture); (None, None): the target's default layers.

    ``eagle_config``'s ids are SGLang's: id ``i`` names layer ``i``'s output. Ids at
    the top level of the config (vLLM's key) index the target's hidden states as
    transformers' ``output_hidden_states`` does (0: the embeddings, ``k``: the output
    of layer ``k - 1``), i.e. layer ``k - 1``. ``eagle_config``'s come first.
    """
    for key, layer_ids, first, expected in (
        (
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            _get_eagle_config_value(
                draft_hf_config, "eagle_aux_hidden_state_layer_ids", None
            ),
            0,
            "a non-empty list of target layer indices",
        ),
        (
            "eagle_aux_hidden_state_layer_ids",
            getattr(draft_hf_config, "eagle_aux_hidden_state_layer_ids", None),
            1,
            "a non-empty list of indices of the target's hidden states from 1 "
            "(0, the embeddings, is not captured)",
        ),
    ):
        if layer_ids is None:
            continue
        if (
            not isinstance(layer_ids, (list, tuple))
            or not layer_ids
            or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= first
                for i in layer_ids
            )
        ):
            raise invalid_eagle_draft_config(draft_hf_config, key, layer_ids, expected)
        return key, [i - first for i in layer_ids]
    return None, None


def get_eagle_aux_hidden_state_layer_ids(draft_hf_config) -> Optional[List[int]]:
    """The target layers the drafter names for EAGLE-3 to capture; None: the target's
    default layers."""
    return read_eagle_aux_hidden_state_layer_ids(draft_hf_config)[1]


def get_eagle_num_aux_hidden_states(draft_hf_config) -> int:
    """Number of target layers whose hidden states EAGLE-3 concatenates: the layer ids
    the drafter declares, else 3; a declared ``num_aux_hidden_states`` must agree."""
    key, layer_ids = read_eagle_aux_hidden_state_layer_ids(draft_hf_config)
    num_aux = len(layer_ids) if layer_ids else 3
    declared_num_aux = getattr(draft_hf_config, "num_aux_hidden_states", None)
    if declared_num_aux is not None and declared_num_aux != num_aux:
        captured = f"layers in {key}" if key else "the target's default layers"
        raise invalid_eagle_draft_config(
            draft_hf_config,
            "num_aux_hidden_states",
            declared_num_aux,
            f"{num_aux}, the number of {captured}",
        )
    return num_aux


def get_eagle_draft_model_config(server_args: ServerArgs):
    """Build the draft ``ModelConfig`` as the draft ``TpModelWorker`` does, from the
    config alone, before the draft weights load."""
    from sglang.srt.configs.model_config import ModelConfig

    return ModelConfig.from_server_args(
        server_args,
        model_path=server_args.speculative_draft_model_path,
        model_revision=server_args.speculative_draft_model_revision,
        is_draft_model=True,
    )
'''

CAPTURE_HELPERS = '''
def get_eagle_captured_layer_ids(
    draft_hf_config, target_model_config
) -> Optional[List[int]]:
    """``get_eagle_aux_hidden_state_layer_ids``, checked against the target: its class
    must capture aux hidden states (``set_eagle3_layers_to_capture``), and layer ``i``'s
    output is captured as the input of layer ``i + 1``, so the last layer's id is
    refused, naming the key, the ids as declared and the target's layer count."""
    if parse_eagle_use_aux_hidden_state(SpeculativeAlgorithm.EAGLE3, draft_hf_config):
        from sglang.srt.model_loader.utils import get_model_architecture

        # The class the loader will build (importing its module builds nothing).
        model_cls, _ = get_model_architecture(target_model_config)
        if not hasattr(model_cls, "set_eagle3_layers_to_capture"):
            raise ValueError(
                f"The target model {model_cls.__name__} does not capture EAGLE-3 aux "
                "hidden states (no set_eagle3_layers_to_capture): "
                "--speculative-algorithm EAGLE3 cannot serve it."
            )
    key, layer_ids = read_eagle_aux_hidden_state_layer_ids(draft_hf_config)
    num_layers = target_model_config.num_hidden_layers
    if layer_ids is None or max(layer_ids) <= num_layers - 2:
        return layer_ids
    target_path = getattr(target_model_config, "model_path", None) or "<unknown>"
    if key == "eagle_aux_hidden_state_layer_ids":
        # Top-level ids count hidden states, not layers: named as declared.
        raise invalid_eagle_draft_config(
            draft_hf_config,
            key,
            [i + 1 for i in layer_ids],
            f"hidden-state indices 1 to {num_layers - 1}, which a target of "
            f"{num_layers} layers captures; index {max(layer_ids) + 1}, after its "
            "last layer, is not captured",
            target_path,
        )
    raise invalid_eagle_draft_config(
        draft_hf_config,
        key,
        layer_ids,
        f"layer ids 0 to {num_layers - 2}, whose outputs (hidden states 1 to "
        f"{num_layers - 1}) a target of {num_layers} layers captures; hidden "
        f"state {max(layer_ids) + 1} is not captured",
        target_path,
    )
'''

_VALIDATION_HEAD = '''
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
    target_path = getattr(target_model_config, "model_path", None) or "<unknown>"
    use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
        speculative_algorithm, draft_hf_config
    )
    num_aux = get_eagle_num_aux_hidden_states(draft_hf_config)
    if not use_aux_hidden_state:
        return
    target_hidden_size = target_model_config.hidden_size
    declared_target_hidden_size = getattr(draft_hf_config, "target_hidden_size", None)
    if (
        declared_target_hidden_size is not None
        and declared_target_hidden_size != target_hidden_size
    ):
        raise invalid_eagle_draft_config(
            draft_hf_config,
            "target_hidden_size",
            declared_target_hidden_size,
            f"{target_hidden_size}, the target's hidden_size",
            target_path,
        )
    if get_eagle_aux_hidden_state_layer_ids(draft_hf_config) is None:
        # Without declared ids the target captures the inputs of its layers
        # [2, L // 2, L - 3]: layer 0's input is the embedding (llama.py adds a None
        # residual to it), an index past the last layer captures nothing, and a
        # repeated one captures once, so a shallow target gives fewer than 3.
        num_layers = target_model_config.num_hidden_layers
        default_ids = [2, num_layers // 2, num_layers - 3]
        captured = {i for i in default_ids if 0 < i < num_layers}
        if len(captured) < num_aux:
            raise invalid_eagle_draft_config(
                draft_hf_config,
                "eagle_config.eagle_aux_hidden_state_layer_ids",
                None,
                f"{num_aux} layer ids for a target of {num_layers} layers: by default "
                f"it captures the inputs of its layers {default_ids}, the outputs of "
                f"only {len(captured)} of its layers",
                target_path,
            )
'''

#: The drafter's fc reads each aux hidden state as ``target_hidden_size`` (else ``hidden_size``)
#: features, whatever the number of aux layers ``fc`` takes (3 before the ``drafter-fc``
#: concern, the declared ones after it): the validation checks that width only, so no later
#: patch takes back a refusal of an earlier one.
_VALIDATION_FC_WIDTH = '''\
    if "LlamaForCausalLMEagle3" not in (draft_hf_config.architectures or []):
        return
    # llama_eagle3.py's fc reads each aux hidden state as target_hidden_size (else
    # hidden_size) features: the target's are its hidden_size wide.
    fc_hidden_size = declared_target_hidden_size or draft_model_config.hidden_size
    if fc_hidden_size == target_hidden_size:
        return
    raise invalid_eagle_draft_config(
        draft_hf_config,
        "target_hidden_size",
        declared_target_hidden_size,
        f"{target_hidden_size}, the target's hidden_size: without it the draft "
        f"model's fc reads each aux hidden state as hidden_size = {fc_hidden_size} "
        f"features, the target's are {target_hidden_size} wide",
        target_path,
    )
'''

VALIDATION_HELPERS = _VALIDATION_HEAD + _VALIDATION_FC_WIDTH

DTYPE_HELPERS = '''
def set_eagle_draft_dtype(
    server_args: ServerArgs, draft_model_config, target_model_config
) -> None:
    """Build the draft model in the target's dtype.

    An EAGLE draft model consumes the target's hidden states and shares its embedding
    (and often its lm_head), so it must compute in the target's dtype. At ``--dtype
    auto`` each model takes the dtype of its own config; when the drafter's differs
    (e.g. a float16 EAGLE-3 drafter on a bfloat16 target), ``--dtype`` and the draft
    model config take the target's, as ``ModelRunner.load_model`` sets both below
    sm80. An explicit ``--dtype`` gives both models that dtype: nothing changes.
    """
    draft_dtype = str(draft_model_config.dtype).replace("torch.", "")
    target_dtype = str(target_model_config.dtype).replace("torch.", "")
    if draft_dtype == target_dtype:
        return
    logger.info(
        f"At --dtype auto the draft model config gives {draft_dtype} and the target's "
        f"gives {target_dtype}: the draft model is built in {target_dtype}."
    )
    server_args.dtype = target_dtype
    draft_model_config.dtype = target_model_config.dtype
'''

#: What the EAGLE draft builds its steps' attention metadata for (``attention-backends``): under
#: DP attention, the batch as each step's ``ModelRunner.forward`` will pad it.
DRAFT_METADATA_HELPER_NAME = "get_draft_decode_metadata_batch"
DRAFT_METADATA_HELPERS = '''
def get_draft_decode_metadata_batch(forward_batch, draft_model_runner):
    """Return the batch to build the attention metadata of the draft decode steps for.

    Under DP attention each step's ``ModelRunner.forward`` pads the batch to the size
    the ranks agreed on (``prepare_mlp_sync_batch``), after the metadata of every step
    is built. Where it pads, this is a copy padded the same way; elsewhere the batch.
    """
    if forward_batch.global_num_tokens_cpu is None:
        return forward_batch
    padded = copy(forward_batch)
    padded.spec_info = copy(forward_batch.spec_info)
    # Each step sets input_ids and out_cache_loc to its own tokens (draft_forward),
    # which are padded; the metadata reads neither.
    tokens_per_req = getattr(forward_batch.spec_info, "num_tokens_per_req", 1)
    num_tokens = forward_batch.batch_size * tokens_per_req
    padded.input_ids = forward_batch.input_ids.new_zeros((num_tokens,))
    padded.out_cache_loc = forward_batch.out_cache_loc.new_zeros((num_tokens,))
    padded.global_num_tokens_cpu = list(forward_batch.global_num_tokens_cpu)
    if forward_batch.lora_ids is not None:
        padded.lora_ids = list(forward_batch.lora_ids)
    padded.prepare_mlp_sync_batch(draft_model_runner)
    if padded.batch_size == forward_batch.batch_size:
        return forward_batch
    return padded
'''

#: What each concern inserts at the top of ``eagle_info.py``, in the order it stands there
#: (the parser's own concern inserts ``PARSER_HELPERS`` into ``spec_info.py``).
HELPERS_BY_CONCERN = {
    "target-capture": CAPTURE_HELPERS,
    "validation": VALIDATION_HELPERS,
    "dtype": DTYPE_HELPERS,
    "routing": ROUTING_HELPERS,
    "attention-backends": DRAFT_METADATA_HELPERS,
}
HELPERS = "\n".join(HELPERS_BY_CONCERN.values())

DECODE_CLASSMETHODS = '''
class EagleDraftInput:
    @classmethod
    def hidden_size_for(cls, worker) -> int:
        """Width of the hidden states carried between draft steps.

        They are the draft model's own output: the draft runner's ``spec_hidden_size``.
        ``worker`` is anything ``get_draft_runner`` accepts.
        """
        return get_draft_runner(worker).model_config.spec_hidden_size

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
        if (
            worker.speculative_algorithm.is_eagle3()
            and worker.eagle_use_aux_hidden_state
        ):
            # Both read once, when the worker started.
            return (
                worker.eagle_num_aux_hidden_states
                * worker.target_worker.model_config.hidden_size
            )
        if worker.speculative_algorithm.is_standalone():
            return get_draft_runner(worker).model_config.spec_hidden_size
        return worker.target_worker.model_config.spec_hidden_size

    @classmethod
    def dtype_for(cls, worker) -> torch.dtype:
        """Dtype of the draft-extend hidden states: the draft model's.

        The draft model consumes them and the draft-extend CUDA graph is captured
        with this dtype, so the idle input and the graph buffer agree.
        """
        return get_draft_runner(worker).model_config.dtype
'''

#: The docstring ``EagleDraftInput.create_idle_input`` and ``EagleVerifyInput.create_idle_input``
#: get, with the two keyword arguments below added to the ``cls(...)`` they return.
IDLE_INPUT_DOCSTRING = '''
"""An input for a batch without requests.

Under DP attention an idle batch is padded to the size all ranks agreed on,
and the padded batch re-initialises the attention metadata. The Triton and
FlashInfer backends read a speculative batch's KV layout from ``kv_indptr`` and
``kv_indices``: an idle input describes no rows and no KV indices.
"""
'''

#: The attention index pointers of an idle input: one zero (no rows) and no KV indices, on the
#: ``device`` the method is given.
IDLE_ATTENTION_KWARGS = (
    ("kv_indptr", "torch.zeros((1,), dtype=torch.int32, device=device)"),
    ("kv_indices", "torch.empty((0,), dtype=torch.int32, device=device)"),
)

#: Fields ``EagleVerifyInput`` gets (shown in its class), after its last field: what the
#: attention backends read of an idle verify input.
VERIFY_ATTENTION_FIELDS = '''
class EagleVerifyInput:
    # Inputs for the attention backends of an idle batch (see create_idle_input)
    kv_indptr: Optional[torch.Tensor] = None
    kv_indices: Optional[torch.Tensor] = None
'''

#: What ``EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache`` gets right after it
#: decides the forward mode: the v2 workers' draft-extend input is built inline, not by
#: ``create_idle_input``, and an idle one must carry the same empty index pointers.
V2_EXTEND_IDLE_POINTERS = '''
if batch.forward_mode.is_idle():
    # A padded idle batch (DP attention) re-initialises the attention metadata
    # from these: no rows and no KV indices, as create_idle_input gives.
    self.kv_indptr = torch.zeros((1,), dtype=torch.int32, device=predict.device)
    self.kv_indices = torch.empty((0,), dtype=torch.int32, device=predict.device)
'''

#: What ``LlamaModel.__init__`` of ``models/llama_eagle3.py`` reads right before it builds
#: ``fc``: the flag ``project_hidden_states`` reads, from the one parser of the drafter's aux
#: layers (imported at the top of the module from ``spec_info``, which imports no scheduler
#: module).
DRAFTER_FC_FLAG = """
# Whether the target feeds the hidden states of the layers the drafter names
# (eagle_aux_hidden_state_layer_ids, else 3), concatenated: fc takes them.
self.use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
    SpeculativeAlgorithm.EAGLE3, config
)
"""

#: ``fc``'s input width.
DRAFTER_FC_WIDTH = "self.hidden_size_in * get_eagle_num_aux_hidden_states(config)"

#: What ``LlamaModel.forward`` calls instead of ``if hidden_states.shape[-1] !=
#: embeds.shape[-1]: hidden_states = self.fc(hidden_states)``.
DRAFTER_FC_CALL = "hidden_states = self.project_hidden_states(hidden_states, forward_batch)"

#: The method of ``LlamaModel`` (shown in its class) that decides, by the step, whether the
#: hidden states are the target's features for fc.
DRAFTER_FC_METHOD = '''
class LlamaModel:
    def project_hidden_states(
        self, hidden_states: torch.Tensor, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        """Return the hidden states the mid layer reads, by the forward mode.

        A draft decode step carries the draft model's own hidden states. An extend
        or draft-extend step carries the target's: with aux hidden states, the
        concatenation fc projects, which must be fc's width; without, the target's
        last hidden state, read as it is. An idle batch (DP attention) carries only
        padding rows, in the width of the phase its input was built for: the extend
        width goes through fc, so every phase leaves it hidden_size wide.
        """
        # DP attention can run a padded batch as EXTEND: the step is its own mode.
        mode = getattr(forward_batch, "_original_forward_mode", None)
        mode = mode or forward_batch.forward_mode
        width = hidden_states.shape[-1]
        if mode.is_decode() or not self.use_aux_hidden_state:
            return hidden_states
        if mode.is_idle():
            if width == self.fc.in_features:
                return self.fc(hidden_states)
            return hidden_states
        if width != self.fc.in_features:
            raise ValueError(
                f"The draft model's fc takes {self.fc.in_features} features (the "
                f"aux hidden states of {self.fc.in_features // self.hidden_size_in} "
                f"target layers of {self.hidden_size_in}), but the target's hidden "
                f"states are {width} wide."
            )
        return self.fc(hidden_states)
'''

# -- the EAGLE-3 drafter's norm variants (models/llama_eagle3.py) ----------------------

#: Before the first class of ``models/llama_eagle3.py``: where a drafter declares a norm
#: variant (the top level of its config, or its ``eagle_config``).
NORM_FLAG_FUNCTION = '''
def get_eagle3_norm_flag(config: LlamaConfig, key: str) -> bool:
    """Whether the draft model config turns on the norm variant ``key``.

    Drafters set it at the top level of their config or in their ``eagle_config``
    (NVIDIA's EAGLE-3 drafters keep ``norm_before_fc`` there). When both are set they
    must agree.
    """
    value = getattr(config, key, None)
    eagle_config = getattr(config, "eagle_config", None) or {}
    if isinstance(eagle_config, dict):
        nested_value = eagle_config.get(key)
    else:
        nested_value = getattr(eagle_config, key, None)
    if value is None:
        return bool(nested_value)
    if nested_value is not None and bool(nested_value) != bool(value):
        raise ValueError(
            f"The draft model config sets {key}={value!r} and "
            f"eagle_config.{key}={nested_value!r}: set it in one place."
        )
    return bool(value)
'''

#: After ``self.hidden_norm = RMSNorm(...)`` in the mid layer's ``__init__``.
NORM_BEFORE_RESIDUAL_FLAG = """
# Whether the residual is the normed hidden states (norm_before_residual).
self.norm_before_residual = get_eagle3_norm_flag(config, "norm_before_residual")
"""


#: After ``self.fc = ...`` in ``LlamaModel.__init__``.
FC_NORMS = """
# Some drafters normalize the target's hidden states before fc: over their
# concatenation (norm_before_fc) or per aux layer (fc_norm).
norm_before_fc = get_eagle3_norm_flag(config, "norm_before_fc")
fc_norm = get_eagle3_norm_flag(config, "fc_norm")
if norm_before_fc and fc_norm:
    raise ValueError(
        "The draft model config sets both norm_before_fc and fc_norm: "
        "fc's input is normalized one way or the other."
    )
self.input_norm = None
if norm_before_fc:
    self.input_norm = RMSNorm(self.fc.in_features, eps=config.rms_norm_eps)
self.fc_norm = None
if fc_norm:
    self.fc_norm = nn.ModuleList(
        RMSNorm(self.hidden_size_in, eps=config.rms_norm_eps)
        for _ in range(self.fc.in_features // self.hidden_size_in)
    )
# Whether the next draft step reads the normed hidden states (norm_output).
self.norm_output = get_eagle3_norm_flag(config, "norm_output")
"""

#: After ``hidden_states_to_logits, hidden_states_to_aux = self.norm(...)`` in
#: ``LlamaModel.forward``.
NORM_OUTPUT = """
if self.norm_output:
    hidden_states_to_aux = hidden_states_to_logits
"""

#: What ``LlamaModel`` calls instead of ``self.fc(...)``.
APPLY_FC = "self.apply_fc"

APPLY_FC_METHOD = '''
class LlamaModel:
    def apply_fc(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Apply fc to the aux hidden states, after the norms the drafter declares."""
        if self.input_norm is not None:
            hidden_states = self.input_norm(hidden_states)
        if self.fc_norm is not None:
            chunks = hidden_states.chunk(len(self.fc_norm), dim=-1)
            hidden_states = torch.cat(
                [norm(chunk.contiguous()) for norm, chunk in zip(self.fc_norm, chunks)],
                dim=-1,
            )
        return self.fc(hidden_states)
'''

# -- the speculators format (utils/hf_transformers/config.py, models/llama_eagle3.py) ---


#: ``get_config`` reads the config through it (``AUTO_CONFIG_CALL`` becomes it).
SPECULATORS_CONFIG_READ = "auto_config_or_speculators_eagle3"

#: At the top of ``LlamaForCausalLMEagle3.load_weights``' loop over the weights.
SPECULATORS_WEIGHT_NAME = """
# The speculators format names the decoder layer layers.0.
if name.startswith("layers.0."):
    name = "midlayer." + name[len("layers.0.") :]
"""
