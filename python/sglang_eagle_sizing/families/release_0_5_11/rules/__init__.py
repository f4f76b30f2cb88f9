"""The rewrite rules of SGLang 0.5.9-0.5.11, one concern each, in the order ``apply`` chains
them. SGLang 0.5.23's are in ``after_refactor/rules.py`` (``families.py`` says which tree
takes which); the target-capture rule's loop serves both (``target_capture.CaptureTryRule``).

The import rule runs last: it imports what the others introduced.
"""

from sglang_eagle_sizing.families.release_0_5_11.rules.annotations import TypeCheckingAnnotationRule
from sglang_eagle_sizing.families.release_0_5_11.rules.aux_flag import AuxFlagRule
from sglang_eagle_sizing.families.release_0_5_11.rules.contract import ContractRule
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
