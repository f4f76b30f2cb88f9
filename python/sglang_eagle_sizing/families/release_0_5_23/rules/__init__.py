"""The rewrite rules of SGLang 0.5.23, one concern each, in the order ``apply`` chains them.

0.5.23 counts an EAGLE-3 drafter's aux hidden states by four rules: the extend helper
(``num_aux_hidden_states``, else ``eagle_config``'s ids, else the top-level ids, else 3),
``llama_eagle3``'s ``fc`` (top-level ids ignored), Kimi-K2.5's ``fc`` (``num_aux_hidden_states``
ignored) and the target's capture (``eagle_config``'s ids only). Each rule here makes one of
them ask ``parse_eagle3_draft_config`` (``inserted.EAGLE3_DRAFT_CONFIG``); the import rule,
last, imports it where it is used.
"""

from __future__ import annotations

from sglang_eagle_sizing.families.release_0_5_23.rules.aux_count import (
    AuxCountBlockRule,
    AuxCountFunctionRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.capture_contract import (
    AddOneCaptureContractRule,
    HandedOnCaptureContractRule,
    OwnRulesCaptureContractRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.capture_contract import (
    for_release as capture_facts,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_check import (
    DraftCheckRule,
    TargetCaptureCheckRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_dtype import DraftDtypeRule
from sglang_eagle_sizing.families.release_0_5_23.rules.gemma3_aux_residual import (
    Gemma3AuxResidualRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.idle_verify_kv import (
    IdleVerifyInputRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.imports import ParserImportRule
from sglang_eagle_sizing.families.release_0_5_23.rules.speculators_eagle3 import (
    SpeculatorsConfigRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.speculators_norms import (
    NormBeforeResidualRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.standalone_disagg import (
    DisaggDraftHiddenRule,
    DisaggDraftInputRule,
    MetadataDraftProposalRule,
    PrefillDraftProposalRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.top_level_layer_ids import (
    ConfigureCaptureCallRule,
    ConfigureCaptureRule,
    IndicesFieldRule,
    TargetCaptureRule,
)

#: the release's facts the rules write for (``sites.release_facts``)
for_release = capture_facts

RULES = (
    AuxCountBlockRule,
    AuxCountFunctionRule,
    AddOneCaptureContractRule,
    HandedOnCaptureContractRule,
    OwnRulesCaptureContractRule,
    TargetCaptureRule,
    IndicesFieldRule,
    ConfigureCaptureRule,
    ConfigureCaptureCallRule,
    DraftCheckRule,
    TargetCaptureCheckRule,
    DraftDtypeRule,
    SpeculatorsConfigRule,
    NormBeforeResidualRule,
    Gemma3AuxResidualRule,
    PrefillDraftProposalRule,
    MetadataDraftProposalRule,
    DisaggDraftInputRule,
    DisaggDraftHiddenRule,
    IdleVerifyInputRule,
    ParserImportRule,
)

#: Every rule that names its files refuses one without its anchor (``Rule.needles_required``)
#: but the capture-contract rules: a model file without ``set_eagle3_layers_to_capture`` has
#: no class to declare, which ``sites.release_notes`` says.
_NOTED_WHEN_ABSENT = (
    AddOneCaptureContractRule,
    HandedOnCaptureContractRule,
    OwnRulesCaptureContractRule,
)
for _rule in RULES:
    if _rule.files is not None and _rule not in _NOTED_WHEN_ABSENT:
        _rule.needles_required = True
