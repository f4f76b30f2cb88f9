"""The shared harness of the EAGLE hidden-sizing tests: minimal synthetic configs, the
stand-ins for what a CPU cannot do (load weights, allocate KV caches, join process groups,
build attention backends) and the real workers started on them."""

import contextlib
import json
import os
import tempfile
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple
from unittest import mock

import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers import tp_worker as tp_worker_module
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.draft_utils import DraftBackendFactory
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import (
    MultiLayerEagleDraftWorker,
    MultiLayerEagleWorkerV2,
)
from sglang.srt.speculative.standalone_worker import StandaloneWorker
from sglang.test.test_utils import CustomTestCase

TARGET_LAYERS = 8
SPEC_STEPS = 3
TOPK = 1
DRAFT_TOKENS = 4
#: The target's default capture: 3 layers.
DEFAULT_NUM_AUX = 3
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def llama(hidden_size: int = 256, torch_dtype: str = "bfloat16", **fields) -> dict:
    """A Llama config: the target, or the base of a drafter."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
        "torch_dtype": torch_dtype,
    }
    config.update(fields)
    return config


def eagle3(hidden_size: int = 256, torch_dtype: str = "float16", **fields) -> dict:
    """A one-layer EAGLE-3 drafter (llama_eagle3.py's architecture)."""
    fields.setdefault("architectures", ["LlamaForCausalLMEagle3"])
    return llama(
        hidden_size, torch_dtype, num_hidden_layers=1, draft_vocab_size=512, **fields
    )


def speculators_eagle3(layer_ids: Optional[List[int]] = None, **fields) -> dict:
    """An EAGLE-3 drafter as the speculators library saves it: the decoder layer's
    config nested, the drafter's own keys at the top level."""
    layer = llama(num_hidden_layers=1, head_dim=64)
    del layer["architectures"], layer["torch_dtype"]
    config = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_config": {
            "algorithm": "eagle3",
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": None},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": 512,
        "target_hidden_size": None,
        "dtype": "float16",
    }
    if layer_ids is not None:
        config["eagle_aux_hidden_state_layer_ids"] = layer_ids
    config.update(fields)
    return config


def eagle(hidden_size: int = 256, torch_dtype: str = "float16", **fields) -> dict:
    """A one-layer EAGLE (EAGLE-2) drafter."""
    return llama(
        hidden_size,
        torch_dtype,
        architectures=["LlamaForCausalLMEagle"],
        num_hidden_layers=1,
        **fields,
    )


#: An EAGLE-3 drafter half as wide as its target, declaring the target's width.
NARROW_EAGLE3 = eagle3(hidden_size=128, target_hidden_size=256)
#: An EAGLE-3 drafter that names four target layers; its architecture is not
#: llama_eagle3.py's.
FOUR_LAYER_EAGLE3 = eagle3(
    architectures=["Qwen3MoEForCausalLMEagle3"],
    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 6]},
)
#: An EAGLE-3 drafter with aux hidden states off: it reads one target hidden state.
NO_AUX_EAGLE3 = eagle3(eagle_config={"use_aux_hidden_state": False})
#: An EAGLE-3 drafter half as wide as its target, aux hidden states off: it reads the
#: target's last hidden state (256 wide) and carries its own (128 wide).
NARROW_NO_AUX_EAGLE3 = eagle3(
    hidden_size=128,
    target_hidden_size=256,
    eagle_config={"use_aux_hidden_state": False},
)
#: A hyper-connection pair (hc_mult=2): hidden states are 2 x hidden_size wide.
HC_TARGET = llama(hc_mult=2)
HC_DRAFTER = eagle(hc_mult=2)
#: A STANDALONE drafter: a small Llama half as wide as its target.
STANDALONE_DRAFTER = llama(hidden_size=128, torch_dtype="float16", num_hidden_layers=2)


def spec_width(config: dict) -> int:
    """The width of a model's hidden state: hidden_size, times hc_mult when set."""
    return config["hidden_size"] * config.get("hc_mult", 1)


def built_dtype(algorithm: str, draft: dict, target: dict) -> str:
    """The dtype the draft model is built in at ``--dtype auto``: an EAGLE drafter (EAGLE,
    EAGLE-3, MTP) consumes the target's hidden states and shares its embedding, so it
    takes the target's; a STANDALONE drafter keeps its own."""
    return draft["torch_dtype"] if algorithm == "STANDALONE" else target["torch_dtype"]


def expected_sizes(algorithm: str, draft: dict, target: dict) -> Dict[str, object]:
    """Decode and extend width and dtype, from the config facts alone."""
    eagle_config = draft.get("eagle_config") or {}
    if algorithm == "EAGLE3" and eagle_config.get("use_aux_hidden_state", True):
        layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids") or draft.get(
            "eagle_aux_hidden_state_layer_ids"
        )
        extend_width = (len(layer_ids) if layer_ids else DEFAULT_NUM_AUX) * target[
            "hidden_size"
        ]
    elif algorithm == "STANDALONE":
        extend_width = spec_width(draft)
    else:
        extend_width = spec_width(target)
    dtype = DTYPES[built_dtype(algorithm, draft, target)]
    return {
        "decode": (spec_width(draft), dtype),
        "extend": (extend_width, dtype),
    }


class ConfigFolders:
    """Writes config dicts as ``<folder>/config.json`` under one temporary folder."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="eagle-hidden-sizing-")
        self._count = 0

    def write(self, config: dict) -> str:
        self._count += 1
        folder = os.path.join(self._tmp.name, f"{self._count:03d}")
        os.makedirs(folder)
        for name, content in (("config.json", config), ("generation_config.json", {})):
            with open(os.path.join(folder, name), "w") as f:
                json.dump(content, f)
        return folder

    def model_config(self, config: dict, is_draft_model: bool = False) -> ModelConfig:
        return ModelConfig(self.write(config), is_draft_model=is_draft_model)

    def cleanup(self):
        self._tmp.cleanup()


# ---------------------------------------------------------------------------


# The seams: what a CPU cannot do (load weights, allocate KV caches, join process
# groups, build attention backends). Everything else is the workers' own code.
# ---------------------------------------------------------------------------


class DraftModelStandIn:
    """The loaded draft model: it only receives the target's embedding and head."""

    hot_token_id = None

    def set_embed(self, embed: torch.Tensor):
        self.embed = embed

    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor):
        self.embed, self.head = embed, head


class TargetModelStandIn:
    """The loaded target model: its embedding and head, and the layers it captures."""

    def __init__(self):
        self.captured_layer_ids = "not set"

    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.empty(0), torch.empty(0)

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        self.captured_layer_ids = layer_ids


class ModelRunnerStandIn:
    """A ModelRunner after start-up, without weights or KV cache: it holds the real
    ``ModelConfig`` its worker read."""

    def __init__(self, model_config: ModelConfig, server_args: ServerArgs, model):
        self.model_config = model_config
        self.server_args = server_args
        self.device = server_args.device
        self.dtype = model_config.dtype
        self.model = model
        self.tp_group = None
        self.token_to_kv_pool = None
        self.memory_pool_config = None
        self.attn_backend = None
        self.graph_runner = None
        self.max_total_num_tokens = 1024
        self.max_running_requests = 8
        self.max_token_pool_size = 1024


class TargetWorkerStandIn:
    """The target TpModelWorker: its real ModelConfig, a request pool on the CPU."""

    def __init__(self, model_config: ModelConfig, server_args: ServerArgs):
        self.model_config = model_config
        self.model_runner = ModelRunnerStandIn(
            model_config, server_args, TargetModelStandIn()
        )
        self.req_to_token_pool = ReqToTokenPool(
            size=8, max_context_len=64, device="cpu", enable_memory_saver=False
        )

    def get_memory_pool(self):
        return self.req_to_token_pool, None


class DraftModelLoaded(Exception):
    """Raised where the draft model would load, when a test asks to stop there."""


def draft_model_seams(loads: List[str], stop_at_loader: bool = False):
    """Replace the draft TpModelWorker's model runners (and process groups) and the draft
    attention backends; record each draft model load in ``loads``."""

    def init_model_runner(worker: TpModelWorker):
        loads.append(worker.model_config.model_path)
        if stop_at_loader:
            raise DraftModelLoaded
        worker._model_runner = ModelRunnerStandIn(
            worker.model_config, worker.server_args, DraftModelStandIn()
        )

    def init_multi_layer_runners(worker: TpModelWorker):
        worker.model_runner_list.append(worker.model_runner)
        for _ in range(1, worker.server_args.speculative_num_steps):
            worker.model_runner_list.append(
                ModelRunnerStandIn(
                    worker.model_config, worker.server_args, DraftModelStandIn()
                )
            )

    stack = contextlib.ExitStack()
    for target, name, value in (
        (TpModelWorker, "_init_model_runner", init_model_runner),
        (
            TpModelWorker,
            "_init_multi_layer_eagle_model_runners",
            init_multi_layer_runners,
        ),
        (tp_worker_module, "get_pp_group", lambda: None),
        (
            tp_worker_module,
            "get_world_group",
            lambda: SimpleNamespace(cpu_group=None, ranks=[0]),
        ),
        (tp_worker_module, "broadcast_pyobj", lambda data, *args, **kwargs: data),
        (DraftBackendFactory, "create_decode_backend", lambda self: None),
        (DraftBackendFactory, "create_draft_extend_backend", lambda self: None),
    ):
        stack.enter_context(mock.patch.object(target, name, value))
    return stack


def make_server_args(
    target_path: str, draft_path: str, algorithm: str, **overrides
) -> ServerArgs:
    """SGLang's ServerArgs for a speculative server on the CPU, CUDA graphs off."""
    kwargs = dict(
        model_path=target_path,
        speculative_algorithm=algorithm,
        speculative_draft_model_path=draft_path,
        speculative_num_steps=SPEC_STEPS,
        speculative_eagle_topk=TOPK,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        device="cpu",
        skip_tokenizer_init=True,
        disable_cuda_graph=True,
    )
    kwargs.update(overrides)
    return ServerArgs(**kwargs)


#: The worker classes and how a server selects them.
V1_WORKERS = (EAGLEWorker, MultiLayerEagleWorker, StandaloneWorker)
MULTI_LAYER_WORKERS = (
    MultiLayerEagleWorker,
    MultiLayerEagleDraftWorker,
    MultiLayerEagleWorkerV2,
)


class Workers:
    """Starts real workers for a drafter and a target (config dicts)."""

    def __init__(self, folders: ConfigFolders):
        self.folders = folders
        self.loads: List[str] = []

    def start(self, cls, algorithm: str, draft: dict, target: dict, **overrides):
        server_args = make_server_args(
            self.folders.write(target),
            self.folders.write(draft),
            algorithm,
            disable_overlap_schedule=cls in V1_WORKERS,
            enable_multi_layer_eagle=cls in MULTI_LAYER_WORKERS,
            **overrides,
        )
        target_worker = TargetWorkerStandIn(
            ModelConfig.from_server_args(server_args), server_args
        )
        with draft_model_seams(self.loads):
            return cls(
                server_args,
                gpu_id=0,
                tp_rank=0,
                dp_rank=None,
                moe_ep_rank=0,
                attn_cp_rank=0,
                moe_dp_rank=0,
                nccl_port=0,
                target_worker=target_worker,
            )


def hidden_states_of(spec_info) -> Tuple[int, torch.dtype]:
    return spec_info.hidden_states.shape[-1], spec_info.hidden_states.dtype


def assert_refusal(test, error: Exception, key: str, value, draft_path: str) -> str:
    """A refusal is one line naming the key, its value and the drafter's config."""
    message = str(error)
    test.assertIn(f"{key}={value!r}", message)
    test.assertIn(draft_path, message)
    test.assertNotIn("\n", message)
    return message


class WorkerTestCase(CustomTestCase):
    """Holds the config folders and starts real workers.

    The workers are started by their own ``__init__``. What is replaced is the device
    work only: the draft ``TpModelWorker``'s model runners (weights, KV cache), its
    process groups, the draft attention backends, and the target worker, whose model is
    never loaded. The model configs are minimal synthetic ``config.json`` files that vary
    only the fields sizing reads.
    """

    @classmethod
    def setUpClass(cls):
        cls.folders = ConfigFolders()
        cls.workers = Workers(cls.folders)

    @classmethod
    def tearDownClass(cls):
        cls.folders.cleanup()

    def start(self, cls, algorithm: str, draft: dict, target: dict = None, **overrides):
        return self.workers.start(cls, algorithm, draft, target or llama(), **overrides)

    def assert_hidden_states(self, spec_info, width: int, dtype: torch.dtype):
        self.assertEqual(hidden_states_of(spec_info), (width, dtype))
