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
- An `eagle_config` given as an object (not a dict) is read by every reader (before:
  `llama_eagle3` raised `AttributeError`, the capture ignored it).
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
        "[Spec] Check the EAGLE-3 drafter against its target before any weights load",
        f"""\
## Motivation

Nothing checks an EAGLE-3 drafter against its target before the weights load (the one
drafter check at start-up is IQuest-Q1 MTP's, in `_handle_iquest_q1_mtp_draft`), and the aux
layer ids are never range-checked (`--return-aux-hidden-state-layer-ids` is, in
`_check_capture_layer_ids_in_range`):

- a layer id naming the target's last layer is never captured: `set_eagle3_layers_to_capture`
  captures the input of layer `id + 1`, which does not exist, so the first request fails in
  `fc` (on a Qwen2/Qwen3-MoE target `set_eagle3_layers_to_capture` indexes past the layers
  at start-up instead);
- a drafter trained for another target width (`target_hidden_size`) fails at the first
  request in `fc`, or while its weights load;
- a drafter without `target_hidden_size` is sized by its own `hidden_size`
  (`get_draft_input_from_target_hidden_dim`, `LlamaModel.__init__`), which is only right
  when it equals the target's.

## Modifications

`validate_eagle3_draft_config` in `speculative/eagle3_draft_config.py`, called by
`_resolve_eagle_aux_hidden_state` right after it parses the drafter's config: the target's
start-up, before the target or the drafter loads any weights. Each refusal is a `ValueError`
naming the key, its value and what the target expects. Loop models count
`num_hidden_layers * num_loops` layers, as `_check_capture_layer_ids_in_range` does.

## Behaviour changes

Drafters that would fail later (at the first request, or while loading weights) now fail at
start-up with a message naming the key. A drafter with `use_aux_hidden_state: false` is not
checked for aux hidden states.

## Tests

`{TESTS}test_draft_check.py` (CPU, through `_resolve_eagle_aux_hidden_state` on a tiny Llama
target and drafter written as config folders): ids up to the last layer but one served, the
last layer refused, a wrong `target_hidden_size` refused, a drafter narrower than its target
without `target_hidden_size` refused. Removing the call, or allowing the last layer, fails
it. No GPU was used.
""",
    ),
)

assert tuple(p.concern for p in PATCHES) == concerns.AFTER_REFACTOR_ORDER
