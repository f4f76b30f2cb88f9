"""Test cases whose tests more than one file of this folder holds: their set-up and
checks, each file adding its own tests."""

import contextlib
from types import SimpleNamespace
from typing import Optional
from unittest import mock

import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers import scheduler as scheduler_module
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    validate_eagle_draft_config,
)
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner import (
    MultiLayerEagleDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.speculative.eagle_hidden_sizing.attention_dp import (
    attention_dp_rank,
    draft_runner_of,
)
from sglang.test.speculative.eagle_hidden_sizing.common import (
    V1_WORKERS,
    ConfigFolders,
    WorkerTestCase,
    assert_refusal,
    eagle3,
    expected_sizes,
    llama,
)
from sglang.test.test_utils import CustomTestCase


class QueuesReached(Exception):
    """Raised where init_disaggregation builds its transfer queues (network set-up)."""


class PDMetadataBuffersTestCase(WorkerTestCase):
    """The hidden-state slot of the PD metadata buffers, built by the real
    ``Scheduler.init_disaggregation`` (``TestPDMetadataBuffers`` of test_routing.py and
    test_pd_standalone.py)."""

    def metadata_buffers(self, worker, target_worker, server_args, mode: str, v2: bool):
        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = server_args
        server_args.disaggregation_mode = mode
        server_args.disaggregation_transfer_backend = "fake"
        scheduler.spec_algorithm = SpeculativeAlgorithm.from_string(
            server_args.speculative_algorithm
        )
        scheduler.enable_overlap = v2
        scheduler.draft_worker = worker
        scheduler.tp_worker = target_worker
        scheduler.model_config = target_worker.model_config
        scheduler.req_to_token_pool = target_worker.req_to_token_pool
        scheduler.max_running_requests = 8
        scheduler.token_to_kv_pool_allocator = SimpleNamespace(
            get_kvcache=lambda: SimpleNamespace(maybe_get_custom_mem_pool=lambda: None)
        )
        for name in (
            "attn_tp_cpu_group",
            "tree_cache",
            "gpu_id",
            "max_total_num_tokens",
        ):
            setattr(scheduler, name, None)
        scheduler.tp_rank = scheduler.pp_rank = 0
        scheduler.tp_size = scheduler.pp_size = 1

        def stop(*args, **kwargs):
            raise QueuesReached

        with (
            mock.patch.object(scheduler_module, "DecodeTransferQueue", stop),
            mock.patch.object(scheduler_module, "PrefillBootstrapQueue", stop),
        ):
            with self.assertRaises(QueuesReached):
                scheduler.init_disaggregation()
        buffers = scheduler.disagg_metadata_buffers
        pointers, _, item_lens = buffers.get_buf_infos()
        hidden = buffers.output_hidden_states
        return item_lens[pointers.index(hidden.data_ptr())], hidden.dtype

    def check(self, cls, algorithm: str, draft: dict):
        worker = self.start(cls, algorithm, draft)
        v2 = cls not in V1_WORKERS
        target_worker = worker.target_worker
        server_args = worker.server_args
        width, dtype = expected_sizes(algorithm, draft, llama())["decode"]
        item = width * torch.empty(0, dtype=dtype).element_size()
        for mode in ("prefill", "decode"):
            with self.subTest(server=mode):
                self.assertEqual(
                    self.metadata_buffers(worker, target_worker, server_args, mode, v2),
                    (item, dtype),
                )


class AttentionBackendStandIn:
    """A draft attention backend as the CUDA-graph runners read it before capture."""

    def __init__(self):
        self.attn_backends = [self]  # a multi-step backend's per-step backends

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        pass

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1


class CudaGraphBuffersTestCase(WorkerTestCase):
    """Workers whose draft CUDA-graph runners are built with graphs on, the capture
    replaced (``TestCudaGraphBuffers`` of test_routing.py, test_extend_width.py and
    test_multi_layer_width.py)."""

    def setUp(self):
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        for runner_class in (
            EAGLEDraftCudaGraphRunner,
            EAGLEDraftExtendCudaGraphRunner,
            MultiLayerEagleDraftExtendCudaGraphRunner,
        ):
            stack.enter_context(
                mock.patch.object(runner_class, "capture", lambda self: None)
            )
        stack.enter_context(attention_dp_rank(rank=0, size=1))

    def start_with_graphs(self, cls, draft: dict):
        """A worker started without graphs; its runners then take graph sizes."""
        worker = self.start(cls, "EAGLE3", draft)
        worker.server_args.disable_cuda_graph = False
        worker.server_args.cuda_graph_bs = [1, 2, 4]
        draft_worker = worker if cls is EAGLEWorker else worker.draft_worker
        runners = getattr(draft_worker, "draft_runner_list", None) or [
            draft_runner_of(draft_worker)
        ]
        for runner in runners:
            runner.tp_size = runner.dp_size = 1
            runner.req_to_token_pool = worker.target_worker.req_to_token_pool
            runner.attn_backend = AttentionBackendStandIn()
        return draft_worker

    def assert_buffer(self, buffers, width: int, dtype: torch.dtype):
        hidden_states = buffers.hidden_states
        self.assertEqual((hidden_states.shape[-1], hidden_states.dtype), (width, dtype))


class HiddenSizeContractTestCase(WorkerTestCase):
    """The classmethods' widths and dtypes on every real worker kind, against the
    config facts (``TestHiddenSizeContract`` of test_extend_width.py and
    test_speculators_format.py)."""

    def workers_for(self, algorithm: str, draft: dict, target: dict):
        """(name, object a site hands the classmethods) for every worker kind."""
        v1 = self.start(EAGLEWorker, algorithm, draft, target)
        v2 = self.start(EAGLEWorkerV2, algorithm, draft, target)
        ml_v2 = self.start(MultiLayerEagleWorkerV2, algorithm, draft, target)
        found = [
            ("EAGLEWorker", v1),
            ("EagleDraftWorker", v2.draft_worker),
            ("MultiLayerEagleDraftWorker", ml_v2.draft_worker),
        ]
        if algorithm == "EAGLE":  # 0.5.11's MultiLayerEagleWorker serves MTP only
            found.append(
                (
                    "MultiLayerEagleWorker",
                    self.start(MultiLayerEagleWorker, algorithm, draft, target),
                )
            )
        return found

    def assert_contract(self, worker, expected: dict):
        """Both phases' (width, dtype) for ``worker``, as the contract's classmethods give them."""
        for phase, input_class in (
            ("decode", EagleDraftInput),
            ("extend", EagleDraftExtendInput),
        ):
            self.assertEqual(
                (input_class.hidden_size_for(worker), input_class.dtype_for(worker)),
                expected[phase],
                phase,
            )

    def check(self, algorithm: str, draft: dict, target: dict):
        expected = expected_sizes(algorithm, draft, target)
        for name, worker in self.workers_for(algorithm, draft, target):
            with self.subTest(worker=name):
                self.assert_contract(worker, expected)


class StartupValidationTestCase(CustomTestCase):
    """Drafter configs and the check of a ``validate_eagle_draft_config`` refusal
    (``TestStartupValidation`` of test_validation.py and test_drafter_fc.py)."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolders()
        cls.target = cls.folder.model_config(llama())
        cls.wide_target = cls.folder.model_config(llama(hidden_size=512))

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def draft(self, base: Optional[dict] = None, **changes) -> ModelConfig:
        config = dict(base or eagle3(), **changes)
        return self.folder.model_config(config, is_draft_model=True)

    def assert_refused(self, draft, target, key: str, value, names_target=True):
        """``names_target``: a check against the target names its config too; the
        parser's refusals of a malformed declaration name the drafter's alone."""
        with self.assertRaises(ValueError) as raised:
            validate_eagle_draft_config(SpeculativeAlgorithm.EAGLE3, draft, target)
        message = assert_refusal(self, raised.exception, key, value, draft.model_path)
        self.assertEqual(target.model_path in message, names_target)
        return message


class EagleConfigParserTestCase(CustomTestCase):
    """A drafter's hf_config and the check of a parser refusal
    (``TestEagleConfigParser`` of test_parser_flag.py and test_parser_layer_ids.py)."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolders()
        cls.eagle3 = SpeculativeAlgorithm.EAGLE3

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def hf_config(self, **changes):
        """An EAGLE-3 drafter's hf_config with these keys set (None: JSON null)."""
        config = dict(eagle3(), **changes)
        return self.folder.model_config(config, is_draft_model=True).hf_config

    def assert_refused(self, call, key: str, value, hf_config):
        with self.assertRaises(ValueError) as raised:
            call()
        return assert_refusal(
            self, raised.exception, key, value, hf_config.name_or_path
        )
