"""STANDALONE under PD disaggregation: the prefill server hands over the draft proposal of
its draft extend, and the decode server's first draft input is that proposal, as EAGLE's.
"""

import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.disaggregation import prefill
from sglang.srt.disaggregation.utils import MetadataBuffers
from sglang.srt.speculative import eagle_disaggregation
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

FIRST_TOKENS = [91, 4]
PROPOSALS = [[17], [23]]
HIDDEN_SIZE = 16
NONE_FIELDS = (
    "discard_output_reason to_finish finished_reason grammar output_topk_p "
    "output_topk_index hidden_states_tensor output_dsa_topk_indices multimodal_inputs"
)
ZERO_FIELDS = (
    "pending_bootstrap return_sampling_mask return_logprob inflight_middle_chunks "
    "cached_tokens cached_tokens_device cached_tokens_host cached_tokens_storage"
)
SPEC = SimpleNamespace(
    speculative_eagle_topk=1,
    speculative_num_steps=3,
    enable_multi_layer_eagle=False,
    speculative_use_rejection_sampling=False,
)


def _request(index):
    # A request whose prefill finished, with the fields the hand-off reads.
    request = SimpleNamespace(
        rid=f"r{index}",
        time_stats=mock.MagicMock(),
        output_ids=[],
        metadata_buffer_index=index,
        bootstrap_room=1000 + index,
        get_mm_token_counts=lambda: (0, 0, 0),
    )
    for name in NONE_FIELDS.split():
        setattr(request, name, None)
    for name in ZERO_FIELDS.split():
        setattr(request, name, 0)
    return request


class TestStandaloneDraftAcrossPD(CustomTestCase):
    def hand_off(self, algorithm, hidden_states):
        """Two requests through the prefill server's hand-off into the metadata buffers,
        then the decode server's first draft input from those buffers."""
        requests = [_request(i) for i in range(len(FIRST_TOKENS))]
        buffers = MetadataBuffers(
            size=4,
            hidden_size=HIDDEN_SIZE,
            hidden_states_dtype=torch.float32,
            max_sampling_mask_tokens=16,
        )
        spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
        scheduler = mock.MagicMock(spec_algorithm=spec_algorithm)
        scheduler.send_kv_chunk.side_effect = lambda req, **_: buffers.set_buf(req)
        proposal = EagleDraftInput(
            topk_p=torch.full((2, 1), 0.5),
            topk_index=torch.tensor(PROPOSALS),
            hidden_states=hidden_states,
            bonus_tokens=torch.tensor(FIRST_TOKENS),
        )
        batch = SimpleNamespace(
            reqs=requests,
            spec_info=proposal,
            prefill_stats=None,
            dp_cooperation_info=None,
        )
        result = mock.MagicMock(
            can_run_cuda_graph=False,
            logits_output=None,
            next_token_ids=torch.tensor(FIRST_TOKENS),
            extend_input_len_per_req=None,
            extend_logprob_start_len_per_req=None,
            copy_done=None,
            next_draft_input=proposal,
        )
        policy = SimpleNamespace(disaggregation_decode_allocation_policy=None)
        with mock.patch.object(prefill, "get_disagg", return_value=policy):
            prefill.SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill(
                scheduler, batch, result
            )
        decoded = []
        for index in range(len(FIRST_TOKENS)):
            topk_p, topk_index, hidden = buffers.get_buf(index)[9:12]
            decoded.append(
                SimpleNamespace(
                    output_topk_p=topk_p,
                    output_topk_index=topk_index,
                    hidden_states_tensor=hidden,
                    output_dsa_topk_indices=None,
                )
            )
        batch = SimpleNamespace(
            reqs=decoded,
            device="cpu",
            enable_overlap=False,
            model_config=SimpleNamespace(hf_config=SimpleNamespace(), vocab_size=128),
        )
        with mock.patch.object(eagle_disaggregation, "get_spec", return_value=SPEC):
            return spec_algorithm.build_disagg_draft_input(
                batch, torch.tensor(FIRST_TOKENS), future_map=None
            )

    def test_standalone_decode_drafts_from_the_prefill_proposal(self):
        draft_input = self.hand_off("STANDALONE", hidden_states=None)
        self.assertIsInstance(draft_input, EagleDraftInput)
        self.assertEqual(draft_input.topk_index.tolist(), PROPOSALS)
        self.assertEqual(draft_input.bonus_tokens.tolist(), FIRST_TOKENS)
        # STANDALONE drafts from tokens alone, as after its own prefill.
        self.assertIsNone(draft_input.hidden_states)

    def test_eagle_hands_over_its_proposal_and_hidden_states(self):
        hidden_states = torch.arange(2.0 * HIDDEN_SIZE).view(2, HIDDEN_SIZE)
        draft_input = self.hand_off("EAGLE", hidden_states)
        self.assertEqual(draft_input.topk_index.tolist(), PROPOSALS)
        self.assertTrue(torch.equal(draft_input.hidden_states, hidden_states))


if __name__ == "__main__":
    unittest.main()
