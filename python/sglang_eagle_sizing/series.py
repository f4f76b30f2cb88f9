"""The change as a series of patches, one concern each, as SGLang's reviewers take it.

Patch k is the difference between the tree the rules write with the first k-1 concerns of
``concerns.ORDER`` and the tree they write with the first k, both from the release, so the
series applied in order (``git am``) leaves exactly the tree ``apply`` writes, test files
included. Each patch carries its own slice of the fork's CPU test (``fork_test_slices``).

The descriptions (``PATCHES``) are written for a reviewer of SGLang who sees nothing else:
they name SGLang's files, configs, tests and commands only.
"""

from __future__ import annotations

import datetime
import email.utils
from dataclasses import dataclass, field
from pathlib import Path

from . import concerns
from .engine import (
    Finding,
    FindingsCache,
    default_cache_dir,
    git_header,
    unified_diff,
)
from .families import BEFORE_REFACTOR, Family
from .fork_test_slices import CPU_TEST_DIR, TEST_CONCERNS
from .patch import TreeReport, check_tree, rewrite_tree
from .tree import SglangTree, TreeError, _git


def cpu_test_command(concern: str) -> str:
    """Markdown: the command that runs each CPU test file of ``concern`` (the files its
    patch adds to ``CPU_TEST_DIR``)."""
    commands = [
        f"`python3 {CPU_TEST_DIR}/{name}`"
        for name, owner in TEST_CONCERNS.items()
        if owner == concern
    ]
    return " and ".join([", ".join(commands[:-1]), commands[-1]] if commands[1:] else commands)


@dataclass(frozen=True)
class Patch:
    concern: str
    subject: str
    #: Markdown, in the sections of SGLang's pull-request template
    body: str


def read_patch(folder: Path, concern: str) -> Patch:
    """The patch of ``concern`` as its description file ``<folder>/<concern>.md`` says: the
    subject on the first line (a ``# `` heading), the body after it."""
    heading, _, body = (folder / f"{concern}.md").read_text().partition("\n")
    return Patch(concern, heading.removeprefix("# "), body.lstrip("\n"))


PATCHES: tuple[Patch, ...] = (
    Patch(
        concerns.ANNOTATION,
        "[Spec] Quote the ModelRunner return annotation in multi_layer_eagle_worker",
        f"""\
## Motivation

`multi_layer_eagle_worker.py` imports `ModelRunner` only under `TYPE_CHECKING`, but
`MultiLayerEagleWorker.mtp_model_runner` is annotated `-> ModelRunner` unquoted, and the
module has no `from __future__ import annotations`. The annotation is evaluated when the
class is defined, so the module does not import, and the v1 multi-layer worker
(`--enable-multi-layer-eagle --disable-overlap-schedule`) cannot start:

```
$ python3 -c "import sglang.srt.speculative.multi_layer_eagle_worker"
NameError: name 'ModelRunner' is not defined
```

Reported in https://github.com/sgl-project/sglang/issues/23871.

## Modifications

Quote the annotation. No behavior change.

## Tests

`test/registered/unit/speculative/eagle_hidden_sizing/test_annotation.py` (new, CPU suite
`stage-a-test-cpu`; the folder's first file, each patch after this one adds its own):
`TestSpeculativeModulesImport` imports the module. The file stubs `sgl_kernel` with
`maybe_stub_sgl_kernel()` when it cannot load, so it runs on a CPU runner:
{cpu_test_command(concerns.ANNOTATION)}.
""",
    ),
    Patch(
        concerns.PARSER,
        "[Spec] Parse the drafter's eagle_config once, for every EAGLE worker",
        f"""\
## Motivation

Each worker parses `eagle_use_aux_hidden_state` inline, after the draft model has loaded:
`EAGLEWorker` and `EagleDraftWorker` with
`getattr(hf_config, "eagle_config", {{}}).get("use_aux_hidden_state", True)`, the multi-layer
workers not at all. A drafter whose config has `"eagle_config": null` loads its weights and
then fails with `AttributeError: 'NoneType' object has no attribute 'get'`; a string flag
such as `"false"` is taken as true. Nothing reads how many target layers the drafter declares
(`eagle_aux_hidden_state_layer_ids`): every site that sizes the target's concatenated hidden
states assumes three.

## Modifications

- `spec_info.py`, after `SpeculativeAlgorithm`:
  `parse_eagle_use_aux_hidden_state(algorithm, draft_hf_config)` (`null`,
  `0` and `1` read by their truth value, as before),
  `get_eagle_aux_hidden_state_layer_ids(draft_hf_config)` (from `eagle_config`, else from
  the top level of the config; both must agree) and
  `get_eagle_num_aux_hidden_states(draft_hf_config)` (their number, else 3; a declared
  `num_aux_hidden_states` must agree). A malformed value is refused with one `ValueError`
  naming the key, the value and the draft config (`invalid_eagle_draft_config`, which the
  checks against the target in later patches raise too).
- `get_eagle_draft_model_config(server_args)`: the draft `ModelConfig` built the way the
  draft `TpModelWorker` builds it (config only, no weights).
- `EAGLEWorker`, `EagleDraftWorker`, `MultiLayerEagleWorker`, `MultiLayerEagleDraftWorker`:
  build the draft config before the draft model, set `eagle_use_aux_hidden_state` and
  `eagle_num_aux_hidden_states` from it, and hand it to the draft `TpModelWorker`
  (`model_config=draft_model_config`); the inline parsing goes.
- `TpModelWorker.__init__` takes an optional `model_config`: given, it is used instead of
  building the same config again.

## Behavior changes

The flag takes the same value for every drafter 0.5.11 accepts. A malformed `eagle_config`
or layer-id list is refused at start-up, before the weights load. The multi-layer workers
now have both attributes.

## Design notes

- The parser lives in `spec_info.py`: its one dependency is `SpeculativeAlgorithm`, and the
  module imports only `typing`, `enum` and `abc` at run time. A model file must not import
  the scheduler stack, and `eagle_info.py` pulls it in (`schedule_batch`, `sgl_kernel`,
  `eagle_info_v2`, `model_runner`): `llama_eagle3.py` reads the drafter's aux layers in a
  later patch, and imports the parser from `spec_info` at the top of the module. The
  workers import it from there too, and `eagle_info.py`'s checks call its public
  functions.
- The four workers have no common base that builds the draft model, so each builds the
  draft config right before it builds the draft `TpModelWorker`, which takes it: the
  drafter's `ModelConfig` is built once per worker, as before (the target `ModelRunner`'s
  own read of it for EAGLE-3 is unchanged).

## Tests

`TestEagleConfigParser` (every accepted and refused form) and `TestWorkerStartUp` (the four
workers parse the drafter in their own `__init__` and build its `ModelConfig` once, started
on the CPU with the draft model runners replaced; the folder's `common.py` holds the synthetic configs, the stand-ins and
the worker start-up the later test files share): {cpu_test_command(concerns.PARSER)}.
""",
    ),
    Patch(
        concerns.TARGET_CAPTURE,
        "[Spec] Capture the target layers the EAGLE-3 drafter declares, wherever it declares them",
        f"""\
## Motivation

`ModelRunner.__init__` decides which target layers EAGLE-3 captures with a third parse of
the drafter's config, in a `try`/`except` that swallows every error: ids declared at the top
level of the drafter's config (`eagle_aux_hidden_state_layer_ids`, as some EAGLE-3 exports
do) are ignored and the target captures its default layers (the inputs of layers
`[2, L // 2, L - 3]`). Where the declared ids are not `[1, L // 2 - 1, L - 4]` the drafter is
fed other layers than it was trained on, with the same width, so nothing fails and
acceptance drops silently. For example, Kimi-K2's EAGLE-3 drafter names `[2, 30, 58]`
(the outputs of those layers of the 61-layer target); declared at the top level, 0.5.11
feeds it the outputs of layers 1, 29 and 57 instead, each one layer early. A drafter that
names four layers there fails at its first request instead (its `fc` takes four layers, the
target captures three).

An id at the target's last layer names an output no layer reads: the model captures the
input of layer `id + 1`. gemma-3-27b's SpecForge drafter names layer 61 of its 62-layer
target. On a Qwen2-MoE or Qwen3-MoE target `set_eagle3_layers_to_capture` then indexes past
`self.layers` (`IndexError` at start-up); on a Llama or Qwen3 target that slot is never
reached, the target hands the drafter one hidden state too few, and the first request fails
at the drafter's `fc`.

## Modifications

- `eagle_info.py`: `get_eagle_captured_layer_ids(draft_hf_config, target_model_config)`,
  the parser's layer ids checked against the target: an id above `num_hidden_layers - 2`
  is refused, naming the key, the hidden state and the target's layer count.
- `ModelRunner.__init__` reads the flag and the layer ids with
  `parse_eagle_use_aux_hidden_state` (from `spec_info`) and
  `get_eagle_captured_layer_ids(draft_hf_config, self.model_config)` (imported where it is
  used, as the DFLASH branch does: `eagle_info` imports `model_runner`), still in
  `__init__`: before any weights load.

## Behavior changes

Top-level layer ids are captured. Drafters that declare them in `eagle_config`, or not at
all, capture what they captured before. A malformed declaration, or an id the target cannot
capture, is refused instead of ignored.

## Tests

`TestTargetCapture` runs the real `ModelRunner.__init__` up to the capture, gives it a tiny
`LlamaForCausalLM` built on the CPU (its attention adds nothing: `o_proj` is zero), runs the
model's forward and compares each hidden state it hands the drafter with transformers'
`output_hidden_states` of the same weights: SGLang's id `i` is hidden state `i + 1` (the
output of layer `i`), the default the inputs of layers `[2, L // 2, L - 3]`:
{cpu_test_command(concerns.TARGET_CAPTURE)}.
""",
    ),
    Patch(
        concerns.VALIDATION,
        "[Spec] Check the EAGLE-3 drafter against its target before the draft weights load",
        f"""\
## Motivation

A drafter that does not fit its target loads all its weights and fails at the first
request, in the middle of serving, with a shape error in the drafter's `fc`
(`mat1 and mat2 shapes cannot be multiplied`): a `target_hidden_size` of another target, a
`num_aux_hidden_states` other than the number of layers the target captures, an `fc` whose
reads each aux hidden state in another width than the target's `hidden_size`. A drafter
that declares no layer ids on a target of 6 layers or fewer crashes at its first request
too: the default capture `[2, L // 2, L - 3]` names fewer than 3 distinct layers.

## Modifications

`validate_eagle_draft_config(algorithm, draft_model_config, target_model_config)`, called
by each of the four EAGLE workers on the draft config it read at start-up, before the draft
model is built. EAGLE-3 only; other algorithms are not checked.

## Behavior changes

The drafters above are refused at start-up with a `ValueError` naming the key, its value,
what was expected and both config paths (a malformed declaration, which the parser refuses,
names the draft config alone), instead of failing at the first request. Every
drafter that served before still serves.

## Design notes

Each refusal is of a drafter that cannot serve: a declared `num_aux_hidden_states` other than
the captured layers means an `fc` weight of another shape, which fails when the weights load;
the width check mirrors how `llama_eagle3.py` builds `fc` (each aux hidden state read as
`target_hidden_size`, else `hidden_size`, features) and is skipped for other
architectures; the layer-count check mirrors the default capture of `LlamaForCausalLM`
(`[2, L // 2, L - 3]`).

The default-capture check matters only for targets of 6 layers or fewer: no released
model, but the tiny random-weight targets that tests and benchmarks of EAGLE-3 use. It is
kept because such a pair otherwise starts, loads its weights and fails at the first request
with a bare matmul shape error in `fc` that does not say the drafter should declare its
layer ids.

## Tests

`TestStartupValidation` (every refusal, by key and value) and
`TestWorkerStartUp.test_every_eagle_worker_refuses_before_the_draft_model_loads` (the
refusal comes before the draft model loader is called): {cpu_test_command(concerns.VALIDATION)}.
""",
    ),
    Patch(
        concerns.DTYPE,
        "[Spec] Build the EAGLE draft model in the target's dtype at --dtype auto",
        f"""\
## Motivation

At `--dtype auto` each model takes the dtype of its own config. SpecForge's Llama-3.1-8B
EAGLE-3 drafter says `float16`, Llama-3.1-8B-Instruct says `bfloat16`: the drafter is built
in float16, shares the target's bfloat16 embedding, and the target's bfloat16 hidden states
reach its float16 `fc` at the first request:
`RuntimeError: expected mat1 and mat2 to have the same dtype, but got: c10::Half != c10::BFloat16`.
https://github.com/sgl-project/sglang/pull/25894 (open) proposes the same choice in
`EAGLEWorker` alone; this patch makes it in each EAGLE worker.

## Modifications

`set_eagle_draft_dtype(server_args, draft_model_config, target_model_config)`: when the
drafter's config gives another dtype than the target's resolved one, `server_args.dtype` and
the draft config's `dtype` become the target's, with one log line; else nothing changes.
Each EAGLE worker calls it on the draft config it hands to the draft `TpModelWorker`.

This is how `ModelRunner.load_model` switches to float16 below sm80: both
`server_args.dtype` and `model_config.dtype` (`ModelConfig` reads its `dtype` argument into
that attribute alone), so the config is not built again. After start-up `server_args.dtype`
names the dtype both models run in.

## Behavior changes

At `--dtype auto`, a drafter whose config gives another dtype than the target's is built
in the target's dtype (its checkpoint is cast when it loads). An explicit `--dtype` is kept.
STANDALONE draft models, which read no hidden state of the target, keep their own.

## Tests

`TestOneDtypeAtDtypeAuto`: a float16 drafter on a bfloat16 target is built in bfloat16 by
the v1, v2 and multi-layer v2 workers; an explicit `--dtype float16` is kept; a STANDALONE
drafter keeps its own: {cpu_test_command(concerns.DTYPE)}.
""",
    ),
    Patch(
        concerns.ROUTING,
        "[Spec] Add EagleDraftInput.hidden_size_for / dtype_for and route the draft-width sites",
        f"""\
## Motivation

The width and dtype of `EagleDraftInput.hidden_states` are decided inline at fourteen
places (idle inputs, CUDA-graph buffers, PD metadata buffers), each its own way, and they
disagree; the patches after this one fix each disagreement on its own. This one adds the
contract and moves the places that already agree with it, with no behavior change.

## Modifications

- `EagleDraftInput.hidden_size_for(worker)` / `dtype_for(worker)`: the hidden states
  carried between draft steps, the draft model's own (the draft runner's
  `spec_hidden_size` and dtype).
- `get_draft_runner(worker)` resolves the draft runner of a v1 worker, a v2 draft worker, a
  v2 worker or a CUDA-graph runner's `eagle_worker`; `MultiLayerEagleDraftWorker` exposes
  `draft_runner` (its first step's runner), as `EagleDraftWorker` does.
- Sized through them: `EAGLEWorker._draft_preprocess_idle`, the
  `EAGLEDraftCudaGraphRunner` buffer and both servers' PD metadata buffers
  (`Scheduler.init_disaggregation`). Each read the draft model's config already.

## Behavior changes

None.

## Design notes

- `hidden_size_for(worker)` takes whatever object the site has at hand, so no site needs a
  new attribute; `get_draft_runner` is the one resolver of the draft runner from those
  objects (`Scheduler._get_draft_kv_pool` resolves the draft KV pool, not the runner).

## Tests

`TestIdleInputs.test_v1_draft_step`, `TestPDMetadataBuffers` (both servers' buffers through
the real `Scheduler.init_disaggregation`, v1 and v2) and
`TestCudaGraphBuffers.test_draft_decode_runner` (the real runner's constructor, capture
replaced): {cpu_test_command(concerns.ROUTING)}.
""",
    ),
    Patch(
        concerns.EXTEND_WIDTH,
        "[Spec] Size the draft-extend hidden states from the target and the drafter's aux layers",
        f"""\
## Motivation

The draft-extend forward after verify is fed the target's hidden states: for EAGLE-3 with
aux hidden states, the concatenation of the layers the target captures. The v1 worker and
the extend CUDA-graph runner size them from the draft model's config instead, and
differently: the idle input of `EAGLEWorker.forward_draft_extend_after_decode` takes
`draft hidden_size * 3`, the graph buffer `target_hidden_size * 3` when the drafter declares
it. For a 128-wide drafter of a 256-wide target the two are 384 and 768 wide; for a drafter
that names four aux layers both are too narrow; without aux hidden states both take the
draft's width. The idle input `EagleVerifyInput.verify` builds when every request finished
(no worker in reach) reaches the draft-extend forward as it is.

## Modifications

- `EagleDraftExtendInput(EagleDraftInput)` with its own `hidden_size_for` / `dtype_for`:
  `eagle_num_aux_hidden_states * target hidden_size` for EAGLE-3 with aux hidden states,
  the draft's width for STANDALONE (which reads no hidden state of the target), else the
  target's `spec_hidden_size`; the dtype is the draft model's.
- `EAGLEWorker.forward_draft_extend_after_decode` builds its idle input from them whenever
  the batch is idle, which also replaces the one `verify` built; `verify` builds
  `EagleDraftExtendInput`s; the `EAGLEDraftExtendCudaGraphRunner` buffer takes the same size.

## Behavior changes

The idle input and the graph buffer agree, and equal what the target produces. For a
drafter as wide as its target with three aux layers (or EAGLE, MTP) nothing changes.

## Design notes

`EagleDraftExtendInput` subclasses `EagleDraftInput` and keeps its `spec_input_type`: every
consumer of the draft-extend input (`isinstance` checks, `SpecInputType.EAGLE_DRAFT`
dispatch in the attention backends) treats it as before; only its sizes are its own.

## Tests

`TestHiddenSizeContract` (both phases on the real workers for EAGLE-3, a narrow drafter,
four aux layers, aux off, EAGLE, STANDALONE),
`TestIdleInputs.test_v1_draft_extend_*` and
`TestCudaGraphBuffers.test_draft_extend_runner`: {cpu_test_command(concerns.EXTEND_WIDTH)}.
""",
    ),
    Patch(
        concerns.MULTI_LAYER_WIDTH,
        "[Spec] Size the multi-layer EAGLE extend buffers with the extend width",
        f"""\
## Motivation

The multi-layer workers size the hidden states fed to their draft-extend forward three
ways: `MultiLayerEagleWorker.forward_draft_extend_after_decode` widens to
`hidden_size * 3` for every EAGLE-3 drafter, aux hidden states or not, while
`MultiLayerEagleDraftWorker.req_to_hidden_states_pool` and the
`MultiLayerEagleDraftExtendCudaGraphRunner` buffer never widen. The pool is copied into the
graph buffer, so both must hold what the target produces.

## Modifications

The three take `EagleDraftExtendInput.hidden_size_for` / `dtype_for`; the v1 idle input is
rebuilt whenever the batch is idle, as in `EAGLEWorker`.

## Behavior changes

EAGLE-3 with aux hidden states: the pool and the graph buffer are as wide as the target's
concatenated hidden states; without aux, the idle input is not widened. MTP (EAGLE) is
unchanged.

## Tests

`TestIdleInputs.test_multi_layer_v1_draft_extend_rebuilds_the_input_verify_made`,
`TestIdleInputs.test_multi_layer_v2_hidden_states_pool` and
`TestCudaGraphBuffers.test_multi_layer_draft_extend_runners`: {cpu_test_command(concerns.MULTI_LAYER_WIDTH)}.
""",
    ),
    Patch(
        concerns.V2_IDLE_WIDTH,
        "[Spec] Size the v2 workers' idle draft input with the draft model's width",
        f"""\
## Motivation

On an idle DP-attention rank, `EAGLEWorkerV2.forward_batch_generation` and
`MultiLayerEagleWorkerV2.forward_batch_generation` build the draft input with the target's
`spec_hidden_size` and dtype, and hand it to the draft worker, which consumes the draft
model's. With an EAGLE-3 drafter narrower than its target (or in another dtype) the idle
rank fails in the draft forward.

## Modifications

Both take `EagleDraftInput.hidden_size_for(self.draft_worker)` / `dtype_for`.

## Behavior changes

The idle draft input has the draft model's width and dtype. Unchanged where the drafter is
as wide as its target and in its dtype.

## Tests

`TestIdleInputs.test_v2_worker_without_spec_info` and
`test_multi_layer_v2_worker_without_spec_info` (the real `forward_batch_generation` up to
the draft step, with a 128-wide drafter on a 256-wide target): {cpu_test_command(concerns.V2_IDLE_WIDTH)}.
""",
    ),
    Patch(
        concerns.PD_STANDALONE,
        "[Spec] Size the PD decode server's hidden-state buffer for STANDALONE too",
        f"""\
## Motivation

In PD disaggregation the prefill server sizes the hidden-state slot of its metadata
buffers with the draft width when `is_eagle() or is_standalone()`; the decode server only
when `is_eagle()`, and 16 otherwise. With `--speculative-algorithm STANDALONE` the two
servers disagree on the size of the buffer the draft state is transferred into.

## Modifications

The decode server's condition is the prefill server's.

## Behavior changes

A STANDALONE decode server allocates the draft width. EAGLE and non-speculative servers
are unchanged.

## Design notes

The PD buffers were routed (no behavior change) two patches earlier; this patch only
changes the decode server's condition, so the fix reads alone.

## Tests

`TestPDMetadataBuffers.test_standalone_v1` / `_v2` (both servers' buffers through the real
`Scheduler.init_disaggregation`), and
`TestOneDtypeAtDtypeAuto.test_every_site_gets_the_targets_dtype` that the sites share one
dtype:
{cpu_test_command(concerns.PD_STANDALONE)}.
""",
    ),
    Patch(
        concerns.DRAFTER_FC,
        "[Spec] Size the EAGLE-3 drafter's fc by the aux layers it declares",
        f"""\
## Motivation

`LlamaForCausalLMEagle3` builds `fc` with `3 * hidden_size_in` inputs whatever the drafter
declares, while the target concatenates the hidden states of every layer the drafter names
in `eagle_aux_hidden_state_layer_ids`. A drafter trained on four target layers cannot load
its `fc` weight:

```
$ python3 -m sglang.launch_server --model-path <target> --speculative-algorithm EAGLE3 \\
    --speculative-draft-model-path <drafter with "eagle_aux_hidden_state_layer_ids": [1, 8, 16, 24]>
AssertionError: Attempted to load weight (torch.Size([4096, 16384])) into parameter
(torch.Size([4096, 12288]))
```
`LlamaModel.forward` also decides whether its input is the target's features by comparing
widths, `hidden_states.shape[-1] != embeds.shape[-1]`: a drafter with one aux layer as wide
as the drafter skips `fc`, and a wrong width reaches `fc` as a bare matmul error.

## Modifications

- `models/llama_eagle3.py`: `fc` takes `get_eagle_num_aux_hidden_states(config) *
  hidden_size_in` features (the declared ids, from `eagle_config` or the top level of the
  config, else 3; the parser of `spec_info.py`, which imports no scheduler module). `LlamaModel.project_hidden_states(hidden_states, forward_batch)` decides by
  the step: draft decode steps read the draft model's own hidden states as they are; extend
  and draft-extend steps read the target's, through `fc` with aux hidden states (their width
  must be `fc.in_features`, else a `ValueError` naming both widths) and as they are without;
  an idle batch under DP attention carries padding in the width of the phase its input was
  built for, and goes through `fc` when it has `fc`'s width. The mode is the batch's own
  (`_original_forward_mode` when DP padding ran it as EXTEND).

## Behavior changes

EAGLE-3 drafters that name other than three target layers serve. A one-aux-layer drafter as
wide as its target now goes through its `fc` in extend steps. Target hidden states of
another width than `fc` takes fail with a `ValueError` naming both, at the first extend (or
at CUDA-graph capture of the draft-extend graph). Drafters with three layers, or with aux
hidden states off, compute what they computed before.

## Design notes

The step, not the width, says what the hidden states are: with one aux layer as wide as the
drafter, or a drafter as wide as three of its target's layers, the width cannot tell the
target's features from the drafter's own. Only an idle batch has no step to go by; its rows
are padding, and both readings leave it `hidden_size` wide.

## Tests

`TestDrafterFc`: builds `LlamaForCausalLMEagle3` on the CPU from a tiny config declaring
four aux layers (in `eagle_config` and at the top level), checks `fc.in_features`, that a
draft-extend forward with three layers' width fails naming both widths, and how
`project_hidden_states` reads each mode, and that importing `llama_eagle3.py` in a fresh
interpreter imports no `eagle_info` (the parser is `spec_info`'s); `TestStartupValidation`
accepts four layers: {cpu_test_command(concerns.DRAFTER_FC)}.

## Accuracy

Measured (outside this PR, on the CPU, float32): the drafter's forward with 3 and 4 aux
layers against the speculators library's own `Eagle3DraftModel` on the same random weights
and inputs (equal to 1e-5), and tiny random-weight EAGLE-3 drafters with 4 layer ids served
on the CPU, v1 and v2 workers, one of them under `--tp 2 --dp 2 --enable-dp-attention`:
greedy tokens equal to the run without speculation, accept length 3.7 to 4.0 of 4 on
drafters crafted to agree with the target. Not measured: acceptance with a real
checkpoint, and any run on a GPU.
""",
    ),
    Patch(
        concerns.IDLE_INPUTS,
        "[Spec] Give idle EAGLE inputs empty attention indices on the worker's device",
        f"""\
## Motivation

Under DP attention an idle rank's batch is padded to the size the ranks agreed on, and the
padded batch initialises the attention metadata. The Triton and FlashInfer backends read
`spec_info.kv_indptr` and `kv_indices`; an idle `EagleDraftInput` leaves them `None` and
`EagleVerifyInput` has no such fields, so the idle rank fails with
`AttributeError: 'NoneType' object has no attribute 'shape'` (the kind of failure
https://github.com/sgl-project/sglang/pull/28221 fixed later for `EagleDraftExtendInput`).
`EagleVerifyInput.create_idle_input` also hard-codes `device="cuda"`.

## Modifications

- `EagleDraftInput.create_idle_input` and `EagleVerifyInput.create_idle_input` return
  inputs with `kv_indptr` (one zero: no rows) and `kv_indices` (empty) on the given device;
  `EagleVerifyInput` gets the two fields, and its `create_idle_input` a `device` parameter,
  which the four workers pass.
- The v2 draft-extend input, built inline, gets the same pointers when the batch is idle.

## Behavior changes

An idle rank under DP attention with the Triton or FlashInfer backend serves instead of
failing. Nothing changes for a batch with requests.

## Design notes

`EagleVerifyInput.create_idle_input`'s new `device` parameter defaults to `"cuda"`, what it
hard-coded, so callers outside these workers keep working.

## Tests

`TestIdleInputsCarryAttentionIndices`: every idle input the workers build carries one
int32 zero and no indices on the worker's device. `TestPaddedIdleBatchOnTriton`: each of
them, padded by `prepare_mlp_sync_batch` on the idle one of two DP ranks, through the real
`TritonAttnBackend.init_forward_metadata`: {cpu_test_command(concerns.IDLE_INPUTS)}.
""",
    ),
    Patch(
        concerns.ATTENTION_BACKENDS,
        "[Spec] Build the EAGLE draft attention metadata for the batch DP attention pads",
        f"""\
## Motivation

Under DP attention `ModelRunner.forward` pads every batch to the size the ranks agreed on
(`ForwardBatch.prepare_mlp_sync_batch`). Without CUDA graphs, `EAGLEWorker.draft` and
`EagleDraftWorker.draft` build the attention metadata of every draft step once, for the
batch as it is, then run each step with `skip_attn_backend_init=True`, and each step's
forward pads the batch after that. With 2 requests on one rank and 1 on the other (MAX_LEN
padding) the smaller rank's draft steps run 2 query rows on metadata of 1, and the Triton
backend stops at `decode_attention_fwd`'s `assert q.shape[0] <= kv_indptr.shape[0] - 1`
(FlashInfer plans the rows it was given). Separately, FlashInfer's decode planner fills
`global_override_indptr_cpu[1 : bs + 1]` with the cumulative sum of every row of a padded
idle batch's `seq_lens_cpu`, while the idle input's `kv_indptr` describes none: a shape error.
The same kind of mismatch (metadata built before `prepare_mlp_sync_batch` inflates the batch)
was fixed for the TRT-LLM MHA backend in https://github.com/sgl-project/sglang/pull/21649.

## Modifications

- `eagle_info.py`: `get_draft_decode_metadata_batch(forward_batch, draft_model_runner)`:
  under DP attention, a copy of the batch padded by the same `prepare_mlp_sync_batch` each
  step will run (the batch itself is not changed); the batch itself wherever nothing is
  padded. `EAGLEWorker.draft` and `EagleDraftWorker.draft` build the draft metadata for it,
  so the metadata has the rows the steps run.
- FlashInfer's decode planner sums the `seq_lens_cpu` of the rows `kv_indptr` has. No
  attention runs on an idle batch (`AttentionBackend.forward` returns before it), so its
  plan has no rows; for every other batch the slice is the whole tensor.

## Behavior changes

A DP-attention rank whose draft batch is padded to another rank's requests serves without
CUDA graphs instead of stopping at the assert; its padded rows are attended like the padding
CUDA graphs replay (a request slot of length 1), and dropped after each step as before. A
padded idle batch plans on FlashInfer. Batches DP attention does not pad, and every run with
CUDA graphs, are unchanged.

## Design notes

The metadata is built for the batch the steps run rather than the backends fitting a batch
to metadata built for another: a mismatch between the two still stops at
`decode_attention_fwd`'s assert. Building the pointers from `seq_lens` where the input has
none (as https://github.com/sgl-project/sglang/pull/28221 did for the draft-extend input)
does not apply to draft decode, whose KV layout includes the draft tokens of each step.

## Tests

`TestPaddedDecodeOnTriton`: one request's draft metadata built through
`get_draft_decode_metadata_batch` with the other rank at 2 requests has 2 rows, the batch
itself keeps 1 until its step pads it, a batch nothing pads is returned as it is, and the
real `TritonAttnBackend.forward_decode` (kernels interpreted on the CPU, `TRITON_INTERPRET=1`)
attends both padded rows, the real one exactly as unpadded.
`TestPaddedIdleBatchOnFlashInfer`: the real `FlashInferIndicesUpdaterDecode.call_begin_forward`
with a recording wrapper plans no rows for an idle input padded to 2 rows:
{cpu_test_command(concerns.ATTENTION_BACKENDS)}.
""",
    ),
    Patch(
        concerns.EAGLE3_NORM_VARIANTS,
        "[Spec] Compute the EAGLE-3 drafter's declared norm variants",
        f"""\
## Motivation

EAGLE-3 drafters can declare four variants of the draft model, at the top level of their
config (the speculators library) or in `eagle_config` (NVIDIA's GPT-OSS EAGLE-3 drafters keep
`norm_before_fc` there; vLLM reads both places since
https://github.com/vllm-project/vllm/pull/42143). `LlamaForCausalLMEagle3` reads none of
them, so it computes another function than the one the drafter was trained as (on real
weights: a lower acceptance, and no error):

- `norm_before_residual`: the mid layer's residual is the normed hidden states;
- `norm_before_fc`: one RMSNorm over the concatenated aux hidden states before `fc`;
- `fc_norm`: one RMSNorm per aux layer before `fc`;
- `norm_output`: the next draft step reads the normed output, not the pre-norm sum.

## Modifications

`models/llama_eagle3.py`: `get_eagle3_norm_flag(config, key)` reads a flag at the top level
of the config or in `eagle_config` (a flag set in both places with different values is
refused, naming the key); the mid layer reads `norm_before_residual`; `LlamaModel` builds
`input_norm` (`norm_before_fc`) or `fc_norm` (`fc_norm`) with their weight names, applies
them in `apply_fc` wherever `fc` was applied, and with `norm_output` returns the normed
hidden states for the next step. A config that sets both `norm_before_fc` and `fc_norm` is
refused when the model is built, before its weights load. Every flag defaults to off.

## Behavior changes

None for drafters that declare none of the four keys (every SpecForge drafter). Drafters
that declare them compute what they were trained as.

## Tests

`TestEagle3NormVariants`: builds `LlamaForCausalLMEagle3` on the CPU with each flag and
checks what each one changes in its forward (and that with every flag off nothing does),
`norm_before_fc` in `eagle_config` too, and the refusal of a flag set twice with different
values; for the mid layer's two flags the attention's output is zeroed, as no attention
backend runs in this CPU test: {cpu_test_command(concerns.EAGLE3_NORM_VARIANTS)}.

## Accuracy

Measured (outside this PR, on the CPU, float32): the draft model's forward for each variant,
with 3 and 4 aux layers, against the speculators library's own `Eagle3DraftModel` (0.9.0) on
the same random weights and inputs: equal to 1e-5 (observed under 1e-6). A tiny
`norm_before_fc` drafter served on the CPU gives the greedy tokens of the run without
speculation, but its crafted hidden states make that norm a no-op, so it does not measure
the norm. Not measured: acceptance with a real checkpoint, and any run on a GPU.
""",
    ),
    Patch(
        concerns.SPECULATORS_FORMAT,
        "[Spec] Load EAGLE-3 drafters saved in the speculators format",
        f"""\
## Motivation

The speculators library saves EAGLE-3 drafters with `architectures: ["Eagle3DraftModel"]`
(`["Eagle3Speculator"]` in its early releases), the decoder layer's config nested under
`transformer_layer_config`, the aux layer ids and the draft vocabulary at the top level, and
the weights of the decoder layer under `layers.0.`. `get_config` hands the file to
`AutoConfig`, which knows no such model type, so none of them load
(https://github.com/sgl-project/sglang/issues/18216):

```
ValueError: Unrecognized model in <drafter>. Should have a `model_type` key in its config.json
```

The format also counts the aux layer ids differently. The library's ids are indices into the
target's hidden states as transformers' `output_hidden_states` returns them (0: the
embeddings, `k`: the output of layer `k - 1`; its `resolve_target_layer_ids` allows up to
`num_hidden_layers`); SGLang's ids name the layer whose output is read. Read as SGLang's,
every declared id would feed the drafter the hidden state after the one it was trained on.

## Modifications

- `get_config` reads the config through `auto_config_or_speculators_eagle3`, which calls
  `AutoConfig.from_pretrained` with the same arguments and reads a config with a
  `speculators_config` as the `LlamaForCausalLMEagle3` config it describes
  (`speculators_eagle3_to_llama_config`): the layer config, plus
  `draft_vocab_size`, the top-level `eagle_aux_hidden_state_layer_ids` as SGLang numbers
  them (`k - 1` for the library's `k`: the layers the target captures and `fc` takes),
  `target_hidden_size` when set, the four norm flags and the dtype. What
  `LlamaForCausalLMEagle3` cannot compute is refused there, naming the key: another
  algorithm than eagle3, a decoder layer other than llama (the library's default is Qwen3),
  more than one decoder layer, layer id 0 (the embeddings, which no target captures). The
  final hidden state (id `num_hidden_layers`) is refused by the target's capture check,
  naming the ids as the file declares them (the converter keeps them beside SGLang's):
  SGLang's targets do not capture it.
- `LlamaForCausalLMEagle3.load_weights` reads `layers.0.` as `midlayer.`; `d2t` and `t2d`
  are read as before.

## Behavior changes

Drafters in the speculators format load and serve with EAGLE-3; every other config is read
as before, with no extra read: only a config `AutoConfig` refuses is read once more, as a
dict, and its error is raised to `get_config`'s `except` as before unless it is the format.

## Design notes

An adapter in `get_config`, not a new model class: the format is a config layout and weight
names over the same draft model, whose variants the previous patch computes.

The format is detected where `AutoConfig` reads the config, not probed before it: a probe
reads every model's `config.json` a second time (for a hub model, a second hub access),
targets included, and has to swallow its own `OSError`/`ValueError`. A speculators config
has no `model_type` (the library strips it), so transformers 5 refuses it (`ValueError`):
only then is the dict read again. transformers 4 may instead build the config class of a
model type named in the path; the format is then seen on the config already read (its
`speculators_config` attribute), which costs other models nothing.

## Tests

`TestSpeculatorsFormat`: writes speculators-format folders (current and early form, three
and four aux layers, every refused key), reads them through `get_config` and `ModelConfig`,
and loads renamed weights into `LlamaForCausalLMEagle3`; a Llama config is read by
`get_config` with one `PretrainedConfig.get_config_dict`, as before. `TestTargetCapture`'s
speculators tests compare the hidden states the target hands such a drafter with
transformers' `output_hidden_states[k]` for its ids `k`, the last layer's input included,
and check the embeddings and the final hidden state are refused, naming the file's ids: {cpu_test_command(concerns.SPECULATORS_FORMAT)}.

## Accuracy

Measured (outside this PR, on the CPU, float32): drafters written by the speculators
library's own `save_pretrained` (0.9.0), loaded through `get_config` and `load_weights`,
give the forward of the library's `Eagle3DraftModel` on the same weights and inputs to 1e-5,
for every norm variant and 3 and 4 aux layers; tiny speculators-format drafters served on
the CPU (v1 and v2 workers) give the greedy tokens of the run without speculation, and
accept every draft (accept length 4.0 of 4) from the hidden states their ids mean; read as
SGLang's ids, 1.07. Not measured: acceptance with a real speculators checkpoint, and any run
on a GPU.
""",
    ),
    Patch(
        concerns.E2E_TEST,
        "[Spec] Add an EAGLE-3 end-to-end test under DP attention at --dtype auto",
        """\
## Motivation

The sizes of the previous patches meet in one server: an EAGLE-3 drafter whose config
gives float16 on a bfloat16 target, narrower than it and naming four of its layers, DP
attention with an idle rank, CUDA graphs on.

## Modifications

`test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py`, registered in the CUDA suite
`stage-b-test-2-gpu-large`: writes a tiny Llama target and a tiny EAGLE-3 drafter with random
weights into a temporary folder (nothing is downloaded) and serves them under
`--tp-size 2 --dp-size 2 --enable-dp-attention`, with the v1 and the v2 worker: one request
in flight (one rank idle), 16 concurrent requests that finish at their first verify, and the
reported acceptance length. Each test stands alone.

## Tests

Needs two GPUs: `python3 test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py`. **It
has never run on a GPU**: only its imports, its registration, the models it writes (read by
`ModelConfig`, accepted by `validate_eagle_draft_config`) and the server arguments it builds
(parsed by `ServerArgs`) were checked, on a CPU.
""",
    ),
)

assert tuple(p.concern for p in PATCHES) == concerns.ORDER
assert PATCHES[-1].concern == concerns.E2E_TEST


def patches(gpu_test: bool = False, family: Family = BEFORE_REFACTOR) -> tuple[Patch, ...]:
    """The patches ``pr`` writes: every concern but the GPU end-to-end test, which has never
    run (no GPU here); ``gpu_test`` (``pr --with-gpu-test``) adds it as the last patch.
    ``family``: the release family's series (0.5.23's has no GPU test)."""
    if family is not BEFORE_REFACTOR:
        from .after_refactor.series import PATCHES as after_refactor

        return after_refactor
    return PATCHES if gpu_test else PATCHES[:-1]


# -- the trees ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseTree(SglangTree):
    """A checkout read at its release tag: what the series is written against when the
    working tree is already (partly) patched."""

    tag: str = ""

    def _at_tag(self, key: str) -> str:
        return f"{self.tag}:{self.git_prefix + '/' if self.git_prefix else ''}{key}"

    def read(self, file: str) -> str:
        text = _git(self.root, "show", self._at_tag(self.key(file)))
        if text is None:
            raise TreeError(f"{self._at_tag(self.key(file))}: not in the release tag")
        return text

    def holds(self, key: str) -> bool:
        return _git(self.root, "cat-file", "-e", self._at_tag(key)) is not None


def release_of(tree: SglangTree) -> SglangTree:
    """The tree to write the change against: ``tree`` itself when nothing of the patch is in
    it, else the same checkout at its release tag."""
    report = check_tree(tree, FindingsCache(default_cache_dir()))
    touched = report.tests_present or any(
        f.status == Finding.ROUTED for f in report.findings
    )
    if not touched:
        return tree
    tag = None
    if tree.checkout is not None:
        found = _git(tree.checkout, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*")
        tag = found.strip() if found else None
    if not tag:
        raise TreeError(
            f"{tree.package}: already patched, and no v* git tag names the release to "
            "write the change against"
        )
    return ReleaseTree(
        tree.package, tree.checkout, tree.git_dir, tree.git_prefix, tree.version, tag
    )


def _texts(report: TreeReport) -> dict[str, str]:
    texts = {report.tree.key(r.file): r.new_text for r in report.results}
    texts.update({k: v.decode("utf-8") for k, v in report.modules_to_add.items()})
    texts.update({k: v.decode("utf-8") for k, v in report.tests_to_add.items()})
    return texts


@dataclass
class Step:
    patch: Patch
    #: ``{path from the checkout root: (text before, text after)}``; ``None``: no file
    files: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    def _body(self, key: str) -> str:
        """The unified diff of one file (computed once: difflib is the slow part)."""
        cache = self.__dict__.setdefault("_bodies", {})
        if key not in cache:
            old, new = self.files[key]
            if old is None:
                cache[key] = unified_diff("", new or "", "/dev/null", "b/" + key)
            else:
                cache[key] = unified_diff(old, new or "", "a/" + key, "b/" + key)
        return cache[key]

    def diff(self) -> str:
        out = []
        for key, (old, new) in sorted(self.files.items()):
            out.append(git_header(key, old is None) + self._body(key))
        return "".join(out)

    def counts(self) -> dict[str, tuple[int, int]]:
        """``{path: (lines added, lines removed)}``."""
        found = {}
        for key in self.files:
            lines = self._body(key).splitlines()[2:]
            added = sum(1 for line in lines if line.startswith("+"))
            removed = sum(1 for line in lines if line.startswith("-"))
            found[key] = (added, removed)
        return found

    def source_lines(self) -> int:
        return sum(a + r for k, (a, r) in self.counts().items() if not k.startswith("test/"))

    def test_lines(self) -> int:
        return sum(a + r for k, (a, r) in self.counts().items() if k.startswith("test/"))


def steps(tree: SglangTree, gpu_test: bool = False, progress=None) -> list[Step]:
    """The series for ``tree`` (a release, or a checkout patched from one): one step per
    concern of ``patches(gpu_test)``, each the difference between the tree with the concerns
    before it and with it. ``progress``: called with (patch number, patches, subject) before
    each is computed."""
    release = release_of(tree)
    written = patches(gpu_test, tree.family)
    every = patches(True, tree.family)
    if progress:
        progress(0, len(written), "the whole change")
    whole = rewrite_tree(release)
    if whole.unknown or whole.missing:
        raise TreeError(f"{tree.srt}: sizing sites the rules cannot handle; run check")
    before: dict[str, str] = {}
    out = []
    for count, patch in enumerate(written, start=1):
        if count == len(every):
            report = whole
        else:
            if progress:
                progress(count, len(written), patch.subject)
            with concerns.only(p.concern for p in written[:count]):
                report = rewrite_tree(release)
        after = _texts(report)
        step = Step(patch)
        originals = {release.key(r.file): r.old_text for r in report.results}
        for key, text in after.items():
            old = before[key] if key in before else originals.get(key)
            if old != text:
                step.files[key] = (old, text)
        for key in before.keys() - after.keys():  # a test file no later concern keeps
            step.files[key] = (before[key], None)
        before.update(after)
        out.append(step)
    return out


# -- format-patch ------------------------------------------------------------------------


def diffstat(step: Step) -> str:
    counts = step.counts()
    if not counts:
        return ""
    width = max(len(k) for k in counts)
    lines = [
        f" {k.ljust(width)} | {a + r:4d} {'+' * min(a, 40)}{'-' * min(r, 40)}"
        for k, (a, r) in sorted(counts.items())
    ]
    added = sum(a for a, _ in counts.values())
    removed = sum(r for _, r in counts.values())
    lines.append(
        f" {len(counts)} files changed, {added} insertions(+), {removed} deletions(-)"
    )
    return "\n".join(lines) + "\n"


def format_patch(step: Step, number: int, total: int, author: str, date: str) -> str:
    """One ``git format-patch`` file: ``git am --keep-non-patch`` keeps the ``[Spec]`` of
    the subject (plain ``git am`` strips every leading bracket)."""
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {author}\n"
        f"Date: {date}\n"
        f"Subject: [PATCH {number}/{total}] {step.patch.subject}\n"
        "\n"
        f"{step.patch.body.rstrip()}\n"
        "---\n"
        f"{diffstat(step)}\n"
        f"{step.diff()}"
        "-- \n"
        "2.43.0\n\n"
    )


def file_name(number: int, subject: str) -> str:
    words = "".join(c if c.isalnum() else "-" for c in subject)
    slug = "-".join(part for part in words.split("-") if part)[:52].rstrip("-")
    return f"{number:04d}-{slug}.patch"


def author_of(tree: SglangTree) -> str | None:
    if tree.checkout is None:
        return None
    name = (_git(tree.checkout, "config", "user.name") or "").strip()
    mail = (_git(tree.checkout, "config", "user.email") or "").strip()
    return f"{name} <{mail}>" if name and mail else None


def write_series(
    tree: SglangTree, folder: Path, author: str, gpu_test: bool = False, progress=None
) -> list[Path]:
    found = [s for s in steps(tree, gpu_test, progress) if s.files]
    date = email.utils.format_datetime(datetime.datetime.now(datetime.timezone.utc))
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for number, step in enumerate(found, start=1):
        path = folder / file_name(number, step.patch.subject)
        path.write_text(format_patch(step, number, len(found), author, date), encoding="utf-8")
        written.append(path)
    return written
