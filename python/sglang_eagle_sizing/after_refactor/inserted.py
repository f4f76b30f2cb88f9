"""What the patch inserts into SGLang 0.5.23, as SGLang code in its own idiom."""

from __future__ import annotations

#: The module ``speculative/eagle3_draft_config.py``: config only (model files import it),
#: in the idiom of ``dflash_utils.DFlashDraftConfig`` / ``parse_dflash_draft_config``.
EAGLE3_DRAFT_CONFIG_FILE = "speculative/eagle3_draft_config.py"
EAGLE3_DRAFT_CONFIG_MODULE = "sglang.srt.speculative.eagle3_draft_config"
PARSE = "parse_eagle3_draft_config"

EAGLE3_DRAFT_CONFIG = '''\
"""The EAGLE-3 drafter's aux hidden states, read from its config alone.

The target's capture, the drafter's ``fc`` and the draft-extend buffers all take the
layers and their number from ``parse_eagle3_draft_config``, so they cannot disagree.
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


def _invalid(draft_hf_config: Any, key: str, value: Any, expected: str) -> ValueError:
    path = getattr(draft_hf_config, "name_or_path", "") or "<unknown>"
    return ValueError(
        f"Invalid {key}={value!r} in the EAGLE-3 draft model config {path}: "
        f"expected {expected}."
    )


def _read_layer_ids(draft_hf_config: Any, key: str, value: Any) -> Optional[List[int]]:
    if value is None:
        return None
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)
        or min(value) < 0
    ):
        raise _invalid(draft_hf_config, key, value, "a non-empty list of layer ids")
    return list(value)


def parse_eagle3_draft_config(*, draft_hf_config: Any) -> Eagle3DraftConfig:
    """Read which target layers an EAGLE-3 drafter concatenates.

    The layer ids may be declared in ``eagle_config`` (a dict or an object) or at the
    top level of the config; declared in both, they must name the same layers. A
    declared ``num_aux_hidden_states`` must equal the number of layers captured.
    """
    eagle_config = getattr(draft_hf_config, "eagle_config", None) or {}
    if isinstance(eagle_config, dict):
        use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
        nested_ids = eagle_config.get(_LAYER_IDS_KEY)
    else:
        use_aux_hidden_state = getattr(eagle_config, "use_aux_hidden_state", True)
        nested_ids = getattr(eagle_config, _LAYER_IDS_KEY, None)

    nested_key = f"eagle_config.{_LAYER_IDS_KEY}"
    nested_ids = _read_layer_ids(draft_hf_config, nested_key, nested_ids)
    top_level_ids = _read_layer_ids(
        draft_hf_config,
        _LAYER_IDS_KEY,
        getattr(draft_hf_config, _LAYER_IDS_KEY, None),
    )
    if nested_ids is not None and top_level_ids is not None:
        if nested_ids != top_level_ids:
            raise _invalid(
                draft_hf_config,
                _LAYER_IDS_KEY,
                top_level_ids,
                f"the layers of {nested_key}={nested_ids!r}",
            )
    layer_ids = nested_ids if nested_ids is not None else top_level_ids

    if layer_ids is None:
        num_aux_hidden_states = DEFAULT_NUM_AUX_HIDDEN_STATES
        captured = "the target's default layers"
    else:
        num_aux_hidden_states = len(layer_ids)
        captured = "its layer ids"
    declared = getattr(draft_hf_config, "num_aux_hidden_states", None)
    if declared is not None and declared != num_aux_hidden_states:
        raise _invalid(
            draft_hf_config,
            "num_aux_hidden_states",
            declared,
            f"{num_aux_hidden_states}, the number of {captured}",
        )
    return Eagle3DraftConfig(
        use_aux_hidden_state=bool(use_aux_hidden_state),
        aux_hidden_state_layer_ids=layer_ids,
        num_aux_hidden_states=num_aux_hidden_states,
    )
'''
