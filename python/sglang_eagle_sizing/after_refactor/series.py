"""SGLang 0.5.23's series: one patch per concern (``concerns.AFTER_REFACTOR_ORDER``), each
with its description for upstream's reviewers. ``series.py`` writes them."""

from __future__ import annotations

from .. import concerns
from ..series import Patch

UNIT_TEST = "test/registered/unit/speculative/test_eagle3_draft_config.py"

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

assert tuple(p.concern for p in PATCHES) == concerns.AFTER_REFACTOR_ORDER
