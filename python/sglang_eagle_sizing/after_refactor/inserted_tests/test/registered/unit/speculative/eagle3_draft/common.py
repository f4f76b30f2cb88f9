"""The shared harness of the EAGLE-3 drafter tests: a tiny Llama target and drafter written
as config folders, the server arguments that serve them, and what the target's start-up
reads of the drafter. Config only: no weights load."""

import contextlib
import json
import os
import tempfile

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.test_utils import CustomTestCase

TARGET_HIDDEN_SIZE = 48
TARGET_NUM_LAYERS = 6
LLAMA = {
    "model_type": "llama",
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}
TARGET = {
    **LLAMA,
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": TARGET_HIDDEN_SIZE,
    "num_hidden_layers": TARGET_NUM_LAYERS,
}
DRAFT = {
    **LLAMA,
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "target_hidden_size": TARGET_HIDDEN_SIZE,
}


class DrafterTestCase(CustomTestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = folder.name

    def write_config(self, path, config):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)

    def server_args(self, draft, target=TARGET, algorithm="EAGLE3", **kwargs):
        """Write both configs, each time to new folders (get_config caches a path's
        config); the server arguments that serve them."""
        folder = tempfile.mkdtemp(dir=self.folder)
        self.target_path = os.path.join(folder, "target")
        self.draft_path = os.path.join(folder, "draft")
        self.write_config(self.target_path, target)
        self.write_config(self.draft_path, draft)
        return ServerArgs(
            model_path=self.target_path,
            device="cpu",
            speculative_algorithm=algorithm,
            speculative_draft_model_path=self.draft_path,
            skip_tokenizer_init=True,
            **kwargs,
        )

    @contextlib.contextmanager
    def published(self, server_args):
        """The runtime context a scheduler publishes, for this block only."""
        context = create_context(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        with use_context(context):
            yield

    def draft_model_config(self, server_args):
        return ModelConfig.from_server_args(
            server_args, model_path=self.draft_path, is_draft_model=True
        )

    def captured_layer_ids(self, server_args):
        """The target layers the target's start-up captures for the drafter (None: its
        default layers)."""
        capture = SpecAuxHiddenStateConfig()
        _resolve_eagle_aux_hidden_state(
            config=capture,
            server_args=server_args,
            model_config=ModelConfig.from_server_args(server_args),
            spec_algorithm=SpeculativeAlgorithm.from_string(
                server_args.speculative_algorithm
            ),
            is_draft_worker=False,
        )
        return capture.eagle_aux_hidden_state_layer_ids
