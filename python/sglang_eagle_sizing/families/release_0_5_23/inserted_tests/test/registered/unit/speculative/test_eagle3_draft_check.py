"""EAGLE-3: a drafter its target cannot feed is refused before any weights load, naming
the key: its keys by the server arguments, its ids where the target resolves its capture,
with the target class's limit."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace

from sglang.srt.arg_groups.speculative_hook import (
    _handle_eagle3_draft_check,
    handle_speculative_decoding,
)
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.runtime_context import (
    SpawnRanks,
    publish,
    restore_context,
    snapshot_context,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.eagle3_draft_config import (
    parse_eagle3_draft_config,
    validate_eagle3_draft_config,
)
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=60, suite="base-a-test-cpu")

LAYER_IDS = "eagle_aux_hidden_state_layer_ids"
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 48,
    "num_attention_heads": 4,
    "num_hidden_layers": 6,
    "vocab_size": 128,
}
GPT_OSS = {
    **LLAMA,
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "num_key_value_heads": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "head_dim": 12,
}
OPT = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "hidden_size": 48,
    "num_attention_heads": 4,
    "num_hidden_layers": 6,
    "ffn_dim": 96,
    "vocab_size": 128,
}


class TestDraftCheck(CustomTestCase):
    def folder(self, config):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        with open(os.path.join(folder.name, "config.json"), "w") as f:
            json.dump(config, f)
        return folder.name

    def server_args(self, target, **draft_keys):
        draft = {**LLAMA, "architectures": ["LlamaForCausalLMEagle3"], **draft_keys}
        return ServerArgs(
            model_path=self.folder(target),
            device="cpu",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=self.folder(draft),
            skip_tokenizer_init=True,
        )

    def check(self, target=LLAMA, **keys):
        """The check of a drafter with ``keys`` against ``target``'s config."""
        server_args = self.server_args(target)
        keys = {"hidden_size": 64, "target_hidden_size": 48, **keys}
        draft = SimpleNamespace(name_or_path="/drafts/eagle3", **keys)
        self.addCleanup(restore_context, snapshot_context())
        publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        validate_eagle3_draft_config(
            parse_eagle3_draft_config(draft_hf_config=draft),
            draft_hf_config=draft,
            target_model_config=ModelConfig.from_server_args(server_args),
        )

    def resolve(self, target=LLAMA, **draft_keys):
        """The target's resolution of its aux hidden states (``ModelRunner.__init__``,
        before ``load_model``) for a drafter with ``draft_keys``."""
        server_args = self.server_args(target, **draft_keys)
        self.addCleanup(restore_context, snapshot_context())
        publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        _resolve_eagle_aux_hidden_state(
            config=SpecAuxHiddenStateConfig(),
            server_args=server_args,
            model_config=ModelConfig.from_server_args(server_args),
            spec_algorithm=SpeculativeAlgorithm.EAGLE3,
            is_draft_worker=False,
        )

    def test_a_drafter_that_fits_passes(self):
        self.check()
        self.check(eagle_config={LAYER_IDS: [1, 3, 4]})
        self.check(eagle_config={LAYER_IDS: [1, 3]}, num_aux_hidden_states=2)
        self.check(target_hidden_size=None, hidden_size=48)
        # Declared twice: the release serves eagle_config's, fc and buffers agreeing.
        self.check(eagle_config={LAYER_IDS: [1, 3, 4]}, **{LAYER_IDS: [2, 3, 4]})

    def test_num_aux_hidden_states_must_count_the_captured_layers(self):
        # fc and the buffers took 4, the target captured 3 layers.
        for keys in ({}, {"eagle_config": {LAYER_IDS: [1, 3, 4]}}):
            with self.assertRaisesRegex(
                ValueError, "num_aux_hidden_states=4.*expected 3"
            ):
                self.check(num_aux_hidden_states=4, **keys)

    def test_layer_ids_must_be_a_list_of_layers(self):
        # [] captured nothing and fed fc a buffer 3 layers wide.
        for layer_ids in ([], [1, -2], [1, "5"]):
            with self.assertRaisesRegex(ValueError, f"eagle_config.{LAYER_IDS}"):
                self.check(eagle_config={LAYER_IDS: layer_ids})

    def test_the_drafter_must_read_the_targets_width(self):
        with self.assertRaisesRegex(ValueError, "target_hidden_size=64.*48"):
            self.check(target_hidden_size=64)
        with self.assertRaisesRegex(ValueError, "hidden_size=64.*48"):
            self.check(target_hidden_size=None)

    def test_a_layer_the_target_class_does_not_capture_is_refused(self):
        # Llama drops the last layer's output: fc failed at the first request.
        with self.assertRaisesRegex(
            ValueError,
            r"eagle_config.eagle_aux_hidden_state_layer_ids=\[1, 3, 5\].*"
            r"LlamaForCausalLM.*\[2, 4, 6\].*0 to 5: it has 6 layers and does "
            "not capture the last one's output",
        ):
            self.resolve(eagle_config={LAYER_IDS: [1, 3, 5]})
        self.resolve(eagle_config={LAYER_IDS: [1, 3, 4]})
        # GPT-OSS captures it.
        self.resolve(GPT_OSS, eagle_config={LAYER_IDS: [1, 3, 5]})
        self.resolve(GPT_OSS, eagle_config={LAYER_IDS: [1, 3, 6]})

    def test_a_drafter_without_aux_hidden_states_is_not_checked(self):
        self.check(
            eagle_config={"use_aux_hidden_state": False}, num_aux_hidden_states=4
        )

    def test_the_server_arguments_check_the_drafter(self):
        # Refused while the speculative arguments are resolved, before any process starts.
        with self.assertRaisesRegex(ValueError, "num_aux_hidden_states=4"):
            handle_speculative_decoding(
                self.server_args(LLAMA, num_aux_hidden_states=4)
            )
        _handle_eagle3_draft_check(self.server_args(LLAMA))

    def test_the_server_arguments_import_no_model_module(self):
        # The launcher resolves its arguments without the target's model code.
        server_args = self.server_args(LLAMA)
        code = (
            "import sys\n"
            "from sglang.srt.arg_groups.speculative_hook import "
            "_handle_eagle3_draft_check\n"
            "from sglang.srt.server_args import ServerArgs\n"
            f"_handle_eagle3_draft_check(ServerArgs(model_path={server_args.model_path!r}, "
            f"device='cpu', speculative_algorithm='EAGLE3', "
            f"speculative_draft_model_path={server_args.speculative_draft_model_path!r}, "
            "skip_tokenizer_init=True))\n"
            "print(sorted(m for m in sys.modules if m.startswith('sglang.srt.models.')))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        self.assertEqual(out.strip().splitlines()[-1], "[]")

    def test_capture_without_a_drafter_is_not_checked(self):
        # --enable-return-aux-hidden-states: ids of the capture flags, no drafter.
        server_args = ServerArgs(
            model_path=self.folder(LLAMA),
            device="cpu",
            speculative_algorithm="EAGLE3",
            enable_return_aux_hidden_states=True,
            return_aux_hidden_state_layer_ids=[1, 3, 5],
            skip_tokenizer_init=True,
        )
        _handle_eagle3_draft_check(server_args)

    def test_a_target_without_eagle3_capture_is_refused(self):
        # Failed in configure_aux_hidden_state_capture, after the weights loaded.
        with self.assertRaisesRegex(ValueError, "OPTForCausalLM does not capture"):
            self.resolve(OPT)


if __name__ == "__main__":
    unittest.main()
