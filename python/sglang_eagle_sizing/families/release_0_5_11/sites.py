"""The sizing sites of SGLang 0.5.11: where an EAGLE hidden-state width or dtype is decided.

This is the site list. Rules find sites by structure (a ``create_idle_input(hidden_size=...)``
call, a ``torch.zeros`` buffer sized by a hidden width) and look them up here by file and
enclosing ``Class.method`` to learn their phase and which worker object is in reach. A site
found in the tree but missing here is *unknown*: it is reported, never skipped.

Paths are relative to the ``sglang/srt`` folder.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle_sizing.families.release_0_5_11.concerns import (
    DRAFTER_FC,
    EXTEND_WIDTH,
    MULTI_LAYER_WIDTH,
    ROUTING,
    V2_IDLE_WIDTH,
)


class Phase(enum.Enum):
    """Which half of the sizing contract a site belongs to."""

    #: the tensor carried between draft steps: the draft model's own hidden state
    DECODE = "decode"
    #: the tensor fed to the draft-extend forward: the target's (aux-widened) hidden state
    EXTEND = "extend"

    @property
    def input_class(self) -> str:
        """The ``eagle_info`` class whose classmethods state this phase's contract."""
        return DecodePhase if self is Phase.DECODE else ExtendPhase


DecodePhase = "EagleDraftInput"
ExtendPhase = "EagleDraftExtendInput"


class Kind(enum.Enum):
    #: ``EagleDraftInput.create_idle_input(..., hidden_size=..., dtype=...)``
    IDLE_INPUT = "idle input"
    #: an idle input built where no worker is in reach; the consuming worker rebuilds it
    DETACHED_IDLE_INPUT = "idle input (no worker)"
    #: ``torch.zeros((rows, <hidden width>), dtype=...)``
    BUFFER = "buffer"
    #: ``MetadataBuffers(hidden_size=(<width> if <spec> else 16), hidden_states_dtype=...)``:
    #: the draft state sent from prefill to decode in PD disaggregation
    METADATA_BUFFER = "PD metadata buffer"
    #: ``self.fc = torch.nn.Linear(<width of the target's features>, hidden_size)``: the
    #: EAGLE-3 drafter's projection of the target's concatenated hidden states
    DRAFTER_FC = "drafter fc"


@dataclass(frozen=True)
class Site:
    file: str
    scope: str
    phase: Phase
    kind: Kind
    #: the expression, at the site, of the worker the classmethods resolve
    worker: str
    note: str = ""
    #: the patch of the series that routes it (``concerns.ORDER``): ``routing`` where the
    #: classmethods give what the release gave, else the behaviour fix it belongs to
    concern: str = ROUTING

    @property
    def key(self) -> tuple[str, str]:
        return (self.file, self.scope)


SPEC = "speculative/"

SITES: tuple[Site, ...] = (
    # Idle inputs of the v1 workers.
    Site(
        SPEC + "eagle_worker.py",
        "EAGLEWorker._draft_preprocess_idle",
        Phase.DECODE,
        Kind.IDLE_INPUT,
        worker="self",
        note="also serves MultiLayerEagleWorker, which delegates to it",
    ),
    Site(
        SPEC + "eagle_worker.py",
        "EAGLEWorker.forward_draft_extend_after_decode",
        Phase.EXTEND,
        Kind.IDLE_INPUT,
        worker="self",
        note="also rebuilds the idle input EagleVerifyInput.verify made",
        concern=EXTEND_WIDTH,
    ),
    Site(
        SPEC + "multi_layer_eagle_worker.py",
        "MultiLayerEagleWorker.forward_draft_extend_after_decode",
        Phase.EXTEND,
        Kind.IDLE_INPUT,
        worker="self",
        note="also rebuilds the idle input EagleVerifyInput.verify made",
        concern=MULTI_LAYER_WIDTH,
    ),
    # Idle inputs of the v2 workers: the draft worker consumes them.
    Site(
        SPEC + "eagle_worker_v2.py",
        "EAGLEWorkerV2.forward_batch_generation",
        Phase.DECODE,
        Kind.IDLE_INPUT,
        worker="self.draft_worker",
        concern=V2_IDLE_WIDTH,
    ),
    Site(
        SPEC + "multi_layer_eagle_worker_v2.py",
        "MultiLayerEagleWorkerV2.forward_batch_generation",
        Phase.DECODE,
        Kind.IDLE_INPUT,
        worker="self.draft_worker",
        concern=V2_IDLE_WIDTH,
    ),
    # Idle inputs built in verify, where no worker is in reach.
    Site(
        SPEC + "eagle_info.py",
        "EagleVerifyInput.verify",
        Phase.EXTEND,
        Kind.DETACHED_IDLE_INPUT,
        worker="",
        note="all-idle batch; all requests finished",
        concern=EXTEND_WIDTH,
    ),
    # CUDA-graph buffers.
    Site(
        SPEC + "eagle_draft_cuda_graph_runner.py",
        "EAGLEDraftCudaGraphRunner.__init__",
        Phase.DECODE,
        Kind.BUFFER,
        worker="self.eagle_worker",
    ),
    Site(
        SPEC + "eagle_draft_extend_cuda_graph_runner.py",
        "EAGLEDraftExtendCudaGraphRunner.__init__",
        Phase.EXTEND,
        Kind.BUFFER,
        worker="self.eagle_worker",
        note="two branches (EAGLE-3 with aux, otherwise) become one buffer",
        concern=EXTEND_WIDTH,
    ),
    Site(
        SPEC + "multi_layer_eagle_draft_extend_cuda_graph_runner.py",
        "MultiLayerEagleDraftExtendCudaGraphRunner.init_buffers_and_capture",
        Phase.EXTEND,
        Kind.BUFFER,
        worker="self.eagle_worker",
        concern=MULTI_LAYER_WIDTH,
    ),
    # PD disaggregation: the draft state carried from the prefill to the decode server.
    Site(
        "managers/scheduler.py",
        "Scheduler.init_disaggregation",
        Phase.DECODE,
        Kind.METADATA_BUFFER,
        worker="self.draft_worker",
        note="decode and prefill servers; a v2 draft_worker resolves to its draft runner",
    ),
    Site(
        SPEC + "multi_layer_eagle_worker_v2.py",
        "MultiLayerEagleDraftWorker.__init__",
        Phase.EXTEND,
        Kind.BUFFER,
        worker="self",
        note=(
            "req_to_hidden_states_pool holds the hidden states fed to the MTP layers and "
            "is copied into the extend graph buffer, so it takes the extend width"
        ),
        concern=MULTI_LAYER_WIDTH,
    ),
    # The EAGLE-3 drafter's fc: it consumes the extend-phase hidden states.
    Site(
        "models/llama_eagle3.py",
        "LlamaModel.__init__",
        Phase.EXTEND,
        Kind.DRAFTER_FC,
        worker="",
        note=(
            "fc's input width: the number of aux layers the drafter declares (else 3) x "
            "(target_hidden_size or hidden_size); LlamaModel.forward checks the target's "
            "hidden states against it"
        ),
        concern=DRAFTER_FC,
    ),
)

#: Every EAGLE worker that reads and validates its drafter's config at start-up, before it
#: builds the draft model, and keeps ``eagle_use_aux_hidden_state`` and
#: ``eagle_num_aux_hidden_states`` from the one parser; and the call in its ``__init__`` that
#: builds (and loads) the draft model: everything the rule inserts goes before it.
AUX_FLAG_WORKERS: dict[tuple[str, str], str] = {
    (SPEC + "eagle_worker.py", "EAGLEWorker"): "super().__init__",
    (SPEC + "eagle_worker_v2.py", "EagleDraftWorker"): "TpModelWorker",
    (SPEC + "multi_layer_eagle_worker.py", "MultiLayerEagleWorker"): "super().__init__",
    (
        SPEC + "multi_layer_eagle_worker_v2.py",
        "MultiLayerEagleDraftWorker",
    ): "TpModelWorker",
}

#: Every worker above holds its target worker here (set before the draft model is built).
TARGET_MODEL_CONFIG = "self.target_worker.model_config"

#: The ``ServerArgs`` parameter of every worker's ``__init__``.
SERVER_ARGS = "server_args"

#: Where the contract itself lives.
CONTRACT_FILE = SPEC + "eagle_info.py"

#: Where the parser of the drafter's config lives, after this class (``rules/parser.py``):
#: the module imports only ``typing`` and ``enum`` at run time, so a model file can import the
#: parser without the scheduler stack ``eagle_info.py`` imports.
PARSER_FILE = (SPEC + "spec_info.py", "SpeculativeAlgorithm")


#: functions the patch inserts into ``CONTRACT_FILE``: a tree with the classmethods but without
#: them carries upstream's own version of the refactor
INSERTED_HELPERS = ("get_draft_runner", "validate_eagle_draft_config")


def carries_patch(srt: Path) -> bool:
    """Whether ``CONTRACT_FILE`` defines the helpers the patch inserts."""
    try:
        module = ast.parse((srt / CONTRACT_FILE).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    defined = {node.name for node in module.body if isinstance(node, ast.FunctionDef)}
    return any(name in defined for name in INSERTED_HELPERS)


def has_structure(srt: Path) -> bool:
    """A tree of 0.5.9-0.5.11 without a version: it has the v2 module upstream's refactor
    removed."""
    return (srt / SPEC / "eagle_info_v2.py").is_file()


def site_for(file: str, scope: str) -> Site | None:
    for site in SITES:
        if site.file == file and site.scope == scope:
            return site
    return None


#: Draft workers that hold a list of runners and must expose ``draft_runner``.
DRAFT_RUNNER_WORKERS: dict[tuple[str, str], str] = {
    (
        SPEC + "multi_layer_eagle_worker_v2.py",
        "MultiLayerEagleDraftWorker",
    ): "self.draft_runner_list[0]",
}


#: The target runner that decides which layers it captures for EAGLE-3: it reads the
#: drafter's eagle_config through the same parser as the workers.
TARGET_CAPTURE = ("model_executor/model_runner.py", "ModelRunner.__init__")

#: The draft ``TpModelWorker`` takes the ``ModelConfig`` its EAGLE worker built at start-up
#: (``rules/draft_model_config.py``).
DRAFT_MODEL_CONFIG_WORKER = ("managers/tp_worker.py", "TpModelWorker.__init__")

#: Files the rules read: every file that holds a site or a worker, and nothing else.
SITE_FILES: tuple[str, ...] = tuple(
    sorted(
        {s.file for s in SITES}
        | {f for f, _ in AUX_FLAG_WORKERS}
        | {TARGET_CAPTURE[0], PARSER_FILE[0], DRAFT_MODEL_CONFIG_WORKER[0]}
    )
)


#: FlashInfer's decode planner, which a padded idle batch under DP attention reaches with an
#: idle input: it needs a guard (``rules/flashinfer_idle.py``).
FLASHINFER_DECODE = (
    "layers/attention/flashinfer_backend.py",
    "FlashInferIndicesUpdaterDecode.call_begin_forward",
)

#: Where the v2 draft-extend input of an idle batch gets its attention index pointers
#: (``rules/idle_attention.py``).
V2_EXTEND_INPUT_FILE = SPEC + "eagle_info_v2.py"

#: Where the EAGLE draft builds the attention metadata of its steps without CUDA graphs, before
#: DP attention pads the batch (``rules/draft_metadata.py``): the worker's draft model runner.
DRAFT_METADATA_CALLS: dict[tuple[str, str], str] = {
    (SPEC + "eagle_worker.py", "EAGLEWorker.draft"): "self.draft_model_runner",
    (SPEC + "eagle_worker_v2.py", "EagleDraftWorker.draft"): "self.draft_runner",
}

SITE_FILES = tuple(
    sorted(
        {*SITE_FILES, FLASHINFER_DECODE[0], V2_EXTEND_INPUT_FILE}
        | {file for file, _ in DRAFT_METADATA_CALLS}
    )
)

#: The release's own file whose text decides what the contract reads (``ModelConfig`` has
#: ``spec_hidden_size`` or not: ``rules/contract.py``'s ``release_model_config``).
RELEASE_FILE = "configs/model_config.py"

#: Where ``get_config`` reads a model's config (``rules/speculators_format.py``): its own
#: module from 0.5.11, ``hf_transformers_utils.py`` before. Read when present.
GET_CONFIG_FILES = ("utils/hf_transformers/config.py", "utils/hf_transformers_utils.py")

#: What the rules read besides ``SITE_FILES`` and ``RELEASE_FILE`` (``families.Family.
#: watched_files``, the pre-commit hook's files): ``get_config``'s module, and every
#: ``speculative/`` module (``files_in`` scans the folder for a site upstream adds).
READ_ALSO = (*GET_CONFIG_FILES, SPEC)


def test_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """Of the fork's tests, those the enabled concerns add (``fork_test_slices``)."""
    from sglang_eagle_sizing.families.release_0_5_11 import fork_test_slices

    return fork_test_slices.test_files(files)


def files_in(srt: Path, read: Callable[[Path], str]) -> list[str]:
    """Files (relative to ``srt/``) the rules read: the site files, ``get_config``'s module,
    plus any other ``speculative/`` module that names a hidden width or an idle input, so
    that a site upstream adds elsewhere is reported rather than missed."""
    files = set(SITE_FILES)
    files.update(f for f in GET_CONFIG_FILES if (srt / f).is_file())
    for path in sorted((srt / "speculative").glob("*.py")):
        relative = f"speculative/{path.name}"
        if relative in files:
            continue
        text = read(path)
        if "hidden_size" in text or "create_idle_input" in text:
            files.add(relative)
    return sorted(files)
