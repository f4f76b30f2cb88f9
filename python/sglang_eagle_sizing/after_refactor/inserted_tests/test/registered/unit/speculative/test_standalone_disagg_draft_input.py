"""STANDALONE under PD disaggregation: the draft proposal the prefill server's draft extend
makes reaches the decode server's first draft input, as EAGLE's does. Each step runs
SGLang's own code: the prefill server's hand-off of a finished request
(``process_batch_result_disagg_prefill``), the metadata buffers the transfer carries
(``MetadataBuffers.set_buf`` / ``get_buf``) and the decode server's first draft input
(``SpeculativeAlgorithm.build_disagg_draft_input``)."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import json
import os
import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.disaggregation import prefill
from sglang.srt.disaggregation.utils import MetadataBuffers
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.test_utils import CustomTestCase

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}
# Two requests: the first token the prefill server samples for each, and the token its
# draft extend proposes after it (top-k 1).
FIRST_TOKENS = [91, 4]
PROPOSALS = [[17], [23]]
PROPOSAL_P = [[0.75], [0.5]]
# What an EAGLE draft extend hands over besides: one hidden state per request.
HIDDEN_SIZE = 16


def draft_extend_output(with_hidden_states):
    """The draft input the prefill server's draft extend returns for the two requests."""
    return EagleDraftInput(
        topk_p=torch.tensor(PROPOSAL_P),
        topk_index=torch.tensor(PROPOSALS),
        hidden_states=(
            torch.arange(2 * HIDDEN_SIZE, dtype=torch.float32).view(2, HIDDEN_SIZE)
            if with_hidden_states
            else None
        ),
        bonus_tokens=torch.tensor(FIRST_TOKENS),
    )


def finished_request(index):
    """A request whose prefill finished, as the hand-off reads it."""
    return SimpleNamespace(
        rid=f"r{index}",
        inflight_middle_chunks=0,
        time_stats=mock.MagicMock(),
        discard_output_reason=None,
        to_finish=None,
        finished_reason=None,
        pending_bootstrap=False,
        return_sampling_mask=False,
        return_logprob=False,
        grammar=None,
        output_ids=[],
        output_topk_p=None,
        output_topk_index=None,
        hidden_states_tensor=None,
        output_dsa_topk_indices=None,
        metadata_buffer_index=index,
        cached_tokens=0,
        cached_tokens_device=0,
        cached_tokens_host=0,
        cached_tokens_storage=0,
        get_mm_token_counts=lambda: (0, 0, 0),
        bootstrap_room=1000 + index,
    )


class TestStandaloneDraftAcrossPD(CustomTestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        paths = {}
        for name, config in (("target", LLAMA), ("draft", {**LLAMA, "num_hidden_layers": 1})):
            paths[name] = os.path.join(folder.name, name)
            os.makedirs(paths[name])
            with open(os.path.join(paths[name], "config.json"), "w") as f:
                json.dump(config, f)
        self.paths = paths

    def served(self, algorithm):
        """The runtime context of a server speculating with ``algorithm`` (top-k 1)."""
        server_args = ServerArgs(
            model_path=self.paths["target"],
            device="cpu",
            speculative_algorithm=algorithm,
            speculative_draft_model_path=self.paths["draft"],
            speculative_num_steps=3,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=4,
            skip_tokenizer_init=True,
        )
        context = create_context(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        return use_context(context)

    def hand_off(self, algorithm, draft_input):
        """The prefill server's real hand-off of two finished requests; each request as
        it is sent to the decode server, and the metadata buffers that carry it."""
        requests = [finished_request(i) for i in range(len(FIRST_TOKENS))]
        buffers = MetadataBuffers(
            size=4,
            hidden_size=HIDDEN_SIZE,
            hidden_states_dtype=torch.float32,
            max_sampling_mask_tokens=16,
        )
        scheduler = mock.MagicMock()
        scheduler.spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
        scheduler.send_kv_chunk.side_effect = lambda req, **_: buffers.set_buf(req)
        batch = SimpleNamespace(
            reqs=requests,
            spec_info=draft_input,
            prefill_stats=None,
            dp_cooperation_info=None,
        )
        result = SimpleNamespace(
            can_run_cuda_graph=False,
            logits_output=None,
            next_token_ids=torch.tensor(FIRST_TOKENS),
            extend_input_len_per_req=None,
            extend_logprob_start_len_per_req=None,
            copy_done=None,
            auxiliary_host_output=None,
            routed_experts_output=None,
            indexer_topk_output=None,
            next_draft_input=draft_input,
        )
        policy = SimpleNamespace(disaggregation_decode_allocation_policy=None)
        with mock.patch.object(prefill, "get_disagg", return_value=policy):
            prefill.SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill(
                scheduler, batch, result
            )
        self.assertEqual(scheduler.send_kv_chunk.call_count, len(requests))
        return requests, buffers

    def decode_draft_input(self, algorithm, buffers):
        """What the decode server takes from the transferred buffers
        (``_commit_transfer_to_req``) and the first draft input it builds from it."""
        requests = []
        for index, token in enumerate(FIRST_TOKENS):
            (_, _, _, _, _, _, _, _, _, topk_p, topk_index, hidden, _, _) = (
                buffers.get_buf(index)
            )
            requests.append(
                SimpleNamespace(
                    output_ids=[token],
                    output_topk_p=topk_p,
                    output_topk_index=topk_index,
                    hidden_states_tensor=hidden,
                    output_dsa_topk_indices=None,
                )
            )
        spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
        batch = SimpleNamespace(
            reqs=requests,
            device="cpu",
            spec_algorithm=spec_algorithm,
            enable_overlap=False,
            model_config=SimpleNamespace(hf_config=SimpleNamespace(), vocab_size=128),
        )
        return spec_algorithm.build_disagg_draft_input(
            batch, torch.tensor(FIRST_TOKENS), future_map=None
        )

    def test_the_prefill_server_hands_each_request_its_proposal(self):
        with self.served("STANDALONE"):
            requests, _ = self.hand_off("STANDALONE", draft_extend_output(False))
        self.assertEqual([r.output_ids for r in requests], [[t] for t in FIRST_TOKENS])
        self.assertEqual([r.output_topk_index.tolist() for r in requests], PROPOSALS)
        self.assertEqual([r.output_topk_p.tolist() for r in requests], PROPOSAL_P)
        # STANDALONE's draft makes no hidden states: none is handed over.
        self.assertEqual([r.hidden_states_tensor for r in requests], [None, None])

    def test_the_decode_servers_first_draft_input_is_the_proposal(self):
        with self.served("STANDALONE"):
            _, buffers = self.hand_off("STANDALONE", draft_extend_output(False))
            draft_input = self.decode_draft_input("STANDALONE", buffers)
        self.assertIsInstance(draft_input, EagleDraftInput)
        self.assertEqual(draft_input.topk_index.tolist(), PROPOSALS)
        self.assertEqual(draft_input.topk_p.tolist(), PROPOSAL_P)
        self.assertEqual(draft_input.bonus_tokens.tolist(), FIRST_TOKENS)
        # As after a STANDALONE prefill without PD: no hidden states to draft from.
        self.assertIsNone(draft_input.hidden_states)

    def test_eagle_hands_over_its_proposal_and_hidden_states(self):
        handed = draft_extend_output(True)
        with self.served("EAGLE"):
            _, buffers = self.hand_off("EAGLE", handed)
            draft_input = self.decode_draft_input("EAGLE", buffers)
        self.assertEqual(draft_input.topk_index.tolist(), PROPOSALS)
        self.assertTrue(torch.equal(draft_input.hidden_states, handed.hidden_states))


if __name__ == "__main__":
    unittest.main()
