"""SGLang 0.5.23's series: one patch per concern (``concerns.AFTER_REFACTOR_ORDER``), each
with its description for upstream's reviewers. ``series.py`` writes them."""

from __future__ import annotations

from .. import concerns
from ..series import Patch

TESTS = "test/registered/unit/speculative/eagle3_draft/"
UNIT_TEST = TESTS + "test_aux_layer_count.py"

PATCHES: tuple[Patch, ...] = (
    Patch(
        concerns.AUX_COUNT,
        "[Spec] Read the EAGLE-3 aux-layer count by one parser for capture, fc and buffers",
        f"""\
## Motivation

The number of target layers an EAGLE-3 drafter concatenates is read by four rules that
disagree:

| reader | rule |
| --- | --- |
| `eagle_utils.get_draft_input_from_target_hidden_dim` (draft-extend buffers) | `num_aux_hidden_states`, else `eagle_config` ids, else top-level ids, else 3 |
| `llama_eagle3.LlamaModel.__init__` (`fc`) | `num_aux_hidden_states`, else `eagle_config` ids, else 3 |
| `kimi_k25_eagle3._get_eagle_aux_layer_count` (`fc`) | `eagle_config` ids, else top-level ids, else 3 |
| `spec_aux_hidden_state._resolve_eagle_aux_hidden_state` (what the target captures) | `eagle_config` ids (a dict only), else the 3 default layers |

So a Llama drafter with 4 ids at the top level of its config gets 4-wide buffers, a 3-wide
`fc` and the target's 3 default layers; a drafter with `num_aux_hidden_states: 4` and no ids
gets a 4-wide `fc` fed 3 layers. Reproduced on the CPU with a 4-layer Llama target:

- ids `[0, 1, 2]` at the top level: the target captures its default layers instead, and the
  first request fails in `fc` (`mat1 and mat2 shapes cannot be multiplied (6x128 and 192x64)`);
- 3 ids in `eagle_config` with `num_aux_hidden_states: 4`: start-up fails while the draft
  weights load (`Attempted to load weight (torch.Size([64, 192])) into parameter
  (torch.Size([64, 256]))`).

## Modifications

- `speculative/eagle3_draft_config.py` (new, config only, so model files can import it):
  `Eagle3DraftConfig` and `parse_eagle3_draft_config(*, draft_hf_config)`, in the idiom of
  `DFlashDraftConfig` / `parse_dflash_draft_config`. Layer ids come from `eagle_config` (a
  dict or an object) or the top level; declared in both places they must name the same
  layers; a declared `num_aux_hidden_states` must equal the number of captured layers (the
  ids', else the 3 default layers).
- The four readers above call it.

## Behaviour changes

- A drafter with its layer ids at the top level of its config gets those layers captured
  (before: the target's default layers).
- A drafter whose `num_aux_hidden_states` disagrees with its layer ids, whose ids are set in
  both places with different layers, or whose ids are not a non-empty list of non-negative
  integers is refused with a `ValueError` naming the key, when the target reads the draft
  config (before the weights load). Before: a weight-loader assert or a shape error at the
  first request.
- An `eagle_config` given as an object (not a dict) gives its layer ids to every count
  reader (before: the capture ignored it). `llama_eagle3`'s `LlamaModel.__init__` still
  reads `norm_before_fc` with `eagle_config.get`, so a Llama drafter with such a config
  still raises `AttributeError` there, as before.
- Drafters that declare their ids in `eagle_config` only, or none at all, are unchanged.

## Tests

`{UNIT_TEST}` (CPU): the parser, and the four readers on one drafter config each for ids at
the top level, in `eagle_config`, none, and a disagreeing `num_aux_hidden_states`. Putting
back any one reader's own rule fails it. No GPU was used.
""",
    ),
)

PATCHES += (
    Patch(
        concerns.DRAFT_CHECK,
        "[Spec] Check the EAGLE-3 drafter against its target, each target by its own rule",
        f"""\
## Motivation

Nothing checks an EAGLE-3 drafter against its target (the one drafter check at start-up is
IQuest-Q1 MTP's, in `_handle_iquest_q1_mtp_draft`), and the aux layer ids are never
range-checked (`--return-aux-hidden-state-layer-ids` is, in
`_check_capture_layer_ids_in_range`):

- each target class turns the ids into the layers it captures by its own rule in
  `set_eagle3_layers_to_capture` (most capture the input of layer `id + 1`; DeepSeek-V2/V3,
  Kimi-K2.5 and GLM-4-MoE-Lite take the ids as given unless the first is 1; GPT-OSS takes
  ids ending at `num_hidden_layers` as given). Where that names the input of a layer past
  the last one, GPT-OSS, Gemma-3, Gemma-4 and MiniMax-M3 capture the last layer's output
  after their layer loop; every other class drops it, so the first request fails in `fc`
  (a Llama or DeepSeek-V3 drafter with the target's last layer id), and Qwen2/Qwen3-MoE,
  Qwen3-Next and Qwen3.5 index past their layers at start-up instead;
- a drafter trained for another target width (`target_hidden_size`) fails at the first
  request in `fc`, or while its weights load;
- a drafter without `target_hidden_size` is sized by its own `hidden_size`
  (`get_draft_input_from_target_hidden_dim`, `LlamaModel.__init__`), which is only right
  when it equals the target's.

## Modifications

In `speculative/eagle3_draft_config.py`:

- `validate_eagle3_draft_config`, called by `_resolve_eagle_aux_hidden_state` right after it
  parses the drafter's config, before any weights load: the hidden sizes, and ids past every
  class's rule (above `num_hidden_layers`).
- `set_eagle3_layers_to_capture(model, layer_ids)`, called by
  `configure_aux_hidden_state_capture` instead of the model's method: it calls the class's
  own method, reads back what it captures (`layers_to_capture` of the module that keeps it,
  a delegating class's language model included) and refuses an index past the model's
  layers, or equal to their number where the model does not capture the last layer's
  output. `Gemma3TextModel`, `Gemma4TextModel`, `GptOssModel` and `MiniMaxM3Model`, whose
  forward captures it, say so with `captures_final_hidden_state = True`.

Each refusal is a `ValueError` naming the key, its value and the limit (and the class, for
the capture).

## Behaviour changes

Drafters that would fail later (at the first request, or while loading weights) now fail at
start-up with a message naming the key. What each class captures is unchanged: every id a
class captures is still served as it was. A drafter with `use_aux_hidden_state: false` is not
checked for aux hidden states.

## Tests

`{TESTS}test_draft_check.py` (CPU, through `_resolve_eagle_aux_hidden_state` on a tiny
Llama target and drafter written as config folders): ids up to `num_hidden_layers` left to
the class, ids past it refused, a wrong `target_hidden_size` refused, a drafter narrower than
its target without `target_hidden_size` refused. `{TESTS}test_capture_rule.py` (CPU,
`configure_aux_hidden_state_capture` on Llama, DeepSeek-V3, GPT-OSS, Gemma-3, Qwen3-MoE and
Kimi-K2.5 models holding only their layers): each class's own rule, GPT-OSS's and Gemma-3's
last layer's output captured, the others' refused. No GPU was used.
""",
    ),
)

PATCHES += (
    Patch(
        concerns.DRAFT_DTYPE,
        "[Spec] Build the EAGLE draft model in its target's dtype at --dtype auto",
        f"""\
## Motivation

The draft `ModelConfig` gets the same `--dtype` as the target's
(`ModelConfig.from_server_args`), and at `auto` each resolves it from its own config. A
float16 drafter on a bfloat16 target is built in float16 while it reads the target's
bfloat16 hidden states: eagerly the first request fails in `fc` (reproduced on the CPU with
the dtypes mirrored, a bfloat16 drafter on a float16 target: `expected m1 and m2 to have
the same dtype, but got: c10::Half != c10::BFloat16`); the draft-extend and prefill
CUDA-graph buffers, typed by the draft's dtype (`EAGLEDraftExtendCudaGraphRunner.__init__`,
`MultiLayerEagleMultiStepDraftExtendCudaGraphRunner._allocate_buffers`,
`PrefillCudaGraphRunner.__init__`), cast the target's states on `copy_` instead, and the PD
metadata buffers (`Scheduler.init_disaggregation`) carry the draft's dtype.

## Modifications

`_handle_eagle_draft_dtype` in `arg_groups/speculative_hook.py`, called by
`_handle_eagle_family` after `_handle_iquest_q1_mtp_draft`: for EAGLE and EAGLE3 at
`--dtype auto` with a draft path of its own, when the draft config resolves to another
dtype than the target (`model_config_of`), `declare_resolution(..., dtype=<the target's>)`
and one log line. The decision is made before any `ModelConfig` is built, so every reader
gets the same dtype: the draft `TpModelWorker`, the capture, the PD scheduler's draft
config, the buffers above (which then hold data of their own dtype). The target's dtype
does not change (it is what `auto` resolved it to).

Relation to #25894 ("eagle: inherit dtype from target", open): that PR sets
`server_args.dtype` in the v1 `EAGLEWorker.__init__`, which 0.5.23 no longer has; the v2
workers, the PD scheduler and the capture build the draft config without it. Here the
decision is a resolution hook, made once before any config is built, only at `auto` (an
explicit `--dtype` already applies to both models) and not for STANDALONE, whose drafter
reads tokens only and keeps its own dtype.

## Behaviour changes

At `--dtype auto`, an EAGLE/EAGLE3 drafter whose config gives another dtype than the
target's is built in the target's dtype (one log line says so). Nothing changes for a
drafter in the target's dtype, an explicit `--dtype`, MTP heads read from the target's own
checkpoint, or STANDALONE.

## Tests

`{TESTS}test_draft_dtype.py` (CPU, `ServerArgs` resolution on config folders): a bfloat16
drafter on a float16 target gets float16 for EAGLE3 and EAGLE; a drafter in the target's
dtype leaves `auto`; an explicit dtype is kept; STANDALONE keeps its own. Removing the call,
or applying it to STANDALONE, fails it. The model forward in the two dtypes was served on
the CPU only with the dtypes mirrored (no bfloat16 target serves on a CPU here); no GPU was
used.
""",
    ),
)

PATCHES += (
    Patch(
        concerns.SPECULATORS_EAGLE3,
        "[Spec] Load EAGLE-3 drafters saved in the speculators format",
        f"""\
## Motivation

The `speculators` library (vLLM's drafter format) saves EAGLE-3 drafters with
`architectures: ["Eagle3DraftModel"]` (`["Eagle3Speculator"]` in its early releases), the
decoder layer's config nested under `transformer_layer_config` and no `model_type`, so
`AutoConfig.from_pretrained` refuses them (`ValueError: Unrecognized model in ... Should have
a model_type key in its config.json`) and no such drafter loads (#18216). Its layer ids do
not count as SGLang's either: `speculators` indexes the target's hidden states as
transformers' `output_hidden_states` returns them (0 the embeddings, k the output of layer
k - 1; its `resolve_target_layer_ids` allows `num_layers`, the final hidden state), where
SGLang's `eagle_aux_hidden_state_layer_ids` name the layer whose output is captured
(`set_eagle3_layers_to_capture` adds 1).

## Modifications

In `utils/hf_transformers/config.py`, the HF parser reads a config through
`auto_config_or_speculators_eagle3` (the same arguments as `AutoConfig.from_pretrained`):
a config `AutoConfig` reads is returned as it is, without a second read; only one it
refuses is read again as a dict, converted by `speculators_eagle3_to_llama_config` if it is
the format, else `AutoConfig`'s error is raised again. The converter maps the format onto
`LlamaForCausalLMEagle3`'s config: the decoder layer's keys, `draft_vocab_size`,
`target_hidden_size`, the norm flags, and the layer ids as SGLang counts them (k - 1; id 0,
the embeddings, is refused) beside the ids as the file declares them.
`parse_eagle3_draft_config` gives those as `aux_hidden_state_indices`;
`_resolve_eagle_aux_hidden_state` keeps them in `SpecAuxHiddenStateConfig`
(`eagle_aux_hidden_state_indices`, passed by the model runner to
`configure_aux_hidden_state_capture`), and `set_eagle3_layers_to_capture` gives the target's
class the ids that make it capture exactly those hidden states: SGLang's (k - 1) for the
classes that add 1, the indices themselves for DeepSeek-V2/V3's rule, which takes ids as given
unless the first is 1. The weights need nothing: `layers.0.` is the name
`LlamaForCausalLMEagle3.load_weights` already uses.

## Behaviour changes

Speculators-format EAGLE-3 drafters load, and every target captures the hidden states their
ids name. A layer id of the format that the target cannot capture (0, the embeddings;
`num_layers`, the final hidden state, which transformers gives after the final norm) is
refused at start-up, naming the key and the ids as the file declares them; so is a drafter
whose ids the target's rule cannot capture (DeepSeek-V3 takes no ids that capture
`output_hidden_states[1]`). Other configs are read as before.

## Not in this patch

Of the four norm flags the converter sets on the config, `LlamaModel` already reads
`norm_before_fc`, `fc_norm` and `norm_output`; `norm_before_residual` (the residual of the
drafter's input layer taken after `hidden_norm`) is read by the next patch. Until then a
drafter trained with it drafts with the raw hidden states as the residual.

## Tests

`{TESTS}test_speculators_format.py` (CPU, `get_config` and the target's capture on config
folders): the format reads as `LlamaForCausalLMEagle3`, a Llama config is left as it is, ids
`[1, 3, 5]` capture SGLang's `[0, 2, 4]` (the hidden states `output_hidden_states[1, 3, 5]`
of transformers), the same hidden states captured by a Llama and a DeepSeek-V3 model, the
final hidden state and the embeddings refused, the final one naming the file's ids, and ids
DeepSeek-V3's rule cannot capture refused. No GPU was used.
""",
    ),
)

PATCHES += (
    Patch(
        concerns.SPECULATORS_NORMS,
        "[Spec] Read norm_before_residual in the EAGLE-3 drafter's input layer",
        f"""\
## Motivation

EAGLE-3 drafters trained with the `speculators` library may set `norm_before_residual`:
the input layer's residual is the target hidden states after `hidden_norm`, not before.
`LlamaDecoderLayer` in `models/llama_eagle3.py` does not read it, so such a drafter loads
and serves but computes another function than the one it was trained as, without any
error. Reproduced on the CPU with a tiny drafter built and saved by the library (0.9.0):
SGLang's logits differ from the library's `Eagle3DraftModel` forward by up to 1.2, the
hidden states it carries to the next draft step by 3.3 (float32; equal to 1e-6 without the
flag). The other three norm flags of the format (`norm_before_fc`, `fc_norm`,
`norm_output`) `LlamaModel` already reads, and computes as the library does (the same
comparison: equal to 1e-6).

## Modifications

`LlamaDecoderLayer.__init__` reads `norm_before_residual` as `LlamaModel` reads
`norm_before_fc` (from `eagle_config`, else the top level of the config); in `forward`,
the input layer's branch then takes the normed hidden states as its residual. The
non-input layers (whose residual add is fused into `hidden_norm`) are unchanged.

## Behaviour changes

A drafter whose config sets `norm_before_residual` computes its input layer with the
normed residual. None for drafters without the flag (or with it false).

## Tests

`{TESTS}test_norm_variants.py` (CPU, tiny random weights, attention replaced by a
stub that returns zeros so the layer's residual is what it carries): the input layer's
residual is `hidden_norm(hidden_states)` with the flag (at the top level or in
`eagle_config`) and the raw hidden states without it; a non-input layer is unchanged; and
`LlamaModel`'s three flags are checked the same way (`norm_before_fc`: one norm over the
concatenated aux hidden states before `fc`; `fc_norm`: one per aux layer; `norm_output`:
the next draft step reads the normed hidden states). Ignoring any one flag fails it.
Outside this PR, the drafter's forward (`DRAFT_EXTEND_V2` and `EXTEND`, on the CPU
attention backend) was compared on each flag, with 3 and 4 aux layers, with the
`speculators` library's own `Eagle3DraftModel` forward on the checkpoint the library saved:
equal to float32 rounding. No GPU was used.
""",
    ),
)

PD_TEST = "test/registered/unit/speculative/test_standalone_disagg_draft_input.py"
IDLE_VERIFY_TEST = "test/registered/unit/speculative/test_idle_verify_input.py"

#: Served broken on the CPU under PD disaggregation and DP attention (patched or not), fixed
#: after the sizing series.
PATCHES += (
    Patch(
        concerns.STANDALONE_DISAGG,
        "[Spec] Hand STANDALONE's first draft proposal from the PD prefill server to decode",
        f"""\
## Motivation

Under PD disaggregation a STANDALONE decode server cannot decode. The prefill server's
draft extend makes each request's first proposal (`topk_p`, `topk_index`), but:

- `process_batch_result_disagg_prefill` hands it to the request only `if
  self.spec_algorithm.is_eagle()` (EAGLE, EAGLE3, FROZEN_KV_MTP);
- `MetadataBuffers.set_buf` copies it into the transfer buffers only when the request has
  hidden states, which STANDALONE's draft does not make;
- `SpeculativeAlgorithm.build_disagg_draft_input` returns `None` for STANDALONE.

So the decode server's first decode batch has no `spec_info`,
`EAGLEWorkerV2.forward_batch_generation` builds an idle `EagleDraftInput` (zero rows) for a
batch of live requests, and the draft model runs on 0 tokens. Reproduced on the CPU (a
prefill and a decode server, Mooncake over TCP on loopback, a one-layer Llama drafting for a
4-layer Llama target, `--speculative-num-steps 3 --speculative-eagle-topk 1
--speculative-num-draft-tokens 4`): the prefill server answers each request with its first
token, and the decode server's first draft step fails in the rotary embedding (`cannot
reshape tensor of 0 elements into shape [0, -1, 16]`). EAGLE-3 under the same two servers
serves.

## Modifications

- `disaggregation/prefill.py`: the hand-off takes every algorithm whose draft state is
  top-k proposals (`need_topk()`: EAGLE and STANDALONE, as `FutureMap` relays it), and the
  request's hidden states only when the draft made some.
- `disaggregation/utils.py`: `MetadataBuffers.set_buf` copies the proposal when the request
  has one and the hidden states when it has those (one `if` becomes two).
- `speculative/spec_info.py`: `build_disagg_draft_input` builds STANDALONE's first draft
  input with `build_eagle_disagg_draft_input` (STANDALONE runs the EAGLE worker).
- `speculative/eagle_disaggregation.py`: that input stacks hidden states only for an
  algorithm that carries them (`carries_draft_hidden_states()`), so STANDALONE's has none,
  as after its own prefill without PD (the buffer's 16-float placeholder is not passed on).

The metadata buffers' layout does not change (STANDALONE keeps the 16-float hidden-state
slot both servers already agree on).

## Behaviour changes

A STANDALONE decode server starts each request from the prefill server's proposal, as an
EAGLE one does. EAGLE, EAGLE3, FROZEN_KV_MTP and non-speculative PD are unchanged.

## Tests

`{PD_TEST}` (CPU): the prefill server's real hand-off of two finished requests,
the transfer buffers they are written into and read from, and the decode server's first
draft input: for STANDALONE it holds the prefill server's proposals and no hidden states;
for EAGLE the proposals and the hidden states, as before. Handing over EAGLE's proposal
only, copying it only with hidden states, returning no draft input for STANDALONE, or
stacking hidden states for every algorithm fails it. Served on the CPU with the two
servers above, the decode server's greedy tokens equal transformers' `generate` and the
accept length is 1.778, STANDALONE's without PD; unpatched, the decode server still fails
as above. No GPU was used.
""",
    ),
    Patch(
        concerns.IDLE_VERIFY_KV,
        "[Spec] Give the idle EAGLE verify input the KV layout fields attention backends read",
        f"""\
## Motivation

Under DP attention an idle rank runs every forward of a speculative step: its draft step
returns `EagleVerifyInput.create_idle_input(...)` (`build_eagle_verify_input`), the verify
batch is padded to the rows the ranks agreed on (`ForwardBatch.prepare_mlp_sync_batch`), and
the eager runner initialises the attention metadata of a padded idle batch
(`EagerRunner._execute_idle`). A decode or idle batch's metadata reads
`spec_info.kv_indptr`, which `EagleDraftInput` and `EagleDraftExtendInput` have (`None` for an
idle input: "build from seq_lens") but `EagleVerifyInput` does not. With the Triton backend
the idle rank fails at the first verify: `AttributeError: 'EagleVerifyInput' object has no
attribute 'kv_indptr'` (`TritonAttnBackend.init_forward_metadata`), and the other rank then
loses its peer. Reproduced on the CPU: EAGLE-3 on a Qwen3 target, `--tp 2 --dp 2
--enable-dp-attention --attention-backend triton`, one request (one rank idle). FlashInfer
already reads the field with `getattr(spec_info, "kv_indptr", None)` and takes a missing one
as `None`; Triton reads it as an attribute.

## Modifications

`EagleVerifyInput` gets the fields `kv_indptr` and `kv_indices`, `None` by default, as the
draft inputs have them: a verify input carries no KV layout of its own, so the backends lay a
padded idle verify batch out from its own rows, as they do for an idle draft input.

## Behaviour changes

An idle rank under DP attention verifies with the Triton backend, as it does with
FlashInfer. Nothing else reads the fields of a verify input: a target-verify batch builds
its layout from the batch as before. Backends that take a speculative batch's layout from
`spec_info` whenever there is one (aiter, wave, FlashInfer-MLA) are not changed here.

## Tests

`{IDLE_VERIFY_TEST}` (CPU): the verify input the real
`build_eagle_verify_input` returns for an idle batch, in an idle batch padded to 2 rows,
through the real `TritonAttnBackend.init_forward_metadata` (its KV index packing recorded,
not run): the metadata has the padded batch's 2 rows. The class without the fields fails
it. Served on the CPU as above, the idle rank verifies and the tokens equal transformers'
`generate` (accept length 3.000); unpatched, the `AttributeError` above. No GPU was used;
with CUDA graphs, where a padded idle batch replays a captured graph, it was not shown.

## Not changed

The idle draft inputs `_forward_dp_spec_prefill_coordination` and
`MultiLayerEagleWorkerV2.forward_batch_generation` build without `vocab_size` get
`draft_probs` of shape `(0, 0)` under rejection sampling, but nothing reads it by its width:
an idle draft returns through `_draft_forward_idle`, `build_eagle_verify_input` returns the
idle verify input before it looks at `draft_probs`, `merge_batch` replaces an idle stub's
fields, and `pad_batch` pads rows only (run on 0.5.23's own functions; not served).
""",
    ),
)

assert tuple(p.concern for p in PATCHES) == concerns.AFTER_REFACTOR_ORDER
