"""Unit tests for the EAGLE hidden-state sizing contract in srt/speculative/eagle_info.py.

``EagleDraftInput.hidden_size_for/dtype_for`` (decode phase) and
``EagleDraftExtendInput.hidden_size_for/dtype_for`` (extend phase) size every idle input,
CUDA-graph buffer and PD metadata buffer of EAGLE, EAGLE-3, MTP and STANDALONE. No server,
no weights, no GPU: the model configs are real ``ModelConfig``s built from config.json files
written to a temporary folder, with the shapes of public drafters and their targets; the
workers are stand-ins holding the attributes of the patched workers that sizing reads.

The last class reads the speculative modules and the scheduler with ``ast``: every sizing
site must go through the classmethods, so a merge that brings back an inline width fails
here, naming the file and line.
"""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import ast
import json
import logging
import os
import tempfile
import unittest
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import torch

import sglang
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    get_eagle_aux_hidden_state_layer_ids,
    get_eagle_num_aux_hidden_states,
    parse_eagle_use_aux_hidden_state,
    validate_eagle_draft_config,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.test_utils import CustomTestCase

# ---------------------------------------------------------------------------
# Config shapes (facts from the public config.json files; only what sizing reads
# and what ModelConfig needs to load them).
# ---------------------------------------------------------------------------

# meta-llama/Llama-3.1-8B-Instruct
LLAMA_3_1_8B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "torch_dtype": "bfloat16",
}

# SpecForge's EAGLE-3 drafter for Llama-3.1-8B-Instruct: no eagle_config (the target
# captures its 3 default layers), and float16 while the target is bfloat16.
EAGLE3_LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
}

# TensorRT-LLM's 2-layer EAGLE-3 test drafter for Llama-3.1-8B: aux hidden states off.
EAGLE3_LLAMA_3_1_8B_NO_AUX = dict(
    EAGLE3_LLAMA_3_1_8B,
    num_hidden_layers=2,
    torch_dtype="bfloat16",
    eagle_config={"use_aux_hidden_state": False},
)

# meta-llama/Llama-3.2-1B-Instruct: a STANDALONE drafter half as wide as Llama-3.1-8B.
LLAMA_3_2_1B_INSTRUCT = dict(
    LLAMA_3_1_8B_INSTRUCT,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    tie_word_embeddings=True,
)

# Qwen/Qwen3-30B-A3B and SpecForge's MoE EAGLE-3 drafter for it, which names the target
# layers it was trained on.
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
EAGLE3_QWEN3_30B_A3B = dict(
    QWEN3_30B_A3B,
    architectures=["Qwen3MoEForCausalLMEagle3"],
    num_hidden_layers=1,
    draft_vocab_size=32000,
    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44]},
)

# The same drafter with its layer ids at the top level of its config, where some drafters
# declare them.
EAGLE3_QWEN3_30B_A3B_TOP_LEVEL_IDS = dict(
    EAGLE3_QWEN3_30B_A3B,
    eagle_config=None,
    eagle_aux_hidden_state_layer_ids=[1, 23, 44],
)

# A 5120-wide target (Qwen/Qwen3-14B) and an EAGLE-3 drafter narrower than it (4096) that
# declares target_hidden_size, the key llama_eagle3.py reads for its fc input width.
QWEN3_14B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
EAGLE3_NARROW_FOR_QWEN3_14B = dict(
    EAGLE3_LLAMA_3_1_8B,
    vocab_size=151936,
    target_hidden_size=5120,
    torch_dtype="bfloat16",
)

# meta-llama/Llama-2-70b-chat-hf and SGLang's EAGLE (EAGLE-2) drafter for it.
LLAMA_2_70B_CHAT = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}
EAGLE_LLAMA_2_70B_CHAT = dict(
    LLAMA_2_70B_CHAT, architectures=["LlamaForCausalLMEagle"], num_hidden_layers=1
)

# deepseek-ai/DeepSeek-R1 and its NextN (MTP) layer, served as EAGLE.
DEEPSEEK_R1 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_R1_NEXTN = dict(
    DEEPSEEK_R1, architectures=["DeepseekV3ForCausalLMNextN"], num_hidden_layers=1
)
# The same MTP pair with hc_mult=4, which ModelConfig reads for hyper-connection models:
# their hidden state is spec_hidden_size = 4 * hidden_size wide.
DEEPSEEK_HC = dict(DEEPSEEK_R1, hc_mult=4)
DEEPSEEK_HC_NEXTN = dict(DEEPSEEK_R1_NEXTN, hc_mult=4)

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
DEFAULT_NUM_AUX_HIDDEN_STATES = 3  # the target's default capture: 3 layers


def hidden_state_width(config: dict) -> int:
    """The width of a model's hidden state: hidden_size, times hc_mult when it has one."""
    return config["hidden_size"] * config.get("hc_mult", 1)


def expected_sizes(algorithm: str, draft: dict, target: dict) -> Dict[str, object]:
    """Decode and extend width and dtype, from the config facts alone.

    Decode: the drafter's own hidden state. Extend: what the target emits for the
    draft-extend forward (EAGLE-3 with aux: the concatenation of its captured layers;
    STANDALONE: the drafter does not read the target, its own width).
    """
    eagle_config = draft.get("eagle_config") or {}
    dtype = TORCH_DTYPES[draft["torch_dtype"]]
    if algorithm == "EAGLE3" and eagle_config.get("use_aux_hidden_state", True):
        layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids") or draft.get(
            "eagle_aux_hidden_state_layer_ids"
        )
        num_aux = len(layer_ids) if layer_ids else DEFAULT_NUM_AUX_HIDDEN_STATES
        extend_width = num_aux * target["hidden_size"]
    elif algorithm == "STANDALONE":
        extend_width = hidden_state_width(draft)
    else:
        extend_width = hidden_state_width(target)
    return {
        "decode_width": hidden_state_width(draft),
        "decode_dtype": dtype,
        "extend_width": extend_width,
        "extend_dtype": dtype,
    }


# (name, algorithm, draft config, target config)
CASES: List[Tuple[str, str, dict, dict]] = [
    (
        "EAGLE-3 Llama-3.1-8B, fp16 draft on a bf16 target",
        "EAGLE3",
        EAGLE3_LLAMA_3_1_8B,
        LLAMA_3_1_8B_INSTRUCT,
    ),
    (
        "EAGLE-3 Llama-3.1-8B without aux hidden states",
        "EAGLE3",
        EAGLE3_LLAMA_3_1_8B_NO_AUX,
        LLAMA_3_1_8B_INSTRUCT,
    ),
    (
        "EAGLE-3 Qwen3-30B-A3B, aux layer ids [1, 23, 44]",
        "EAGLE3",
        EAGLE3_QWEN3_30B_A3B,
        QWEN3_30B_A3B,
    ),
    (
        "EAGLE-3 Qwen3-30B-A3B, two aux layer ids",
        "EAGLE3",
        dict(
            EAGLE3_QWEN3_30B_A3B,
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 44]},
        ),
        QWEN3_30B_A3B,
    ),
    (
        "EAGLE-3 Qwen3-30B-A3B, four aux layer ids",
        "EAGLE3",
        dict(
            EAGLE3_QWEN3_30B_A3B,
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 12, 23, 44]},
        ),
        QWEN3_30B_A3B,
    ),
    (
        "EAGLE-3 Qwen3-30B-A3B, layer ids [1, 23, 44] at the top level",
        "EAGLE3",
        EAGLE3_QWEN3_30B_A3B_TOP_LEVEL_IDS,
        QWEN3_30B_A3B,
    ),
    (
        "EAGLE-3 Qwen3-30B-A3B, two layer ids at the top level",
        "EAGLE3",
        dict(
            EAGLE3_QWEN3_30B_A3B_TOP_LEVEL_IDS, eagle_aux_hidden_state_layer_ids=[1, 44]
        ),
        QWEN3_30B_A3B,
    ),
    (
        "EAGLE-3 4096-wide drafter for a 5120-wide target",
        "EAGLE3",
        EAGLE3_NARROW_FOR_QWEN3_14B,
        QWEN3_14B,
    ),
    (
        "EAGLE Llama-2-70B chat",
        "EAGLE",
        EAGLE_LLAMA_2_70B_CHAT,
        LLAMA_2_70B_CHAT,
    ),
    ("MTP DeepSeek-R1 NextN", "EAGLE", DEEPSEEK_R1_NEXTN, DEEPSEEK_R1),
    ("MTP with hc_mult=4", "EAGLE", DEEPSEEK_HC_NEXTN, DEEPSEEK_HC),
    (
        "STANDALONE Llama-3.2-1B for Llama-3.1-8B",
        "STANDALONE",
        LLAMA_3_2_1B_INSTRUCT,
        LLAMA_3_1_8B_INSTRUCT,
    ),
]


class ConfigFolder:
    """Writes config dicts as ``<folder>/config.json`` under one temporary folder."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="eagle-hidden-sizing-")
        self._count = 0

    def write(self, config: dict, name: str = "model") -> str:
        self._count += 1
        folder = os.path.join(self._tmp.name, f"{self._count:03d}-{name}")
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump({}, f)
        return folder

    def model_config(
        self, config: dict, name: str = "model", is_draft_model: bool = False
    ) -> ModelConfig:
        return ModelConfig(self.write(config, name), is_draft_model=is_draft_model)

    def cleanup(self):
        self._tmp.cleanup()


# ---------------------------------------------------------------------------
# Stand-ins for the objects the sizing sites hand the classmethods. They hold what
# the patched workers hold; start_up() sets what the patched __init__ sets, by
# calling the same functions.
# ---------------------------------------------------------------------------


class FakeModelRunner:
    def __init__(self, model_config: ModelConfig):
        self.model_config = model_config
        self.dtype = model_config.dtype


class FakeTpModelWorker:
    """A TpModelWorker: ``model_runner`` is a property over its first runner."""

    def __init__(self, model_config: ModelConfig, num_runners: int = 1):
        self.model_config = model_config
        self.model_runner_list = [
            FakeModelRunner(model_config) for _ in range(num_runners)
        ]
        self._model_runner = self.model_runner_list[0]

    @property
    def model_runner(self) -> FakeModelRunner:
        return self._model_runner


class FakeV1Worker(FakeTpModelWorker):
    """EAGLEWorker, MultiLayerEagleWorker, StandaloneWorker: the worker *is* the draft
    TpModelWorker, and holds the target worker."""

    def __init__(self, algorithm, draft_config, target_worker, num_runners=1):
        super().__init__(draft_config, num_runners)
        self.speculative_algorithm = algorithm
        self.target_worker = target_worker

    @property
    def draft_model_runner(self) -> FakeModelRunner:
        return self.model_runner


class FakeV2DraftWorker:
    """EagleDraftWorker, StandaloneDraftWorker, MultiLayerEagleDraftWorker: hold the
    draft TpModelWorker and its runner(s). The multi-layer one keeps the target's
    ``model_config`` and exposes its first step's runner as ``draft_runner``."""

    def __init__(self, algorithm, draft_config, target_worker, num_runners=1):
        self.speculative_algorithm = algorithm
        self.target_worker = target_worker
        self.draft_worker = FakeTpModelWorker(draft_config, num_runners)
        if num_runners > 1:
            self.model_config = target_worker.model_config
            self.draft_runner_list = self.draft_worker.model_runner_list
            self.draft_runner = self.draft_runner_list[0]
        else:
            self.draft_runner = self.draft_worker.model_runner


class FakeV2Worker:
    """EAGLEWorkerV2, MultiLayerEagleWorkerV2, StandaloneWorkerV2: the scheduler's
    ``draft_worker`` under the overlap schedule; holds the draft worker."""

    def __init__(self, algorithm, draft_worker, target_worker):
        self.speculative_algorithm = algorithm
        self._draft_worker = draft_worker
        self._target_worker = target_worker

    @property
    def draft_worker(self) -> FakeV2DraftWorker:
        return self._draft_worker

    @property
    def target_worker(self) -> FakeTpModelWorker:
        return self._target_worker


class FakeGraphRunner:
    """EAGLEDraftCudaGraphRunner and the draft-extend runners: they size their buffers
    with ``self.eagle_worker`` (a v1 worker or a v2 draft worker)."""

    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        if hasattr(eagle_worker, "model_runner"):
            self.model_runner = eagle_worker.model_runner
        else:
            self.model_runner = eagle_worker.draft_runner


def start_up(worker, draft_model_config: ModelConfig, target_model_config: ModelConfig):
    """What the __init__ of every patched EAGLE worker does with its drafter's config,
    before it builds the draft model."""
    validate_eagle_draft_config(
        worker.speculative_algorithm, draft_model_config, target_model_config
    )
    worker.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
        worker.speculative_algorithm, draft_model_config.hf_config
    )
    worker.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states(
        draft_model_config.hf_config
    )


#: Worker kinds: (name, multi-layer, v2). STANDALONE has no multi-layer worker.
WORKER_KINDS = [
    ("v1", False, False),
    ("v1 multi-layer", True, False),
    ("v2 draft worker", False, True),
    ("v2 multi-layer draft worker", True, True),
]
MTP_STEPS = 3


def make_worker(
    kind: str, algorithm: str, draft_config: ModelConfig, target_config: ModelConfig
):
    """The worker of ``kind`` for this drafter and target, started as the patched
    workers start (STANDALONE workers parse no aux flag)."""
    multi_layer, v2 = next((m, v) for k, m, v in WORKER_KINDS if k == kind)
    algorithm = SpeculativeAlgorithm.from_string(algorithm)
    target_worker = FakeTpModelWorker(target_config)
    num_runners = MTP_STEPS if multi_layer else 1
    cls = FakeV2DraftWorker if v2 else FakeV1Worker
    worker = cls(algorithm, draft_config, target_worker, num_runners)
    if not algorithm.is_standalone():
        start_up(worker, draft_config, target_config)
    return worker


def worker_kinds(algorithm: str) -> List[str]:
    if algorithm == "STANDALONE":
        return [k for k, multi_layer, _ in WORKER_KINDS if not multi_layer]
    return [k for k, _, _ in WORKER_KINDS]


class TestHiddenSizeContract(CustomTestCase):
    """Width and dtype of both phases for every object a sizing site hands them."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolder()
        cls.configs = {}
        for name, algorithm, draft, target in CASES:
            cls.configs[name] = (
                cls.folder.model_config(draft, "draft", is_draft_model=True),
                cls.folder.model_config(target, "target"),
            )

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def assert_sizes(self, worker, expected, phases=("decode", "extend")):
        got = {}
        if "decode" in phases:
            got["decode_width"] = EagleDraftInput.hidden_size_for(worker)
            got["decode_dtype"] = EagleDraftInput.dtype_for(worker)
        if "extend" in phases:
            got["extend_width"] = EagleDraftExtendInput.hidden_size_for(worker)
            got["extend_dtype"] = EagleDraftExtendInput.dtype_for(worker)
        self.assertEqual(got, {k: v for k, v in expected.items() if k in got})

    def test_every_worker_kind(self):
        for name, algorithm, draft, target in CASES:
            expected = expected_sizes(algorithm, draft, target)
            for kind in worker_kinds(algorithm):
                with self.subTest(case=name, worker=kind):
                    worker = make_worker(kind, algorithm, *self.configs[name])
                    self.assert_sizes(worker, expected)

    def test_graph_runner_eagle_worker(self):
        for name, algorithm, draft, target in CASES:
            expected = expected_sizes(algorithm, draft, target)
            for kind in worker_kinds(algorithm):
                with self.subTest(case=name, worker=kind):
                    worker = make_worker(kind, algorithm, *self.configs[name])
                    runner = FakeGraphRunner(worker)
                    self.assert_sizes(runner.eagle_worker, expected)

    def test_v2_worker_decode_phase(self):
        """The PD metadata buffers get the scheduler's draft_worker: under the overlap
        schedule, the v2 worker that holds the draft worker."""
        for name, algorithm, draft, target in CASES:
            expected = expected_sizes(algorithm, draft, target)
            for kind in worker_kinds(algorithm):
                if not kind.startswith("v2"):
                    continue
                with self.subTest(case=name, worker=kind):
                    draft_worker = make_worker(kind, algorithm, *self.configs[name])
                    worker = FakeV2Worker(
                        draft_worker.speculative_algorithm,
                        draft_worker,
                        draft_worker.target_worker,
                    )
                    self.assert_sizes(worker, expected, phases=("decode",))

    def test_draft_and_target_differ(self):
        """The cases that tell the draft's width and dtype from the target's."""
        draft, target = self.configs[
            "EAGLE-3 Llama-3.1-8B, fp16 draft on a bf16 target"
        ]
        self.assertNotEqual(draft.dtype, target.dtype)
        worker = make_worker("v2 draft worker", "EAGLE3", draft, target)
        self.assertEqual(EagleDraftInput.dtype_for(worker), torch.float16)
        self.assertEqual(EagleDraftExtendInput.dtype_for(worker), torch.float16)

        draft, target = self.configs["STANDALONE Llama-3.2-1B for Llama-3.1-8B"]
        worker = make_worker("v1", "STANDALONE", draft, target)
        self.assertEqual(EagleDraftInput.hidden_size_for(worker), 2048)
        self.assertEqual(EagleDraftExtendInput.hidden_size_for(worker), 2048)

        draft, target = self.configs["EAGLE-3 4096-wide drafter for a 5120-wide target"]
        worker = make_worker("v1", "EAGLE3", draft, target)
        self.assertEqual(EagleDraftInput.hidden_size_for(worker), 4096)
        self.assertEqual(EagleDraftExtendInput.hidden_size_for(worker), 3 * 5120)

    def test_idle_inputs_take_the_contract_sizes(self):
        name = "EAGLE-3 Llama-3.1-8B, fp16 draft on a bf16 target"
        worker = make_worker("v1", "EAGLE3", *self.configs[name])
        for input_class in (EagleDraftInput, EagleDraftExtendInput):
            with self.subTest(input_class=input_class.__name__):
                idle = input_class.create_idle_input(
                    device="cpu",
                    hidden_size=input_class.hidden_size_for(worker),
                    dtype=input_class.dtype_for(worker),
                    topk=1,
                    capture_hidden_mode=CaptureHiddenMode.LAST,
                )
                self.assertIs(type(idle), input_class)
                width = {EagleDraftInput: 4096, EagleDraftExtendInput: 3 * 4096}
                self.assertEqual(
                    tuple(idle.hidden_states.shape), (0, width[input_class])
                )
                self.assertEqual(idle.hidden_states.dtype, torch.float16)


class TestEagleConfigParser(CustomTestCase):
    """The one parser of the drafter's aux hidden-state flag and layer ids."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolder()
        cls.eagle3 = SpeculativeAlgorithm.EAGLE3

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def hf_config(self, **changes):
        """The hf_config of the Llama-3.1-8B EAGLE-3 drafter with these keys set (a
        value of None: the key is written as JSON null)."""
        config = dict(EAGLE3_LLAMA_3_1_8B, **changes)
        model_config = self.folder.model_config(config, "draft", is_draft_model=True)
        return model_config.hf_config

    def assert_refused(self, call, key: str, value, hf_config):
        with self.assertRaises(ValueError) as raised:
            call()
        message = str(raised.exception)
        self.assertIn(f"Invalid {key}={value!r} in the draft model config", message)
        self.assertIn(hf_config.name_or_path, message)
        self.assertIn(": expected ", message)
        self.assertNotIn("\n", message)
        return message

    def test_flag_accepted_forms(self):
        cases = [
            ("no eagle_config", {}, True),
            ("eagle_config null", {"eagle_config": None}, True),
            ("empty eagle_config", {"eagle_config": {}}, True),
            ("flag true", {"eagle_config": {"use_aux_hidden_state": True}}, True),
            ("flag false", {"eagle_config": {"use_aux_hidden_state": False}}, False),
            (
                "layer ids only",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
                True,
            ),
        ]
        for name, changes, expected in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertIs(
                    parse_eagle_use_aux_hidden_state(self.eagle3, hf_config), expected
                )

    def test_flag_from_an_eagle_config_object(self):
        hf_config = self.hf_config()
        for flag in (True, False):
            with self.subTest(use_aux_hidden_state=flag):
                hf_config.eagle_config = SimpleNamespace(use_aux_hidden_state=flag)
                self.assertIs(
                    parse_eagle_use_aux_hidden_state(self.eagle3, hf_config), flag
                )

    def test_flag_is_false_unless_eagle3(self):
        """EAGLE, MTP and STANDALONE drafters have no aux hidden states; their
        eagle_config is not read at all."""
        for changes in (
            {},
            {"eagle_config": {"use_aux_hidden_state": True}},
            {"eagle_config": "x"},
        ):
            hf_config = self.hf_config(**changes)
            for algorithm in (
                SpeculativeAlgorithm.EAGLE,
                SpeculativeAlgorithm.STANDALONE,
            ):
                with self.subTest(algorithm=algorithm.name, changes=changes):
                    self.assertIs(
                        parse_eagle_use_aux_hidden_state(algorithm, hf_config), False
                    )

    def test_flag_refused_forms(self):
        cases = [
            ("eagle_config", "aux", {"eagle_config": "aux"}),
            ("eagle_config", [1, 2, 3], {"eagle_config": [1, 2, 3]}),
            ("eagle_config", 1, {"eagle_config": 1}),
            (
                "eagle_config.use_aux_hidden_state",
                "yes",
                {"eagle_config": {"use_aux_hidden_state": "yes"}},
            ),
            (
                "eagle_config.use_aux_hidden_state",
                1,
                {"eagle_config": {"use_aux_hidden_state": 1}},
            ),
            (
                "eagle_config.use_aux_hidden_state",
                None,
                {"eagle_config": {"use_aux_hidden_state": None}},
            ),
        ]
        for key, value, changes in cases:
            with self.subTest(key=key, value=value):
                hf_config = self.hf_config(**changes)
                self.assert_refused(
                    lambda: parse_eagle_use_aux_hidden_state(self.eagle3, hf_config),
                    key,
                    value,
                    hf_config,
                )

    def test_layer_ids_accepted_forms(self):
        cases = [
            ("no eagle_config", {}, None, DEFAULT_NUM_AUX_HIDDEN_STATES),
            ("eagle_config without ids", {"eagle_config": {}}, None, 3),
            (
                "three ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}},
                [1, 23, 44],
                3,
            ),
            (
                "two ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30]}},
                [2, 30],
                2,
            ),
            (
                "four ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 8, 16, 31]}},
                [1, 8, 16, 31],
                4,
            ),
        ]
        for name, changes, layer_ids, num_aux in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), layer_ids
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_layer_ids_at_the_top_level(self):
        cases = [
            ("top level only", {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}, 3),
            ("two at the top level", {"eagle_aux_hidden_state_layer_ids": [1, 44]}, 2),
            (
                "both places, the same layers",
                {
                    "eagle_aux_hidden_state_layer_ids": [2, 30],
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30]},
                },
                2,
            ),
        ]
        for name, changes, num_aux in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config),
                    changes["eagle_aux_hidden_state_layer_ids"],
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_layer_ids_declared_twice_must_agree(self):
        hf_config = self.hf_config(
            eagle_aux_hidden_state_layer_ids=[1, 44],
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44]},
        )
        for function in (
            get_eagle_aux_hidden_state_layer_ids,
            get_eagle_num_aux_hidden_states,
        ):
            with self.subTest(function=function.__name__):
                message = self.assert_refused(
                    lambda: function(hf_config),
                    "eagle_aux_hidden_state_layer_ids",
                    [1, 44],
                    hf_config,
                )
                self.assertIn("[1, 23, 44]", message)

    def test_num_aux_hidden_states_must_count_the_layers(self):
        cases = [
            ({"num_aux_hidden_states": 4}, 4),
            (
                {
                    "num_aux_hidden_states": 3,
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 31]},
                },
                3,
            ),
            (
                {
                    "num_aux_hidden_states": 2,
                    "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
                },
                2,
            ),
        ]
        for changes, value in cases:
            with self.subTest(changes=changes):
                hf_config = self.hf_config(**changes)
                self.assert_refused(
                    lambda: get_eagle_num_aux_hidden_states(hf_config),
                    "num_aux_hidden_states",
                    value,
                    hf_config,
                )
        hf_config = self.hf_config(num_aux_hidden_states=3)
        self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_layer_ids_from_a_tuple_or_an_object(self):
        hf_config = self.hf_config()
        forms = [
            SimpleNamespace(eagle_aux_hidden_state_layer_ids=(2, 30, 58)),
            {"eagle_aux_hidden_state_layer_ids": (2, 30, 58)},
        ]
        for eagle_config in forms:
            with self.subTest(eagle_config=eagle_config):
                hf_config.eagle_config = eagle_config
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), [2, 30, 58]
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_layer_ids_refused_forms(self):
        for value in ([], [1, "x", 3], [-1, 2, 3], [True, 2, 3], "1,2,3", 3):
            for key, changes in (
                (
                    "eagle_config.eagle_aux_hidden_state_layer_ids",
                    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": value}},
                ),
                (
                    "eagle_aux_hidden_state_layer_ids",
                    {"eagle_aux_hidden_state_layer_ids": value},
                ),
            ):
                with self.subTest(key=key, value=value):
                    hf_config = self.hf_config(**changes)
                    for function in (
                        get_eagle_aux_hidden_state_layer_ids,
                        get_eagle_num_aux_hidden_states,
                    ):
                        self.assert_refused(
                            lambda: function(hf_config), key, value, hf_config
                        )


class TestStartupValidation(CustomTestCase):
    """validate_eagle_draft_config: a drafter that cannot consume what the target
    produces stops the worker at start-up with one message naming the cause."""

    @classmethod
    def setUpClass(cls):
        cls.folder = ConfigFolder()
        cls.llama_target = cls.folder.model_config(LLAMA_3_1_8B_INSTRUCT, "target")
        cls.qwen3_14b_target = cls.folder.model_config(QWEN3_14B, "target")
        cls.qwen3_30b_target = cls.folder.model_config(QWEN3_30B_A3B, "target")

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def draft(self, base: dict = EAGLE3_LLAMA_3_1_8B, **changes) -> ModelConfig:
        config = dict(base, **changes)
        return self.folder.model_config(config, "draft", is_draft_model=True)

    def assert_refused(self, draft, target, key: str, value):
        with self.assertRaises(ValueError) as raised:
            validate_eagle_draft_config(SpeculativeAlgorithm.EAGLE3, draft, target)
        message = str(raised.exception)
        self.assertIn(f"Invalid {key}={value!r} in the draft model config", message)
        self.assertIn(draft.model_path, message)
        self.assertIn(f"for the target model config {target.model_path}", message)
        self.assertIn(": expected ", message)
        self.assertNotIn("\n", message)
        return message

    def test_valid_drafters_pass(self):
        cases = [
            (self.draft(), self.llama_target),
            (self.draft(EAGLE3_LLAMA_3_1_8B_NO_AUX), self.llama_target),
            (self.draft(target_hidden_size=4096), self.llama_target),
            (self.draft(num_aux_hidden_states=3), self.llama_target),
            (
                self.draft(
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 29]}
                ),
                self.llama_target,
            ),
            (self.draft(EAGLE3_NARROW_FOR_QWEN3_14B), self.qwen3_14b_target),
            (
                self.draft(eagle_aux_hidden_state_layer_ids=[1, 15, 29]),
                self.llama_target,
            ),
        ]
        for draft, target in cases:
            with self.subTest(draft=draft.model_path):
                self.assertIsNone(
                    validate_eagle_draft_config(
                        SpeculativeAlgorithm.EAGLE3, draft, target
                    )
                )

    def test_other_algorithms_are_not_checked(self):
        draft = self.draft(target_hidden_size=5120, eagle_config="x")
        for algorithm in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.STANDALONE):
            with self.subTest(algorithm=algorithm.name):
                self.assertIsNone(
                    validate_eagle_draft_config(algorithm, draft, self.llama_target)
                )

    def test_target_hidden_size_of_another_target(self):
        self.assert_refused(
            self.draft(target_hidden_size=5120),
            self.llama_target,
            "target_hidden_size",
            5120,
        )
        # A drafter whose architecture is not llama_eagle3's: no fc width to compare,
        # the declared target width alone tells it was trained for another target.
        self.assert_refused(
            self.draft(EAGLE3_QWEN3_30B_A3B, target_hidden_size=4096),
            self.qwen3_30b_target,
            "target_hidden_size",
            4096,
        )

    def test_num_aux_hidden_states_disagrees_with_the_capture(self):
        self.assert_refused(
            self.draft(num_aux_hidden_states=4),
            self.llama_target,
            "num_aux_hidden_states",
            4,
        )
        self.assert_refused(
            self.draft(
                num_aux_hidden_states=3,
                eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 31]},
            ),
            self.llama_target,
            "num_aux_hidden_states",
            3,
        )

    def test_narrow_drafter_without_target_hidden_size(self):
        """A 4096-wide drafter for a 5120-wide target must say target_hidden_size: its fc
        would take 3 x 4096 features while the target produces 3 x 5120."""
        message = self.assert_refused(
            self.draft(
                {
                    key: value
                    for key, value in EAGLE3_NARROW_FOR_QWEN3_14B.items()
                    if key != "target_hidden_size"
                }
            ),
            self.qwen3_14b_target,
            "target_hidden_size",
            None,
        )
        self.assertIn("5120", message)

    def test_top_level_layer_ids_of_another_length(self):
        self.assert_refused(
            self.draft(eagle_aux_hidden_state_layer_ids=[1, 31]),
            self.llama_target,
            "eagle_aux_hidden_state_layer_ids",
            [1, 31],
        )

    def test_fc_width_differs_from_what_the_target_produces(self):
        """llama_eagle3.py's fc takes 3 x hidden_size features; four captured layers
        produce 4 x 4096."""
        layer_ids = [1, 8, 16, 31]
        self.assert_refused(
            self.draft(eagle_config={"eagle_aux_hidden_state_layer_ids": layer_ids}),
            self.llama_target,
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            layer_ids,
        )

    def test_parser_refusals_name_both_configs(self):
        self.assert_refused(
            self.draft(eagle_config={"use_aux_hidden_state": "yes"}),
            self.llama_target,
            "eagle_config.use_aux_hidden_state",
            "yes",
        )
        self.assert_refused(
            self.draft(eagle_config={"eagle_aux_hidden_state_layer_ids": []}),
            self.llama_target,
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            [],
        )

    def test_every_worker_stops_at_start_up(self):
        draft = self.draft(target_hidden_size=5120)
        for kind, _, _ in WORKER_KINDS:
            with self.subTest(worker=kind):
                with self.assertRaises(ValueError):
                    make_worker(kind, "EAGLE3", draft, self.llama_target)


# ---------------------------------------------------------------------------
# Structural guard: every sizing site goes through the classmethods.
# ---------------------------------------------------------------------------

DECODE_CLASS = "EagleDraftInput"
EXTEND_CLASS = "EagleDraftExtendInput"
INPUT_CLASSES = (DECODE_CLASS, EXTEND_CLASS)
ALLOCATORS = ("zeros", "empty", "ones", "full")

#: Idle inputs built where no worker is in reach: an EagleDraftExtendInput sized from the
#: batch, which the worker rebuilds with its own sizes before the draft-extend forward.
DETACHED_IDLE_INPUT_SCOPES = {("eagle_info.py", "EagleVerifyInput.verify")}
#: Sites of the extend phase whose scope does not say "draft_extend".
EXTEND_SCOPES = {
    ("multi_layer_eagle_worker_v2.py", "MultiLayerEagleDraftWorker.__init__")
}
#: What every EAGLE worker sets at start-up, and the one function each must come from.
PARSED_ATTRIBUTES = {
    "eagle_use_aux_hidden_state": "parse_eagle_use_aux_hidden_state",
    "eagle_num_aux_hidden_states": "get_eagle_num_aux_hidden_states",
}
#: Calls in a worker's __init__ that build (and load) the draft model.
DRAFT_MODEL_BUILDERS = {"super().__init__", "TpModelWorker"}
#: The EAGLE workers that must check their drafter (before building the draft model) and
#: take the parsed attributes from the parser.
EAGLE_WORKERS = {
    "eagle_worker.py": "EAGLEWorker",
    "eagle_worker_v2.py": "EagleDraftWorker",
    "multi_layer_eagle_worker.py": "MultiLayerEagleWorker",
    "multi_layer_eagle_worker_v2.py": "MultiLayerEagleDraftWorker",
}


def sglang_srt_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(sglang.__file__)), "srt")


def sizing_files() -> List[str]:
    """Every module of srt/speculative/, and the scheduler (PD metadata buffers)."""
    srt = sglang_srt_dir()
    speculative = os.path.join(srt, "speculative")
    files = [
        os.path.join(speculative, name)
        for name in sorted(os.listdir(speculative))
        if name.endswith(".py")
    ]
    return files + [os.path.join(srt, "managers", "scheduler.py")]


def walk_with_scope(tree: ast.Module):
    """Yield (node, "Class.function", enclosing function) for every node."""

    def visit(node, scope, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, scope + [child.name], function)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, ".".join(scope), function
                yield from visit(child, scope + [child.name], child)
            else:
                yield child, ".".join(scope), function
                yield from visit(child, scope, function)

    yield from visit(tree, [], None)


def classmethod_call(node: ast.AST, method: str) -> Optional[Tuple[str, str]]:
    """(class, worker expression) for ``<EagleDraft*Input>.<method>(<worker>)``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in INPUT_CLASSES
        and len(node.args) == 1
        and not node.keywords
    ):
        return node.func.value.id, ast.unparse(node.args[0])
    return None


def routed(width: ast.AST, dtype: Optional[ast.AST]) -> Optional[str]:
    """The input class when width and dtype come from the same class's classmethods for
    the same worker, else None."""
    width_call = classmethod_call(width, "hidden_size_for")
    dtype_call = classmethod_call(dtype, "dtype_for") if dtype is not None else None
    if width_call is None or width_call != dtype_call:
        return None
    return width_call[0]


def names_hidden_width(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and "hidden_size" in n.attr)
        or (isinstance(n, ast.Name) and "hidden_size" in n.id)
        for n in ast.walk(node)
    )


def keyword(call: ast.Call, name: str) -> Optional[ast.AST]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def expected_phase(file: str, scope: str) -> str:
    if (
        "draftextend" in scope.lower().replace("_", "")
        or (file, scope) in EXTEND_SCOPES
    ):
        return EXTEND_CLASS
    return DECODE_CLASS


def padding_pairs(width: ast.AST, dtype: ast.AST):
    """Split ``(<a> if c else <b>)`` width/dtype pairs that share their conditions."""
    if (
        isinstance(width, ast.IfExp)
        and isinstance(dtype, ast.IfExp)
        and ast.dump(width.test) == ast.dump(dtype.test)
    ):
        yield from padding_pairs(width.body, dtype.body)
        yield from padding_pairs(width.orelse, dtype.orelse)
    else:
        yield width, dtype


def sizing_violations(path: str) -> List[str]:
    """Every sizing site of one file that does not go through the classmethods, as
    ``file:line: what``."""
    relative = os.path.relpath(path, sglang_srt_dir())
    file = os.path.basename(path)
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    found = []

    def report(node, what):
        found.append(f"{relative}:{node.lineno}: {what}")

    def check_phase(node, scope, input_class):
        wanted = expected_phase(file, scope)
        if input_class != wanted:
            report(node, f"{scope} is sized by {input_class}; expected {wanted}")

    for node, scope, function in walk_with_scope(tree):
        if not isinstance(node, ast.Call) or not isinstance(
            node.func, (ast.Attribute, ast.Name)
        ):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id

        if name == "create_idle_input" and keyword(node, "hidden_size") is not None:
            width, dtype = keyword(node, "hidden_size"), keyword(node, "dtype")
            built = ast.unparse(node.func.value)
            if (file, scope) in DETACHED_IDLE_INPUT_SCOPES:
                if built != EXTEND_CLASS:
                    report(
                        node,
                        f"idle input of {scope} is a {built}; expected "
                        f"{EXTEND_CLASS}, which the worker rebuilds",
                    )
                continue
            input_class = routed(width, dtype)
            if input_class is None or built != input_class:
                report(
                    node,
                    f"idle input sized inline: hidden_size="
                    f"{ast.unparse(width)}; expected <{DECODE_CLASS} or "
                    f"{EXTEND_CLASS}>.hidden_size_for/dtype_for(<worker>)",
                )
            else:
                check_phase(node, scope, input_class)

        elif (
            name in ALLOCATORS
            and isinstance(node.func, ast.Attribute)
            and ast.unparse(node.func.value) == "torch"
            and node.args
            and isinstance(node.args[0], ast.Tuple)
            and node.args[0].elts
            and names_hidden_width(node.args[0].elts[-1])
        ):
            width = node.args[0].elts[-1]
            parameters = (
                {a.arg for a in function.args.args + function.args.kwonlyargs}
                if function is not None
                else set()
            )
            if isinstance(width, ast.Name) and width.id in parameters:
                continue  # sized by the caller (create_idle_input's own body)
            input_class = routed(width, keyword(node, "dtype"))
            if input_class is None:
                report(
                    node,
                    f"hidden-state buffer sized inline: "
                    f"{ast.unparse(width)}; expected <{DECODE_CLASS} or "
                    f"{EXTEND_CLASS}>.hidden_size_for/dtype_for(<worker>)",
                )
            else:
                check_phase(node, scope, input_class)

        elif name == "MetadataBuffers" and keyword(node, "hidden_size") is not None:
            width = keyword(node, "hidden_size")
            dtype = keyword(node, "hidden_states_dtype")
            for width_branch, dtype_branch in padding_pairs(width, dtype):
                if isinstance(width_branch, ast.Constant):
                    continue  # RDMA padding when no draft state is sent
                input_class = routed(width_branch, dtype_branch)
                if input_class is None:
                    report(
                        node,
                        f"PD metadata buffer sized inline: hidden_size="
                        f"{ast.unparse(width_branch)}; expected "
                        f"{DECODE_CLASS}.hidden_size_for/dtype_for(<worker>)",
                    )
                else:
                    check_phase(node, scope, input_class)
    return found


class TestSizingSitesUseTheContract(CustomTestCase):
    """Reads srt/speculative/*.py and managers/scheduler.py: an inline hidden width (a
    merge that brings back ``hidden_size * 3``) fails here with its file and line."""

    def test_sizing_sites_found(self):
        """The guard looks where the sites are: a renamed folder must not pass silently."""
        files = sizing_files()
        names = {os.path.basename(f) for f in files}
        for name in list(EAGLE_WORKERS) + ["eagle_info.py", "scheduler.py"]:
            self.assertIn(name, names)

    def test_no_inline_hidden_state_sizes(self):
        violations = [v for path in sizing_files() for v in sizing_violations(path)]
        if violations:
            self.fail(
                "Size EAGLE hidden states through EagleDraftInput (decode phase) or "
                "EagleDraftExtendInput (extend phase) .hidden_size_for/.dtype_for:\n"
                + "\n".join(violations)
            )

    def test_workers_rebuild_detached_idle_inputs(self):
        """An idle input built in verify has no worker's sizes: the v1 workers rebuild it
        under ``if batch.forward_mode.is_idle():`` before the draft-extend forward."""
        speculative = os.path.join(sglang_srt_dir(), "speculative")
        rebuilt = []
        for name in sorted(os.listdir(speculative)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(speculative, name)) as f:
                tree = ast.parse(f.read())
            for node, scope, _ in walk_with_scope(tree):
                if not (
                    isinstance(node, ast.FunctionDef)
                    and node.name == "forward_draft_extend_after_decode"
                ):
                    continue
                rebuilds = [
                    stmt
                    for stmt in node.body
                    if isinstance(stmt, ast.If)
                    and ast.unparse(stmt.test).endswith("forward_mode.is_idle()")
                    and any(
                        isinstance(n, ast.Call)
                        and ast.unparse(n.func) == f"{EXTEND_CLASS}.create_idle_input"
                        for n in ast.walk(stmt)
                    )
                ]
                with self.subTest(file=name, scope=f"{scope}.{node.name}"):
                    self.assertTrue(
                        rebuilds,
                        f"speculative/{name}:{node.lineno}: {scope}.{node.name} does "
                        f"not rebuild an idle input as {EXTEND_CLASS}",
                    )
                rebuilt.append(name)
        self.assertIn("eagle_worker.py", rebuilt)

    def test_eagle_workers_start_up_through_the_parser(self):
        """Every EAGLE worker checks its drafter before it builds the draft model, and
        sets eagle_use_aux_hidden_state and eagle_num_aux_hidden_states from the one
        parser; nothing in srt/speculative/ sets them another way."""
        speculative = os.path.join(sglang_srt_dir(), "speculative")
        for name in sorted(os.listdir(speculative)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(speculative, name)) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    parser = (
                        PARSED_ATTRIBUTES.get(target.attr)
                        if isinstance(target, ast.Attribute)
                        else None
                    )
                    if parser is None:
                        continue
                    value = node.value
                    self.assertTrue(
                        isinstance(value, ast.Call)
                        and ast.unparse(value.func) == parser,
                        f"speculative/{name}:{node.lineno}: {target.attr} = "
                        f"{ast.unparse(value)}; expected {parser}(...)",
                    )
            class_name = EAGLE_WORKERS.get(name)
            if class_name is None:
                continue
            with self.subTest(worker=class_name):
                cls = next(
                    n
                    for n in tree.body
                    if isinstance(n, ast.ClassDef) and n.name == class_name
                )
                init = next(
                    n
                    for n in cls.body
                    if isinstance(n, ast.FunctionDef) and n.name == "__init__"
                )
                first_call = {}
                for call in ast.walk(init):
                    if isinstance(call, ast.Call):
                        func = ast.unparse(call.func)
                        first_call[func] = min(
                            first_call.get(func, call.lineno), call.lineno
                        )
                where = f"speculative/{name}:{init.lineno}: {class_name}.__init__"
                for function in (
                    "validate_eagle_draft_config",
                    *PARSED_ATTRIBUTES.values(),
                ):
                    self.assertIn(
                        function, first_call, f"{where} does not call {function}"
                    )
                builds = [
                    first_call[b] for b in DRAFT_MODEL_BUILDERS if b in first_call
                ]
                self.assertTrue(builds, f"{where} builds no draft model")
                self.assertLess(
                    first_call["validate_eagle_draft_config"],
                    min(builds),
                    f"{where} validates the drafter after building the draft model",
                )


if __name__ == "__main__":
    logging.getLogger("sglang.srt.configs.model_config").setLevel(logging.ERROR)
    unittest.main()
