"""The rewrite rules of SGLang 0.5.9-0.5.11, one concern each, in the order ``apply`` chains
them. SGLang 0.5.23's are in ``after_refactor/rules.py`` (``families.py`` says which tree
takes which); the target-capture rule's loop serves both (``target_capture.CaptureTryRule``).

The import rule runs last: it imports what the others introduced.
"""

from .annotations import TypeCheckingAnnotationRule
from .aux_flag import AuxFlagRule
from .contract import ContractRule
from .disaggregation import MetadataBufferRule
from .draft_metadata import DraftMetadataRule
from .draft_model_config import DraftModelConfigRule
from .draft_runner import DraftRunnerRule
from .drafter_fc import DrafterFcRule
from .eagle3_norm_variants import Eagle3NormVariantsRule
from .extend_idle import ExtendIdleRule
from .flashinfer_idle import FlashInferIdleRule
from .graph_buffers import BufferRule
from .idle_attention import IdleAttentionRule
from .idle_inputs import IdleInputRule
from .imports import ImportRule
from .parser import ParserRule
from .speculators_format import SpeculatorsConfigRule, SpeculatorsWeightNamesRule
from .target_capture import TargetCaptureRule

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
