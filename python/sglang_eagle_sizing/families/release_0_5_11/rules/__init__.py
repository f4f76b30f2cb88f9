"""The rewrite rules of SGLang 0.5.9-0.5.11, one concern each, in the order ``apply`` chains
them (``RULES``). The import rule runs last: it imports what the others introduced.

``for_release``: the contract reads ``ModelConfig.spec_hidden_size`` where the release has it
(0.5.10+), else a helper it inserts (``rules/contract.py``).
"""

from sglang_eagle_sizing.families.release_0_5_11.rules.annotations import TypeCheckingAnnotationRule
from sglang_eagle_sizing.families.release_0_5_11.rules.aux_flag import AuxFlagRule
from sglang_eagle_sizing.families.release_0_5_11.rules.contract import (
    ContractRule,
    release_model_config,
)
from sglang_eagle_sizing.families.release_0_5_11.rules.disaggregation import MetadataBufferRule
from sglang_eagle_sizing.families.release_0_5_11.rules.draft_metadata import DraftMetadataRule
from sglang_eagle_sizing.families.release_0_5_11.rules.draft_model_config import (
    DraftModelConfigRule,
)
from sglang_eagle_sizing.families.release_0_5_11.rules.draft_runner import DraftRunnerRule
from sglang_eagle_sizing.families.release_0_5_11.rules.drafter_fc import DrafterFcRule
from sglang_eagle_sizing.families.release_0_5_11.rules.eagle3_norm_variants import (
    Eagle3NormVariantsRule,
)
from sglang_eagle_sizing.families.release_0_5_11.rules.extend_idle import ExtendIdleRule
from sglang_eagle_sizing.families.release_0_5_11.rules.flashinfer_idle import FlashInferIdleRule
from sglang_eagle_sizing.families.release_0_5_11.rules.graph_buffers import BufferRule
from sglang_eagle_sizing.families.release_0_5_11.rules.idle_attention import IdleAttentionRule
from sglang_eagle_sizing.families.release_0_5_11.rules.idle_inputs import IdleInputRule
from sglang_eagle_sizing.families.release_0_5_11.rules.imports import ImportRule
from sglang_eagle_sizing.families.release_0_5_11.rules.parser import ParserRule
from sglang_eagle_sizing.families.release_0_5_11.rules.speculators_format import (
    SpeculatorsConfigRule,
    SpeculatorsWeightNamesRule,
)
from sglang_eagle_sizing.families.release_0_5_11.rules.target_capture import TargetCaptureRule

for_release = release_model_config

RULES = (
    ParserRule,
    ContractRule,
    DraftRunnerRule,
    AuxFlagRule,
    DraftModelConfigRule,
    IdleInputRule,
    ExtendIdleRule,
    IdleAttentionRule,
    FlashInferIdleRule,
    DraftMetadataRule,
    BufferRule,
    MetadataBufferRule,
    TargetCaptureRule,
    DrafterFcRule,
    Eagle3NormVariantsRule,
    SpeculatorsWeightNamesRule,
    SpeculatorsConfigRule,
    TypeCheckingAnnotationRule,
    ImportRule,
)

__all__ = ["RULES"]
