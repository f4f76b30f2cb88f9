"""The smoke matrix: each case is a set of server flags a user would pass, the models it
serves and the requests it sends. Here: what a case is, and the cases both release families
build on; each family lists what it serves in its ``smoke_cases.py``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sglang_eagle_sizing.smoke.models import STEP3P5, DrafterSpec, TargetSpec

#: server flags every CPU server needs (see docs/smoke.md for why each)
CPU_FLAGS = (
    "--device", "cpu",
    "--disable-cuda-graph",
    "--max-total-tokens", "2048",
    "--max-running-requests", "8",
    "--mem-fraction-static", "0.1",
    "--skip-server-warmup",
    "--triton-attention-num-kv-splits", "1",
    "--log-level", "info",
)

#: the speculative flags of a chain (topk 1) of three draft steps
CHAIN = (
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)
V1 = ("--disable-overlap-schedule",)

PROMPTS = (
    (5, 77, 200, 301, 9, 40),
    (100, 101, 7, 450, 3),
    (300, 12, 13, 14, 400, 11, 500),
)


@dataclass(frozen=True)
class Batch:
    """One /generate call: prompts sent together (they batch), each with its own length."""

    name: str
    prompts: tuple[tuple[int, ...], ...]
    max_new_tokens: tuple[int, ...]


#: outputs long enough to accept several draft tokens
LONG = Batch("long", PROMPTS, (16, 16, 16))
#: every request finishes at its first verify (one token from prefill, then one verify)
FIRST_VERIFY = Batch("first-verify", PROMPTS[:2], (2, 2))
#: some requests finish while others go on
SOME_FINISH = Batch("some-finish", PROMPTS, (2, 12, 5))
SHAPES = (LONG, FIRST_VERIFY, SOME_FINISH)
#: one request: under DP attention the other rank is idle
ONE = Batch("one-request", PROMPTS[:1], (12,))
#: what the run without speculation serves for every target
ALL_BATCHES = SHAPES + (ONE,)


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    #: --speculative-algorithm, or None for a run without speculation
    algorithm: str | None
    drafter: DrafterSpec | None
    flags: tuple[str, ...]
    batches: tuple[Batch, ...] = (LONG,)
    target: TargetSpec = field(default_factory=TargetSpec)
    dtype: str = "float32"
    #: "serve", or "refuse": the server must exit non-zero with ``message`` in its output
    expect: str = "serve"
    message: str = ""
    #: why this case is expected to fail on today's patched tree (empty: it must pass)
    known_failure: str = ""
    #: what the error of that known failure says; any other failure is a failure
    known_error: str = ""
    #: extra environment of the server
    env: tuple[tuple[str, str], ...] = ()
    #: PD disaggregation: served by a prefill and a decode server (``PD_FLAGS``), requests
    #: sent to both as a router does; the run without speculation stays one plain server
    pd: bool = False
    #: flags only the PD decode server gets
    decode_flags: tuple[str, ...] = ()
    #: flags of the target that the run without speculation keeps too
    target_flags: tuple[str, ...] = ()
    #: the environment those flags need, which the run without speculation gets too
    target_env: tuple[tuple[str, str], ...] = ()
    #: whether transformers' ``generate`` on the target is a reference (not for a target
    #: transformers cannot load; then the run without speculation serves this case's
    #: batches only)
    reference: bool = True
    #: the run without speculation's attention backend
    plain_attention_backend: str = "torch_native"
    #: seconds to wait for a reply to each batch (None: the runner's default)
    request_timeout: float | None = None
    #: the accept length the served case must exceed (None: no bound); the ``layers`` craft's
    #: cases accept every draft from the right layers and almost none from others
    min_accept_length: float | None = None
    #: what the unpatched release's run (0.5.11, or 0.5.23 for its cases) must fail with ("":
    #: any error; None: it may serve, and must then give the same accept length)
    release_error: str | None = None
    #: whether the target's captured aux hidden states are compared with transformers'
    #: ``output_hidden_states`` of the same weights (``capture.py``; reported, not judged)
    compare_capture: bool = False

    def server_args(self, target_dir, drafter_dir) -> list[str]:
        """``drafter_dir`` is the target's own folder when the case has no drafter (MTP)."""
        args = [
            "--model-path", str(target_dir),
            "--dtype", self.dtype,
            "--attention-backend", "triton",
            *CPU_FLAGS,
            *self.target_flags,
        ]
        if self.algorithm is not None:
            args += [
                "--speculative-algorithm", self.algorithm,
                "--speculative-draft-model-path", str(drafter_dir),
            ]
        return args + list(self.flags)


EAGLE3 = DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2))

#: the float16/bfloat16 mismatch at --dtype auto, mirrored so that the model the patch builds
#: (float16) can run on this CPU
MIRRORED_DTYPES = Case(
    "eagle3-bf16-drafter-fp16-target-v1",
    "EAGLE-3, bfloat16 drafter on a float16 target at --dtype auto (the same mismatch, "
    "mirrored so that the model the patch builds can run on this CPU), v1 worker",
    "EAGLE3",
    DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2), dtype="bfloat16"),
    CHAIN + V1,
    target=TargetSpec(dtype="float16"),
    dtype="auto",
)

QWEN3 = TargetSpec(architecture="Qwen3ForCausalLM")
DP_ATTENTION = ("--tp", "2", "--dp", "2", "--enable-dp-attention")
#: what DP attention takes on this CPU: one OpenMP thread per rank (model_runner.py refuses
#: tp_size above the NUMA node count otherwise), no NCCL (the CUDA torch wheel ships one and
#: PyNccl then calls torch.cuda.device on a CPU device), and the DP stand-ins
DP_ENV = (
    ("SGLANG_CPU_OMP_THREADS_BIND", "0|1"),
    ("SGLANG_NCCL_SO_PATH", "/nonexistent/libnccl.so.2"),
    ("SGLANG_EAGLE_SIZING_SMOKE_DP", "1"),
)
DP_ONE_REQUEST = Case(
    "eagle3-dp-attention-v1",
    "EAGLE-3, Qwen3 target, --tp 2 --dp 2 --enable-dp-attention, one request (rank dp1 "
    "idle), v1 worker; 0.5.11 crashes: its idle inputs carry no kv_indptr for the Triton "
    "backend",
    "EAGLE3", EAGLE3, CHAIN + V1 + DP_ATTENTION, batches=(ONE,), target=QWEN3,
    env=DP_ENV,
)
DP_THREE_REQUESTS = Case(
    "eagle3-dp-attention-3-requests-v1",
    "EAGLE-3, Qwen3 target, --tp 2 --dp 2 --enable-dp-attention, three requests that "
    "finish at different steps (both ranks busy, one padded to the other's size, then one "
    "idle), v1 worker",
    "EAGLE3", EAGLE3, CHAIN + V1 + DP_ATTENTION, batches=(SOME_FINISH,), target=QWEN3,
    env=DP_ENV,
)

#: A drafter narrower than its target under DP attention. llama_eagle3.py applies ``fc`` only
#: when the incoming width differs from the drafter's own, so with the 64-wide drafter of the
#: cases above an idle input of the target's width (0.5.11's) passes unnoticed; a 32-wide
#: drafter makes every width count: ``fc`` takes 3 x 64 and the draft steps 32.
NARROW_DRAFTER = DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2), hidden_size=32)
DP_NARROW = replace(
    DP_ONE_REQUEST,
    name="eagle3-dp-attention-narrow-drafter-v1",
    description="EAGLE-3, a 32-wide drafter on the 64-wide Qwen3 target, --tp 2 --dp 2 "
    "--enable-dp-attention, one request (rank dp1 idle), v1 worker: the idle inputs' widths "
    "reach the drafter's fc",
    drafter=NARROW_DRAFTER,
)

#: Drafters whose acceptance hangs on the layers the target captures (the ``layers`` craft,
#: models.py): from the right layers every draft is accepted, from any other (or another
#: number of layers) almost none is, so a target that captures the wrong thing shows. Each is a
#: drafter 0.5.11 cannot serve: 4 aux layers (its fc takes 3), or the speculators format.
LAYERED = TargetSpec(num_layers=6, craft="layers")
#: above: an accept length of 1 (no draft accepted) up to 4 (3 draft steps)
ACCEPTED = 2.0
#: 0.5.11's get_config has no reader of the speculators format: AutoConfig finds no model_type
SPECULATORS_UNREAD = "Should have a `model_type` key in its config.json"
#: 0.5.11 builds fc for 3 layers whatever the drafter declares (llama_eagle3.py:138)
FC_SHAPE = "Attempted to load weight (torch.Size([64, 256])) into parameter (torch.Size([64, 192]))"
FOUR_IDS = Case(
    "eagle3-4ids-v1",
    "SpecForge-style LlamaForCausalLMEagle3 with 4 layer ids in eagle_config ([0, 1, 2, 3]) "
    "on a 6-layer target, weights crafted so that drafts are accepted only from those 4 "
    "layers; v1 worker",
    "EAGLE3",
    DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2, 3), craft="layers"),
    CHAIN + V1,
    batches=SHAPES,
    target=LAYERED,
    min_accept_length=ACCEPTED,
    release_error=FC_SHAPE,
)
SPECULATORS_4IDS = replace(
    FOUR_IDS,
    name="eagle3-speculators-4ids-v1",
    description="EAGLE-3 drafter in the speculators format (written by speculators 0.9.0's "
    "Eagle3DraftModel.save_pretrained, norm_before_fc) with 4 layer ids at the top level "
    "([1, 2, 3, 4]) on a 6-layer target, crafted as above; v1 worker",
    drafter=DrafterSpec(
        kind="eagle3", aux_layer_ids=(1, 2, 3, 4), ids_at="top", craft="layers",
        format="speculators", speculators_norms=("norm_before_fc",),
    ),
    batches=(LONG,),
    release_error=SPECULATORS_UNREAD,
)
#: the narrow drafter under DP attention with 4 aux layers: an idle input of the extend width
#: is 4 x 64 wide, and reaches fc (4 x 64 -> 32)
DP_NARROW_4 = replace(
    DP_ONE_REQUEST,
    name="eagle3-dp-attention-narrow-4ids-v1",
    description="EAGLE-3, a 32-wide drafter with 4 layer ids on the 64-wide 6-layer Qwen3 "
    "target, crafted as above, --tp 2 --dp 2 --enable-dp-attention, one request (rank dp1 "
    "idle), v1 worker: idle inputs 4 x 64 wide reach the drafter's fc",
    drafter=DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2, 3), hidden_size=32,
                        craft="layers"),
    target=replace(LAYERED, architecture="Qwen3ForCausalLM"),
    min_accept_length=ACCEPTED,
    release_error="torch.Size([32, 256])",
)

#: PD disaggregation on loopback: each server of the pair adds ``--disaggregation-mode
#: prefill|decode`` and its own ``--disaggregation-bootstrap-port``; Mooncake's transfer
#: engine (``server.mooncake_engine``) comes from PyPI into the cache on first use
PD_FLAGS = ("--disaggregation-transfer-backend", "mooncake")
PD = Case(
    "eagle3-pd-v1",
    "EAGLE-3, PD disaggregation (a prefill and a decode server, Mooncake over TCP on "
    "loopback): both allocate the draft-state metadata buffers; the decode server "
    "drafts from the state the prefill server sent; v1 worker",
    "EAGLE3", EAGLE3, CHAIN + V1 + PD_FLAGS, batches=SHAPES, pd=True,
)

#: the multi-layer EAGLE (MTP) worker: a 45-layer tiny Step-3.5 target with random weights
#: (``--load-format dummy``: transformers cannot load it, so the run without speculation, with
#: the same kernels, is the one reference) drafting with its own MTP layers
MTP = Case(
    "mtp-step3p5-v1",
    "multi-layer EAGLE (MTP): --speculative-algorithm EAGLE --enable-multi-layer-eagle on a "
    "tiny Step-3.5 target (45 dense layers, random weights), its 3 MTP layers drafting; "
    "v1 worker (MultiLayerEagleWorker)",
    "EAGLE", None,
    CHAIN + V1 + ("--enable-multi-layer-eagle", "--speculative-draft-load-format", "dummy"),
    batches=(Batch("short", PROMPTS[:1], (4,)),),
    target=TargetSpec(architecture=STEP3P5),
    target_flags=("--load-format", "dummy"),
    reference=False,
    plain_attention_backend="triton",
)


def case_named(name: str, cases: tuple[Case, ...]) -> Case:
    """The case ``name`` among ``cases``."""
    for case in cases:
        if case.name == name:
            return case
    raise KeyError(name)


def cases_for(family) -> tuple[Case, ...]:
    """The smoke cases of a release family: its ``smoke_cases.py``."""
    return family.smoke_cases
