"""Each rule on a small source of our own, before and after; the engine's contract with rules."""

from __future__ import annotations

import textwrap

import pytest
from sglang_eagle_sizing.engine import Finding, RewriteError, check_source, rewrite_source
from sglang_eagle_sizing.families.release_0_5_11.rules import RULES
from sglang_eagle_sizing.families.release_0_5_11.rules.annotations import TypeCheckingAnnotationRule
from sglang_eagle_sizing.families.release_0_5_11.rules.aux_flag import AuxFlagRule
from sglang_eagle_sizing.families.release_0_5_11.rules.disaggregation import MetadataBufferRule
from sglang_eagle_sizing.families.release_0_5_11.rules.draft_runner import DraftRunnerRule
from sglang_eagle_sizing.families.release_0_5_11.rules.extend_idle import ExtendIdleRule
from sglang_eagle_sizing.families.release_0_5_11.rules.graph_buffers import BufferRule
from sglang_eagle_sizing.families.release_0_5_11.rules.idle_inputs import IdleInputRule
from sglang_eagle_sizing.families.release_0_5_11.rules.imports import ImportRule


def rewrite(file, source, *rules):
    result = rewrite_source(file, textwrap.dedent(source), rules)
    return result.new_text, result.findings


def assert_idempotent(file, after, *rules):
    """A second run changes nothing and finds the site routed."""
    again, findings = rewrite(file, after, *rules)
    assert again == after and findings[0].status == Finding.ROUTED


def test_idle_input_decode_site():
    before = """
    class EAGLEWorker:
        def _draft_preprocess_idle(self, batch):
            batch.spec_info = EagleDraftInput.create_idle_input(
                device=self.device,
                hidden_size=self.model_config.spec_hidden_size,
                dtype=self.model_config.dtype,
                topk=self.topk,
            )
    """
    after, findings = rewrite("speculative/eagle_worker.py", before, IdleInputRule)
    assert "hidden_size=EagleDraftInput.hidden_size_for(self)," in after
    assert "dtype=EagleDraftInput.dtype_for(self)," in after
    assert "topk=self.topk," in after
    assert [(f.line, f.label, f.status) for f in findings] == [(4, "decode", "unrouted")]
    assert_idempotent("speculative/eagle_worker.py", after, IdleInputRule)


def test_idle_input_v2_site_uses_the_draft_worker():
    before = """
    class EAGLEWorkerV2:
        def forward_batch_generation(self, batch):
            if batch.spec_info is None:
                batch.spec_info = EagleDraftInput.create_idle_input(
                    device=self.device,
                    hidden_size=self.target_worker.model_config.spec_hidden_size,
                    dtype=self.target_worker.model_config.dtype,
                )
    """
    after, _ = rewrite("speculative/eagle_worker_v2.py", before, IdleInputRule)
    assert "hidden_size=EagleDraftInput.hidden_size_for(self.draft_worker)," in after
    assert "target_worker" not in after


def test_unknown_idle_input_is_reported_not_rewritten():
    before = """
    class SomethingNew:
        def step(self):
            return EagleDraftInput.create_idle_input(hidden_size=8, dtype=None)
    """
    after, findings = rewrite("speculative/eagle_worker.py", before, IdleInputRule)
    assert after == textwrap.dedent(before)
    assert [(f.scope, f.status) for f in findings] == [("SomethingNew.step", "unknown")]


def test_detached_idle_inputs_become_extend_inputs_with_a_comment():
    before = """
    class EagleVerifyInput:
        def verify(self, batch):
            if batch.forward_mode.is_idle():
                return Output(
                    draft_input=EagleDraftInput.create_idle_input(
                        hidden_size=batch.model_config.spec_hidden_size,
                        dtype=batch.model_config.dtype,
                    )
                )
            draft_input = EagleDraftInput.create_idle_input(
                hidden_size=batch.model_config.spec_hidden_size,
                dtype=batch.model_config.dtype,
            )
    """
    after, findings = rewrite("speculative/eagle_info.py", before, IdleInputRule)
    assert after.count("EagleDraftExtendInput.create_idle_input(") == 2
    assert after.count("# No worker in reach") == 2
    assert [f.label for f in findings] == ["extend", "extend"]
    assert rewrite("speculative/eagle_info.py", after, IdleInputRule)[0] == after


def test_extend_idle_input_moves_out_of_the_if_and_covers_verify_made_inputs():
    before = """
    class EAGLEWorker:
        def forward_draft_extend_after_decode(self, batch):
            input_is_idle = batch.forward_mode.is_idle()
            if not input_is_idle and batch.spec_info.verified_id.numel() == 0:
                batch = batch.copy()
                batch.prepare_for_idle()
                hidden_size = (
                    self.model_config.hidden_size * 3
                    if self.speculative_algorithm.is_eagle3()
                    else self.model_config.spec_hidden_size
                )
                batch.spec_info = EagleDraftInput.create_idle_input(
                    device=self.device,
                    hidden_size=hidden_size,
                    dtype=self.model_config.dtype,
                )
            batch.spec_info.num_tokens_per_req = 4
    """
    after, findings = rewrite("speculative/eagle_worker.py", before, ExtendIdleRule)
    expected = """
    class EAGLEWorker:
        def forward_draft_extend_after_decode(self, batch):
            input_is_idle = batch.forward_mode.is_idle()
            if not input_is_idle and batch.spec_info.verified_id.numel() == 0:
                batch = batch.copy()
                batch.prepare_for_idle()
            if batch.forward_mode.is_idle():
                # Also replaces an idle input made by EagleVerifyInput.verify, which has no
                # worker in reach: the draft-extend input takes this worker's sizes.
                batch.spec_info = EagleDraftExtendInput.create_idle_input(
                    device=self.device,
                    hidden_size=EagleDraftExtendInput.hidden_size_for(self),
                    dtype=EagleDraftExtendInput.dtype_for(self),
                )
            batch.spec_info.num_tokens_per_req = 4
    """
    assert after == textwrap.dedent(expected)
    assert [(f.line, f.status) for f in findings] == [(13, "unrouted")]
    assert_idempotent("speculative/eagle_worker.py", after, ExtendIdleRule)


def test_buffer_branches_collapse_into_one_routed_buffer():
    before = """
    class EAGLEDraftExtendCudaGraphRunner:
        def __init__(self, eagle_worker):
            if self.eagle_worker.eagle_use_aux_hidden_state:
                hidden_states = torch.zeros(
                    (self.max_num_token, self.model_runner.model_config.hidden_size * 3),
                    dtype=self.model_runner.dtype,
                )
            else:
                hidden_states = torch.zeros(
                    (self.max_num_token, self.model_runner.model_config.spec_hidden_size),
                    dtype=self.model_runner.dtype,
                )
    """
    after, findings = rewrite("speculative/eagle_draft_extend_cuda_graph_runner.py", before, BufferRule)
    expected = """
    class EAGLEDraftExtendCudaGraphRunner:
        def __init__(self, eagle_worker):
            hidden_states = torch.zeros(
                (
                    self.max_num_token,
                    EagleDraftExtendInput.hidden_size_for(self.eagle_worker),
                ),
                dtype=EagleDraftExtendInput.dtype_for(self.eagle_worker),
            )
    """
    assert after == textwrap.dedent(expected)
    assert [f.status for f in findings] == ["unrouted", "unrouted"]


def test_buffer_sized_by_a_parameter_is_not_a_site():
    before = """
    def make(hidden_size):
        return torch.empty((0, hidden_size))
    """
    assert rewrite("speculative/eagle_info.py", before, BufferRule)[1] == []


START_UP_AFTER = """
            # The drafter's config, read before its weights load.
            draft_model_config = get_eagle_draft_model_config(server_args)
            validate_eagle_draft_config(
                self.speculative_algorithm,
                draft_model_config,
                self.target_worker.model_config,
            )
            self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
                self.speculative_algorithm, draft_model_config.hf_config
            )
            self.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states(
                draft_model_config.hf_config
            )
            set_eagle_draft_dtype(
                server_args, draft_model_config, self.target_worker.model_config
            )
"""


def test_aux_flag_inline_parse_moves_before_the_draft_model_is_built():
    before = """
    class EagleDraftWorker:
        def __init__(self, server_args, target_worker):
            self.target_worker = target_worker
            with ctx:
                # Init draft worker
                self.draft_worker = TpModelWorker(server_args=server_args)
            self.draft_runner = self.draft_worker.model_runner
            self.eagle_use_aux_hidden_state = False
            if self.speculative_algorithm.is_eagle3():
                hf_config = self.draft_runner.model_config.hf_config
                eagle_config = getattr(hf_config, "eagle_config", {})
                self.eagle_use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
            self.init_cuda_graphs()
    """
    after, findings = rewrite("speculative/eagle_worker_v2.py", before, AuxFlagRule)
    expected = (
        """
    class EagleDraftWorker:
        def __init__(self, server_args, target_worker):
            self.target_worker = target_worker"""
        + START_UP_AFTER.rstrip("\n")
        + """
            with ctx:
                # Init draft worker
                self.draft_worker = TpModelWorker(server_args=server_args, model_config=draft_model_config)
            self.draft_runner = self.draft_worker.model_runner
            self.init_cuda_graphs()
    """
    )
    assert after == textwrap.dedent(expected)
    assert [(f.line, f.label, f.status) for f in findings] == [(9, "aux-flag", "unrouted")]
    assert_idempotent("speculative/eagle_worker_v2.py", after, AuxFlagRule)


def test_aux_flag_is_added_before_super_init_of_a_worker_without_one():
    before = """
    class MultiLayerEagleWorker:
        def __init__(self, server_args, target_worker):
            self.target_worker = target_worker
            with ctx, speculative_moe_backend_context():
                super().__init__(server_args=server_args, is_draft_worker=True)
            self.init_cuda_graphs()
    """
    after, findings = rewrite("speculative/multi_layer_eagle_worker.py", before, AuxFlagRule)
    lines = after.splitlines()
    build = next(i for i, line in enumerate(lines) if "super().__init__(" in line)
    assert lines[build - 1].strip() == "with ctx, speculative_moe_backend_context():"
    assert "draft_model_config = get_eagle_draft_model_config(server_args)" in lines[build - 16]
    assert lines[build - 7].strip() == "self.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states("
    assert lines[build - 4].strip() == "set_eagle_draft_dtype("
    assert lines[build].strip().endswith("model_config=draft_model_config)")
    assert [(f.line, f.status) for f in findings] == [(5, "unrouted")]
    assert_idempotent("speculative/multi_layer_eagle_worker.py", after, AuxFlagRule)


def test_aux_flag_and_draft_runner_are_added_to_the_multi_layer_draft_worker():
    before = """
    class MultiLayerEagleDraftWorker:
        def __init__(self, server_args):
            with empty_context():
                self.draft_worker = TpModelWorker(server_args=server_args)
            self.draft_runner_list: List[ModelRunner] = self.draft_worker.model_runner_list
            self.init_cuda_graphs()
    """
    after, _ = rewrite("speculative/multi_layer_eagle_worker_v2.py", before, DraftRunnerRule, AuxFlagRule)
    lines = textwrap.dedent(after).splitlines()
    assert lines[3].strip().startswith("# The drafter's config, read before")
    assert lines[4].strip() == "draft_model_config = get_eagle_draft_model_config(server_args)"
    assert lines[16].strip() == "set_eagle_draft_dtype("
    assert lines[19].strip() == "with empty_context():"
    assert lines[20].strip().endswith("model_config=draft_model_config)")
    assert lines[21].strip().startswith("self.draft_runner_list")
    assert lines[23].strip() == "self.draft_runner = self.draft_runner_list[0]"


def test_aux_flag_of_an_earlier_patch_after_the_build_is_an_error():
    before = """
    class EagleDraftWorker:
        def __init__(self, server_args):
            self.draft_worker = TpModelWorker(server_args=server_args)
            self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
                self.speculative_algorithm, self.draft_runner.model_config.hf_config
            )
    """
    with pytest.raises(RewriteError, match="eagle_worker_v2.py:5: .*form the rule does not know"):
        rewrite("speculative/eagle_worker_v2.py", before, AuxFlagRule)


def test_a_worker_that_never_builds_its_draft_model_is_an_error():
    before = """
    class EAGLEWorker:
        def __init__(self, server_args):
            self.eagle_use_aux_hidden_state = False
    """
    with pytest.raises(RewriteError, match=r"EAGLEWorker.__init__: no statement calls super\(\).__init__"):
        rewrite("speculative/eagle_worker.py", before, AuxFlagRule)


def test_pd_metadata_buffers_get_one_condition_and_the_contract():
    before = """
    class Scheduler:
        def init_disaggregation(self):
            if self.disaggregation_mode == DisaggregationMode.DECODE:
                self.buffers = MetadataBuffers(
                    rows,
                    hidden_size=(
                        model_config.spec_hidden_size
                        if self.spec_algorithm.is_eagle()
                        else 16  # padding
                    ),
                    hidden_states_dtype=(
                        model_config.dtype
                        if self.spec_algorithm.is_eagle()
                        else torch.float32
                    ),
                )
            elif self.disaggregation_mode == DisaggregationMode.PREFILL:
                self.buffers = MetadataBuffers(
                    rows,
                    hidden_size=(
                        model_config.spec_hidden_size
                        if self.spec_algorithm.is_eagle()
                        or self.spec_algorithm.is_standalone()
                        else 16  # padding
                    ),
                    hidden_states_dtype=(
                        model_config.dtype
                        if self.spec_algorithm.is_eagle()
                        or self.spec_algorithm.is_standalone()
                        else torch.float32
                    ),
                )
    """
    after, findings = rewrite("managers/scheduler.py", before, MetadataBufferRule)
    side = """
                self.buffers = MetadataBuffers(
                    rows,
                    hidden_size=(
                        EagleDraftInput.hidden_size_for(self.draft_worker)
                        if self.spec_algorithm.is_eagle()
                        or self.spec_algorithm.is_standalone()
                        else 16  # padding
                    ),
                    hidden_states_dtype=(
                        EagleDraftInput.dtype_for(self.draft_worker)
                        if self.spec_algorithm.is_eagle()
                        or self.spec_algorithm.is_standalone()
                        else torch.float32
                    ),
                )"""
    expected = (
        """
    class Scheduler:
        def init_disaggregation(self):
            if self.disaggregation_mode == DisaggregationMode.DECODE:"""
        + side
        + """
            elif self.disaggregation_mode == DisaggregationMode.PREFILL:"""
        + side
        + "\n"
    )
    assert after == textwrap.dedent(expected)
    assert [(f.line, f.status) for f in findings] == [(5, "unrouted"), (19, "unrouted")]
    assert_idempotent("managers/scheduler.py", after, MetadataBufferRule)


def test_pd_metadata_buffer_with_the_contract_but_its_own_condition_is_not_routed():
    before = """
    class Scheduler:
        def init_disaggregation(self):
            self.buffers = MetadataBuffers(
                rows,
                hidden_size=(
                    EagleDraftInput.hidden_size_for(self.draft_worker)
                    if self.spec_algorithm.is_eagle()
                    else 16
                ),
                hidden_states_dtype=(
                    EagleDraftInput.dtype_for(self.draft_worker)
                    if self.spec_algorithm.is_eagle()
                    else torch.float32
                ),
            )
    """
    after, findings = rewrite("managers/scheduler.py", before, MetadataBufferRule)
    assert [f.status for f in findings] == ["unrouted"]
    assert after.count("or self.spec_algorithm.is_standalone()") == 2


def test_type_checking_only_annotation_is_quoted():
    before = """
    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        from x import ModelRunner


    class W:
        def runner(self, i: int) -> ModelRunner:
            local: ModelRunner = None
            return local
    """
    after, findings = rewrite("speculative/multi_layer_eagle_worker.py", before, TypeCheckingAnnotationRule)
    assert 'def runner(self, i: int) -> "ModelRunner":' in after
    assert "local: ModelRunner = None" in after  # not evaluated: left alone
    assert [f.label for f in findings] == ["annotation"]


def test_imports_are_added_in_isort_order_keeping_the_exploded_form():
    before = """
    from sglang.srt.speculative.eagle_info import (
        EagleDraftInput,
        EagleVerifyInput,
    )

    x = EagleDraftExtendInput, validate_eagle_draft_config
    y = parse_eagle_use_aux_hidden_state
    """
    after, _ = rewrite("speculative/eagle_worker.py", before, ImportRule)
    assert after.startswith(
        "\nfrom sglang.srt.speculative.eagle_info import (\n"
        "    EagleDraftExtendInput,\n    EagleDraftInput,\n    EagleVerifyInput,\n"
        "    validate_eagle_draft_config,\n)\n"
        # the parser is spec_info's: a model file can import it without eagle_info
        "from sglang.srt.speculative.spec_info import parse_eagle_use_aux_hidden_state\n"
    )


def test_a_site_in_a_shape_the_rule_does_not_know_is_an_error():
    before = """
    class EagleDraftWorker:
        def __init__(self):
            self.draft_worker = TpModelWorker()
            self.eagle_use_aux_hidden_state = compute_it_somehow()
    """
    with pytest.raises(RewriteError, match="eagle_worker_v2.py:5: .*form the rule does not know"):
        rewrite("speculative/eagle_worker_v2.py", before, AuxFlagRule)


def test_check_source_rewrites_nothing_and_reports_original_lines():
    source = textwrap.dedent("""
    class EAGLEWorker:
        def _draft_preprocess_idle(self, batch):
            batch.spec_info = EagleDraftInput.create_idle_input(
                hidden_size=self.model_config.spec_hidden_size,
                dtype=self.model_config.dtype,
            )
    """)
    findings = check_source("speculative/eagle_worker.py", source, RULES)
    assert [(f.line, f.label) for f in findings if f.label != "import"] == [(4, "decode")]


# -- idle inputs carry what the attention backends read (rules/idle_attention.py) ----------
IDLE_INPUTS_BEFORE = '''
@dataclass
class EagleVerifyInput:
    draft_token: torch.Tensor
    num_tokens_per_req: int = -1

    @classmethod
    def create_idle_input(cls, topk: int, spec_steps: int, num_verify_tokens: int):
        return cls(
            draft_token=torch.empty((0,), dtype=torch.long, device="cuda"),
            retrieve_index=torch.full(
                (0, num_verify_tokens), -1, dtype=torch.long, device="cuda"
            ),
            topk=topk,
        )


@dataclass
class EagleDraftInput:
    kv_indptr: torch.Tensor = None

    @classmethod
    def create_idle_input(cls, device: torch.device, topk: int):
        return cls(
            topk_p=torch.empty((0, topk), device=device, dtype=torch.float32),
        )
'''

IDLE_INPUTS_AFTER = '''
@dataclass
class EagleVerifyInput:
    draft_token: torch.Tensor
    num_tokens_per_req: int = -1

    # Inputs for the attention backends of an idle batch (see create_idle_input)
    kv_indptr: Optional[torch.Tensor] = None
    kv_indices: Optional[torch.Tensor] = None

    @classmethod
    def create_idle_input(
        cls, topk: int, spec_steps: int, num_verify_tokens: int, device: str = "cuda"
    ):
        """An input for a batch without requests.

        Under DP attention an idle batch is padded to the size all ranks agreed on,
        and the padded batch re-initialises the attention metadata. The Triton and
        FlashInfer backends read a speculative batch's KV layout from ``kv_indptr`` and
        ``kv_indices``: an idle input describes no rows and no KV indices.
        """
        return cls(
            draft_token=torch.empty((0,), dtype=torch.long, device=device),
            retrieve_index=torch.full(
                (0, num_verify_tokens), -1, dtype=torch.long, device=device
            ),
            topk=topk,
            kv_indptr=torch.zeros((1,), dtype=torch.int32, device=device),
            kv_indices=torch.empty((0,), dtype=torch.int32, device=device),
        )


@dataclass
class EagleDraftInput:
    kv_indptr: torch.Tensor = None

    @classmethod
    def create_idle_input(cls, device: torch.device, topk: int):
        """An input for a batch without requests.

        Under DP attention an idle batch is padded to the size all ranks agreed on,
        and the padded batch re-initialises the attention metadata. The Triton and
        FlashInfer backends read a speculative batch's KV layout from ``kv_indptr`` and
        ``kv_indices``: an idle input describes no rows and no KV indices.
        """
        return cls(
            topk_p=torch.empty((0, topk), device=device, dtype=torch.float32),
            kv_indptr=torch.zeros((1,), dtype=torch.int32, device=device),
            kv_indices=torch.empty((0,), dtype=torch.int32, device=device),
        )
'''


def test_idle_inputs_get_empty_index_pointers_and_the_verify_input_a_device():
    from sglang_eagle_sizing.families.release_0_5_11.rules.idle_attention import IdleAttentionRule

    after, findings = rewrite("speculative/eagle_info.py", IDLE_INPUTS_BEFORE, IdleAttentionRule)
    assert after == IDLE_INPUTS_AFTER
    assert [(f.line, f.scope, f.label, f.status) for f in findings] == [
        (8, "EagleVerifyInput.create_idle_input", "idle-attention", "unrouted"),
        (23, "EagleDraftInput.create_idle_input", "idle-attention", "unrouted"),
    ]
    again, findings = rewrite("speculative/eagle_info.py", after, IdleAttentionRule)
    assert again == after and {f.status for f in findings} == {"routed"}


def test_idle_input_with_one_of_the_index_pointers_is_an_error():
    from sglang_eagle_sizing.families.release_0_5_11.rules.idle_attention import IdleAttentionRule

    half = IDLE_INPUTS_BEFORE.replace(
        "            topk_p=", "            kv_indptr=None,\n            topk_p="
    )
    with pytest.raises(RewriteError, match="eagle_info.py:23: .*sets kv_indptr but not all"):
        rewrite("speculative/eagle_info.py", half, IdleAttentionRule)


def test_verify_idle_input_callers_pass_their_device():
    from sglang_eagle_sizing.families.release_0_5_11.rules.idle_attention import IdleAttentionRule

    before = """
    class EAGLEWorker:
        def draft(self, batch):
            if batch.forward_mode.is_idle():
                return EagleVerifyInput.create_idle_input(
                    self.topk,
                    self.speculative_num_steps,
                    self.speculative_num_draft_tokens,
                )
    """
    after, findings = rewrite("speculative/eagle_worker.py", before, IdleAttentionRule)
    assert after == textwrap.dedent(before).replace(
        "draft_tokens,\n", "draft_tokens,\n                device=self.device,\n"
    )
    assert [(f.line, f.label, f.status) for f in findings] == [(5, "idle-device", "unrouted")]
    assert_idempotent("speculative/eagle_worker.py", after, IdleAttentionRule)

    unknown = before.replace("def draft(", "def draft_something_new(")
    after, findings = rewrite("speculative/eagle_worker.py", unknown, IdleAttentionRule)
    assert after == textwrap.dedent(unknown)
    assert [(f.scope, f.status) for f in findings] == [("EAGLEWorker.draft_something_new", "unknown")]


def test_flashinfer_decode_override_sums_the_rows_kv_indptr_has():
    from sglang_eagle_sizing.families.release_0_5_11.rules.flashinfer_idle import FlashInferIdleRule

    file = "layers/attention/flashinfer_backend.py"
    before = """
    class FlashInferIndicesUpdaterDecode:
        def call_begin_forward(self, wrapper, spec_info, seq_lens_cpu):
            if seq_lens_cpu is not None and global_override_indptr_cpu is None:
                global_override_indptr_cpu = torch.empty_like(kv_indptr, device="cpu")
                global_override_indptr_cpu[1 : bs + 1] = torch.cumsum(seq_lens_cpu, dim=0)
    """
    after, findings = rewrite(file, before, FlashInferIdleRule)
    expected = """
    class FlashInferIndicesUpdaterDecode:
        def call_begin_forward(self, wrapper, spec_info, seq_lens_cpu):
            if seq_lens_cpu is not None and global_override_indptr_cpu is None:
                global_override_indptr_cpu = torch.empty_like(kv_indptr, device="cpu")
                # A padded idle batch (DP attention) has more rows than its idle input's
                # kv_indptr describes (none): the override covers the rows kv_indptr has.
                global_override_indptr_cpu[1 : bs + 1] = torch.cumsum(
                    seq_lens_cpu[:bs], dim=0
                )
    """
    assert after == textwrap.dedent(expected)
    assert [(f.line, f.label, f.status) for f in findings] == [(6, "idle-flashinfer", "unrouted")]
    assert_idempotent(file, after, FlashInferIdleRule)

    other = before.replace("torch.cumsum(seq_lens_cpu,", "torch.cumsum(other_lens,")
    with pytest.raises(RewriteError, match="flashinfer_backend.py:6: .*expected seq_lens_cpu"):
        rewrite(file, other, FlashInferIdleRule)
    missing = before.replace("global_override_indptr_cpu[1 : bs + 1]", "something_else[1 : bs + 1]")
    with pytest.raises(RewriteError, match="flashinfer_backend.py:3: .*no global_override_indptr_cpu"):
        rewrite(file, missing, FlashInferIdleRule)


def test_the_draft_builds_its_attention_metadata_for_the_batch_dp_attention_pads():
    from sglang_eagle_sizing.families.release_0_5_11.rules.draft_metadata import DraftMetadataRule

    file = "speculative/eagle_worker.py"
    before = """
    class EAGLEWorker:
        def draft(self, batch):
            if can_cuda_graph:
                pass
            else:
                if not forward_batch.forward_mode.is_idle():
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                out = self.draft_forward(forward_batch)
    """
    after, findings = rewrite(file, before, DraftMetadataRule)
    expected = """
    class EAGLEWorker:
        def draft(self, batch):
            if can_cuda_graph:
                pass
            else:
                if not forward_batch.forward_mode.is_idle():
                    # DP attention pads each draft step's batch: build for the padded one.
                    self.draft_attn_backend.init_forward_metadata(
                        get_draft_decode_metadata_batch(
                            forward_batch, self.draft_model_runner
                        )
                    )
                out = self.draft_forward(forward_batch)
    """
    assert after == textwrap.dedent(expected)
    assert [(f.line, f.label, f.status) for f in findings] == [
        (8, "padded-draft-metadata", "unrouted")
    ]
    assert_idempotent(file, after, DraftMetadataRule)

    other = before.replace("init_forward_metadata(forward_batch)", "init_forward_metadata(fb)")
    with pytest.raises(RewriteError, match="eagle_worker.py:8: .*expected forward_batch"):
        rewrite(file, other, DraftMetadataRule)
    missing = before.replace("self.draft_attn_backend.init_forward_metadata", "self.other.init_forward_metadata")
    with pytest.raises(RewriteError, match="EAGLEWorker.draft: no .*init_forward_metadata"):
        rewrite(file, missing, DraftMetadataRule)


def test_v2_draft_extend_input_of_an_idle_batch_gets_the_index_pointers():
    from sglang_eagle_sizing.families.release_0_5_11.rules.idle_attention import IdleAttentionRule

    file = "speculative/eagle_info_v2.py"
    before = """
    class EagleDraftInputV2Mixin:
        def prepare_for_extend_to_fill_draft_kvcache(self, batch, predict):
            batch.spec_info = self
            batch.forward_mode = (
                ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
            )
            forward_batch = ForwardBatch.init_new(batch, draft_model_runner)
    """
    after, findings = rewrite(file, before, IdleAttentionRule)
    inserted = (
        "        if batch.forward_mode.is_idle():\n"
        "            # A padded idle batch (DP attention) re-initialises the attention metadata\n"
        "            # from these: no rows and no KV indices, as create_idle_input gives.\n"
        "            self.kv_indptr = torch.zeros((1,), dtype=torch.int32, device=predict.device)\n"
        "            self.kv_indices = torch.empty(\n"
        "                (0,), dtype=torch.int32, device=predict.device\n"
        "            )\n"
    )
    head, tail = textwrap.dedent(before).split("        forward_batch = ")
    assert after == head + inserted + "        forward_batch = " + tail
    assert [(f.line, f.label, f.status) for f in findings] == [(5, "idle-attention", "unrouted")]
    assert_idempotent(file, after, IdleAttentionRule)


DRAFTER_FC_BEFORE = """
class LlamaModel(nn.Module):
    def __init__(self, config):
        if hasattr(config, "target_hidden_size"):
            self.hidden_size_in = config.target_hidden_size
        else:
            self.hidden_size_in = config.hidden_size

        self.fc = torch.nn.Linear(
            self.hidden_size_in * 3,
            config.hidden_size,
            bias=getattr(config, "bias", False),
        )

    def forward(self, input_ids, positions, forward_batch):
        embeds = self.embed_tokens(input_ids)
        hidden_states = forward_batch.spec_info.hidden_states
        if hidden_states.shape[-1] != embeds.shape[-1]:
            hidden_states = self.fc(hidden_states)
        return hidden_states
"""


def test_drafter_fc_takes_the_declared_aux_layers_and_the_forward_decides_by_the_step():
    from sglang_eagle_sizing.families.release_0_5_11 import inserted
    from sglang_eagle_sizing.families.release_0_5_11.rules.drafter_fc import DrafterFcRule

    file = "models/llama_eagle3.py"
    after, findings = rewrite(file, DRAFTER_FC_BEFORE, DrafterFcRule)
    assert "self.hidden_size_in * get_eagle_num_aux_hidden_states(config)," in after
    assert "self.hidden_size_in * 3" not in after
    # the parser comes from spec_info (imported by the import rule), not from eagle_info
    assert "eagle_info" not in after
    assert "self.use_aux_hidden_state = parse_eagle_use_aux_hidden_state(" in after
    assert "        hidden_states = self.project_hidden_states(hidden_states, forward_batch)\n" in after
    assert "shape[-1] != embeds.shape[-1]" not in after
    assert "    def project_hidden_states(" in after
    # the method comes right after forward, as inserted.py has it
    method = textwrap.indent(inserted.DRAFTER_FC_METHOD.split("\n", 2)[2], "")
    assert method.strip() in after
    assert [(f.line, f.label, f.status) for f in findings] == [
        (9, "extend", "unrouted"),
        (18, "drafter-fc-forward", "unrouted"),
    ]
    assert [f.scope for f in findings] == ["LlamaModel.__init__", "LlamaModel.forward"]
    again, found = rewrite(file, after, DrafterFcRule)
    assert again == after and {f.status for f in found} == {Finding.ROUTED}


def test_drafter_fc_in_a_shape_the_rule_does_not_know_is_reported():
    from sglang_eagle_sizing.families.release_0_5_11.rules.drafter_fc import DrafterFcRule

    file = "models/llama_eagle3.py"
    width = DRAFTER_FC_BEFORE.replace("self.hidden_size_in * 3", "self.hidden_size_in * 4")
    findings = check_source(file, width, (DrafterFcRule,))
    assert [(f.scope, f.status) for f in findings if f.status == Finding.UNKNOWN] == [
        ("LlamaModel.__init__", Finding.UNKNOWN)
    ]
    applied = DRAFTER_FC_BEFORE.replace(
        "        if hidden_states.shape[-1] != embeds.shape[-1]:\n"
        "            hidden_states = self.fc(hidden_states)\n",
        "        hidden_states = self.fc(hidden_states)\n",
    )
    findings = check_source(file, applied, (DrafterFcRule,))
    assert [(f.scope, f.status) for f in findings if f.status == Finding.UNKNOWN] == [
        ("LlamaModel.forward", Finding.UNKNOWN)
    ]
    missing = DRAFTER_FC_BEFORE.replace("self.fc = torch.nn.Linear(", "self.proj = torch.nn.Linear(")
    with pytest.raises(RewriteError, match="llama_eagle3.py:3: .*no self.fc = torch.nn.Linear"):
        rewrite(file, missing, DrafterFcRule)


NORM_VARIANTS_BEFORE = """\
class LlamaDecoderLayer(LlamaDecoderLayer):
    def __init__(self, config, layer_id=0):
        self.hidden_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions, embeds, hidden_states, forward_batch, residual):
        residual = hidden_states
        hidden_states = self.hidden_norm(hidden_states)
        return hidden_states, residual


class LlamaModel(nn.Module):
    def __init__(self, config):
        self.fc = torch.nn.Linear(self.hidden_size_in * 3, config.hidden_size)

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.fc(forward_batch.spec_info.hidden_states)
        hidden_states_to_logits, hidden_states_to_aux = self.norm(hidden_states, residual)
        return hidden_states_to_logits, [hidden_states_to_aux]
"""


def test_norm_variants_are_read_from_the_config_where_the_model_computes_them():
    from sglang_eagle_sizing.families.release_0_5_11.rules.eagle3_norm_variants import (
        Eagle3NormVariantsRule,
    )

    file = "models/llama_eagle3.py"
    after, findings = rewrite(file, NORM_VARIANTS_BEFORE, Eagle3NormVariantsRule)
    assert [(f.scope, f.status) for f in findings] == [
        ("LlamaDecoderLayer.__init__", "unrouted"),
        ("LlamaDecoderLayer.forward", "unrouted"),
        ("LlamaModel.__init__", "unrouted"),
        ("LlamaModel.forward", "unrouted"),
    ]
    layer_forward = after[after.index("    def forward") : after.index("class LlamaModel")]
    assert (
        "        hidden_states = self.hidden_norm(hidden_states)\n"
        "        if self.norm_before_residual:\n"
        "            residual = hidden_states\n"
    ) in layer_forward
    assert "        # Whether the residual is the normed hidden states (norm_before_residual).\n" in after
    assert "        self.input_norm = None\n" in after and "self.fc_norm = nn.ModuleList(" in after
    # fc is applied through apply_fc, added after forward (no project_hidden_states here)
    assert "hidden_states = self.apply_fc(forward_batch.spec_info.hidden_states)" in after
    assert after.index("    def apply_fc(") > after.index("    def forward(self, input_ids")
    assert (
        "        if self.norm_output:\n"
        "            hidden_states_to_aux = hidden_states_to_logits\n"
        "        return hidden_states_to_logits"
    ) in after
    again, found = rewrite(file, after, Eagle3NormVariantsRule)
    assert again == after and {f.status for f in found} == {Finding.ROUTED}
    missing = NORM_VARIANTS_BEFORE.replace(
        "        hidden_states = self.hidden_norm(hidden_states)\n", ""
    )
    with pytest.raises(RewriteError, match="LlamaDecoderLayer.forward: not found"):
        rewrite(file, missing, Eagle3NormVariantsRule)


GET_CONFIG_BEFORE = """\
from typing import Optional

from transformers import AutoConfig, PretrainedConfig


def _set_architectures(config, arch_name):
    config.update({"architectures": [arch_name]})


@lru_cache_frozenset(maxsize=32)
def get_config(model: str, trust_remote_code: bool, revision: Optional[str] = None):
    if is_remote_url(model):
        model = pull(model)

    if is_mistral_model(model):
        config = load_mistral_config(model)
    else:
        try:
            config = AutoConfig.from_pretrained(
                model, trust_remote_code=trust_remote_code, revision=revision
            )
        except (ValueError, KeyError) as e:
            if "deepseek_v32" in str(e):
                config = load_deepseek_v32(model)
            elif isinstance(e, ValueError):
                raise
            else:
                config = read_registered(model)
    return config
"""

#: the handlers of 0.5.9 (a bare re-raise but for deepseek_v32) and 0.5.10 (a pair)
OLDER_HANDLERS = (
    """\
        except ValueError as e:
            if not "deepseek_v32" in str(e):
                raise e
            config = load_deepseek_v32(model)
""",
    """\
        except ValueError as e:
            if not "deepseek_v32" in str(e):
                raise e
            config = load_deepseek_v32(model)
        except KeyError as e:
            config = read_registered(model)
""",
)


def test_get_config_reads_the_speculators_format_where_autoconfig_reads_the_config():
    from sglang_eagle_sizing.families.release_0_5_11.rules.speculators_format import (
        SpeculatorsConfigRule,
    )

    file = "utils/hf_transformers/config.py"
    after, findings = rewrite(file, GET_CONFIG_BEFORE, SpeculatorsConfigRule)
    assert [(f.line, f.scope, f.status) for f in findings] == [(18, "get_config", "unrouted")]
    # the call in the try is renamed, its arguments and the release's except kept as they were
    handler = GET_CONFIG_BEFORE[
        GET_CONFIG_BEFORE.index("        except (ValueError") : GET_CONFIG_BEFORE.index("    return config")
    ]
    assert (
        "        try:\n"
        "            config = auto_config_or_speculators_eagle3(\n"
        "                model, trust_remote_code=trust_remote_code, revision=revision\n"
        "            )\n" + handler
    ) in after
    # nothing reads the config before AutoConfig does: the probe of every model is gone
    body = after[after.index("def get_config(") :]
    assert "get_config_dict" not in body and "speculators" not in body.replace(
        "auto_config_or_speculators_eagle3(", ""
    )
    assert "def is_speculators_eagle3_model(" not in after
    # the functions stand right before get_config's decorator, two blank lines around them
    functions = after.index("def is_speculators_eagle3_config(")
    assert after.index("def _set_architectures(") < functions < after.index("@lru_cache_frozenset")
    assert functions < after.index("def auto_config_or_speculators_eagle3(") < after.index(
        "@lru_cache_frozenset"
    )
    assert "\n\n\n@lru_cache_frozenset" in after
    again, found = rewrite(file, after, SpeculatorsConfigRule)
    assert again == after and {f.status for f in found} == {Finding.ROUTED}
    # 0.5.9's and 0.5.10's handlers: the same rename, the handlers untouched
    for older in OLDER_HANDLERS:
        source = GET_CONFIG_BEFORE.replace(handler, older)
        renamed, found = rewrite(file, source, SpeculatorsConfigRule)
        assert {f.status for f in found} == {Finding.UNROUTED}
        assert "            config = auto_config_or_speculators_eagle3(\n" in renamed
        assert renamed.endswith(older + "    return config\n")


def test_get_config_in_another_shape_is_reported_not_skipped():
    from sglang_eagle_sizing.families.release_0_5_11.rules.speculators_format import (
        SpeculatorsConfigRule,
    )

    file = "utils/hf_transformers/config.py"
    read = (
        "            config = AutoConfig.from_pretrained(\n"
        "                model, trust_remote_code=trust_remote_code, revision=revision\n"
        "            )\n"
    )
    unknown = {
        "more than the read in the try": GET_CONFIG_BEFORE.replace(
            read, read + "            config.checked = True\n"
        ),
        "no try": GET_CONFIG_BEFORE.replace(
            "        config = load_mistral_config(model)\n",
            "        config = AutoConfig.from_pretrained(model)\n",
        ),
        "read into another name": GET_CONFIG_BEFORE.replace(
            "            config = AutoConfig", "            hf_config = AutoConfig"
        ),
    }
    for shape, source in unknown.items():
        after, findings = rewrite(file, source, SpeculatorsConfigRule)
        assert after == textwrap.dedent(source), shape
        assert Finding.UNKNOWN in {f.status for f in findings}, shape
    without = GET_CONFIG_BEFORE.replace("AutoConfig.from_pretrained", "read_config")
    with pytest.raises(RewriteError, match="get_config: no AutoConfig.from_pretrained"):
        rewrite(file, without, SpeculatorsConfigRule)


def _speculators_read(auto_config):
    """The inserted functions, with ``AutoConfig.from_pretrained`` as given and a
    ``PretrainedConfig.get_config_dict`` that counts its reads of a speculators drafter."""
    import types

    from sglang_eagle_sizing.families.release_0_5_11 import inserted

    reads = []
    drafter = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_config": {"algorithm": "eagle3"},
        "transformer_layer_config": {"model_type": "llama", "hidden_size": 64},
        "eagle_aux_hidden_state_layer_ids": [1, 3, 5],
    }

    def get_config_dict(model, **kwargs):
        reads.append((model, kwargs))
        if "unreadable" in model:
            raise OSError("no config.json")
        return (dict(drafter) if "drafter" in model else {"model_type": "other"}), {}

    scope = {
        "AutoConfig": types.SimpleNamespace(from_pretrained=auto_config),
        "PretrainedConfig": types.SimpleNamespace(get_config_dict=get_config_dict),
    }
    exec(inserted.SPECULATORS_CONFIG_FUNCTIONS, scope)  # noqa: S102
    return scope[inserted.SPECULATORS_CONFIG_READ], reads


def test_the_speculators_read_reads_a_config_again_only_when_autoconfig_refuses_it():
    import types

    refused = ValueError("Unrecognized model")

    def auto_config(model, **kwargs):
        if model.startswith("refused"):
            raise refused
        if model.startswith("by-path"):  # transformers 4: a class named in the path
            return types.SimpleNamespace(speculators_config={"algorithm": "eagle3"})
        return types.SimpleNamespace(architectures=["LlamaForCausalLM"])

    read, reads = _speculators_read(auto_config)
    # a config AutoConfig reads is returned as it is, not read again
    assert read("target", revision="r").architectures == ["LlamaForCausalLM"] and not reads
    # a refused config that is not the format: the same error, after one read
    with pytest.raises(ValueError) as raised:
        read("refused-target", trust_remote_code=True, revision="r")
    assert raised.value is refused
    assert reads == [("refused-target", {"revision": "r"})]
    # the second read failing too: still AutoConfig's error
    with pytest.raises(ValueError) as raised:
        read("refused-unreadable")
    assert raised.value is refused
    reads.clear()
    # the format, refused (transformers 5) or read as another class (4): converted
    for model in ("refused-drafter", "by-path-drafter"):
        config = read(model, revision="r")
        assert config.architectures == ["LlamaForCausalLMEagle3"], model
        # kept as declared: top-level ids are hidden-state indices, as the format's are
        assert config.eagle_aux_hidden_state_layer_ids == [1, 3, 5]
        assert config._name_or_path == model
    assert len(reads) == 2  # one read each
    # read as another class by path, and the file has a model_type: AutoConfig's config
    # (a leftover speculators_config block is not the format)
    by_path = read("by-path-target")
    assert by_path.speculators_config == {"algorithm": "eagle3"}
    assert not hasattr(by_path, "architectures")


LOAD_WEIGHTS_BEFORE = """\
class LlamaForCausalLMEagle3(LlamaForCausalLM):
    def load_weights(self, weights):
        params_dict = dict(self.named_parameters())
        for name, loaded_weight in weights:
            if "d2t" in name:
                continue
"""


def test_load_weights_reads_the_speculators_layer_names():
    from sglang_eagle_sizing.families.release_0_5_11.rules.speculators_format import (
        SpeculatorsWeightNamesRule,
    )

    file = "models/llama_eagle3.py"
    after, findings = rewrite(file, LOAD_WEIGHTS_BEFORE, SpeculatorsWeightNamesRule)
    assert [(f.line, f.status) for f in findings] == [(4, "unrouted")]
    assert (
        "        for name, loaded_weight in weights:\n"
        "            # The speculators format names the decoder layer layers.0.\n"
        '            if name.startswith("layers.0."):\n'
        '                name = "midlayer." + name[len("layers.0.") :]\n'
        '            if "d2t" in name:\n'
    ) in after
    again, found = rewrite(file, after, SpeculatorsWeightNamesRule)
    assert again == after and {f.status for f in found} == {Finding.ROUTED}


def test_the_parser_goes_right_after_speculative_algorithm_in_spec_info():
    from sglang_eagle_sizing.families.release_0_5_11.rules.parser import ParserRule, names

    file = "speculative/spec_info.py"
    before = """
    from enum import Enum, auto


    class SpeculativeAlgorithm(Enum):
        EAGLE3 = auto()


    class SpecInput:
        pass
    """
    after, findings = rewrite(file, before, ParserRule)
    algorithm, parser, spec_input = (
        after.index("class SpeculativeAlgorithm"),
        after.index("def parse_eagle_use_aux_hidden_state("),
        after.index("class SpecInput"),
    )
    assert algorithm < after.index("def invalid_eagle_draft_config(") < parser < spec_input
    assert all(f"\ndef {name}(" in after for name in names())
    assert [(f.label, f.status) for f in findings] == [("parser", Finding.UNROUTED)]
    assert_idempotent(file, after, ParserRule)
    # another module: reported as unknown, left as it is
    other = "class SpecInput:\n    pass\n"
    again, findings = rewrite(file, other, ParserRule)
    assert again == other
    assert [(f.label, f.status) for f in findings] == [("parser", Finding.UNKNOWN)]
