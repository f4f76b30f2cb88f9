"""The smoke harness's CPU ports of sgl-kernel's tree build and greedy verify (and of the v2
worker's cache-location kernel), against small cases worked out by hand. No server, no SGLang.
"""

from __future__ import annotations

import pytest
import torch
from sglang_eagle_sizing.smoke import ports

T, F = True, False


def build(parent_list, selected, seq_lens, topk, steps, n, mode):
    bs = len(seq_lens)
    if mode == ports.FULL_MASK:
        mask = torch.full((sum(seq_lens) * n + n * n * bs,), True)
    else:
        mask = torch.full((n * n * bs,), True)
    positions = torch.empty(bs * n, dtype=torch.long)
    retrieve = torch.full((3, bs, n), -1, dtype=torch.long)
    ports.build_tree(
        torch.tensor(parent_list, dtype=torch.long),
        torch.tensor(selected, dtype=torch.long),
        torch.tensor(seq_lens, dtype=torch.long),
        mask, positions, retrieve[0], retrieve[1], retrieve[2], topk, steps, n, mode,
    )
    return mask, positions, retrieve


def test_chain_topk1_full_mask():
    # topk 1, 3 steps: score indices 0, 1, 2, one per step; parent_list [-1, 0, 1].
    mask, positions, (index, next_token, sibling) = build(
        [[-1, 0, 1]], [[0, 1, 2]], [5], topk=1, steps=3, n=4, mode=ports.FULL_MASK
    )
    assert positions.tolist() == [5, 6, 7, 8]
    assert index.tolist() == [[0, 1, 2, 3]]
    assert next_token.tolist() == [[1, 2, 3, -1]]
    assert sibling.tolist() == [[-1, -1, -1, -1]]
    rows = mask.view(4, 9).tolist()
    prefix = [T] * 5
    assert rows == [
        prefix + [T, F, F, F],
        prefix + [T, T, F, F],
        prefix + [T, T, T, F],
        prefix + [T, T, T, T],
    ]


def test_tree_topk2_qlen_only_two_requests():
    # topk 2, 2 steps: step 0 scores 0, 1 (children of the root); step 1 scores 2..5, whose
    # parent slot j // 2 is 1 (score 0) for 2, 3 and 2 (score 1) for 4, 5.
    # Request 0 selects [0, 1, 3]: root -> {1, 2}, 1 -> {3}.
    # Request 1 selects [1, 4, 5]: root -> {1}, 1 -> {2, 3}.
    mask, positions, (index, next_token, sibling) = build(
        [[-1, 0, 1], [-1, 0, 1]], [[0, 1, 3], [1, 4, 5]], [3, 7],
        topk=2, steps=2, n=4, mode=ports.QLEN_ONLY,
    )
    assert positions.tolist() == [3, 4, 4, 5, 7, 8, 9, 9]
    assert index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert next_token.tolist() == [[1, 3, -1, -1], [1, 2, -1, -1]]
    assert sibling.tolist() == [[-1, 2, -1, -1], [-1, -1, 3, -1]]
    assert mask.view(2, 4, 4).tolist() == [
        [[T, F, F, F], [T, T, F, F], [T, F, T, F], [T, T, F, T]],
        [[T, F, F, F], [T, T, F, F], [T, T, T, F], [T, T, F, T]],
    ]


def test_full_mask_second_request_block_follows_the_first():
    mask, _, _ = build(
        [[-1, 0], [-1, 0]], [[0], [0]], [2, 3], topk=1, steps=1, n=2, mode=ports.FULL_MASK
    )
    # request 0: 2 rows of 2 + 2; request 1: 2 rows of 3 + 2
    assert mask[:8].view(2, 4).tolist() == [[T, T, T, F], [T, T, T, T]]
    assert mask[8:].view(2, 5).tolist() == [[T, T, T, T, F], [T, T, T, T, T]]


def test_a_token_whose_parent_is_not_selected_is_left_out_and_never_accepted():
    # topk 2: scores 4 and 5 are children of score 1, which is not selected (top-k over
    # tied scores can do that); like sgl-kernel (a warning, no link) they stay unreachable.
    with pytest.warns(UserWarning, match="not selected"):
        tree = build([[-1, 0, 1]], [[0, 4, 5]], [3], topk=2, steps=2, n=4, mode=ports.QLEN_ONLY)
    _, positions, (_, next_token, sibling) = tree
    assert next_token.tolist() == [[1, -1, -1, -1]]
    assert sibling.tolist() == [[-1, -1, -1, -1]]
    # the target wants the orphan's token after the root: nothing is accepted
    predicts, accept_index, accepted = verify([[10, 11, 12, 13]], tree, [12, 0, 0, 0], 3)
    assert (accepted, accept_index, predicts) == ([0], [[0, -1, -1]], [12, -7, -7, -7])


def verify(candidates, tree, target, levels):
    mask, positions, (index, next_token, sibling) = tree
    bs = len(candidates)
    predicts = torch.full((bs * len(candidates[0]),), -7, dtype=torch.int32)
    accept_index = torch.full((bs, levels), -1, dtype=torch.int32)
    accepted = torch.zeros((bs,), dtype=torch.int32)
    ports.verify_greedy(
        predicts, accept_index, accepted, torch.tensor(candidates), index, next_token,
        sibling, torch.tensor(target).reshape(bs, -1),
    )
    return predicts.tolist(), accept_index.tolist(), accepted.tolist()


CHAIN = ([[-1, 0, 1]], [[0, 1, 2]], [5], 1, 3, 4, ports.FULL_MASK)


def test_verify_chain_accepts_the_matching_prefix():
    # drafts 11, 12, 13 after root 10; the target says 11, 12, then 99: two accepted,
    # the bonus token 99 at row 2.
    predicts, accept_index, accepted = verify(
        [[10, 11, 12, 13]], build(*CHAIN), [11, 12, 99, 77], levels=4
    )
    assert accepted == [2]
    assert accept_index == [[0, 1, 2, -1]]
    assert predicts == [11, 12, 99, -7]


def test_verify_chain_all_accepted_and_none_accepted():
    predicts, accept_index, accepted = verify(
        [[10, 11, 12, 13]], build(*CHAIN), [11, 12, 13, 14], levels=4
    )
    assert (accepted, accept_index, predicts) == ([3], [[0, 1, 2, 3]], [11, 12, 13, 14])
    predicts, accept_index, accepted = verify(
        [[10, 11, 12, 13]], build(*CHAIN), [42, 12, 13, 14], levels=4
    )
    assert (accepted, accept_index, predicts) == ([0], [[0, -1, -1, -1]], [42, -7, -7, -7])


def test_verify_tree_takes_the_matching_sibling():
    # root -> {1: 11, 2: 12}, 1 -> {3: 13}. The target says 12 after the root: the second
    # child matches (the first does not); row 2 has no children, so 50 is the bonus token.
    tree = build([[-1, 0, 1]], [[0, 1, 3]], [3], 2, 2, 4, ports.QLEN_ONLY)
    predicts, accept_index, accepted = verify([[10, 11, 12, 13]], tree, [12, 0, 50, 0], 3)
    assert accepted == [1]
    assert accept_index == [[0, 2, -1]]
    assert predicts == [12, -7, 50, -7]


def test_verify_stops_when_accept_index_is_full():
    # a chain of 3 drafts but only 2 levels (1 draft) can be accepted
    predicts, accept_index, accepted = verify(
        [[10, 11, 12, 13]], build(*CHAIN), [11, 12, 13, 14], levels=2
    )
    assert (accepted, accept_index, predicts) == ([1], [[0, 1]], [11, 12, -7, -7])


def test_extend_cache_locs_concatenates_each_requests_range():
    req_to_token = torch.stack([torch.arange(10), torch.arange(100, 110)])
    out = ports.extend_cache_locs(
        torch.tensor([1, 0]), req_to_token, torch.tensor([2, 5]), torch.tensor([4, 8])
    )
    assert out.tolist() == [102, 103, 5, 6, 7]
    assert out.dtype == torch.int64


PROBE = r"""
import torch
from sglang.srt.speculative import eagle_utils
from sglang.srt.speculative.eagle_info_v2 import assign_extend_cache_locs_func

# SGLang's own tree build (it calls sgl-kernel's op, which the stand-in binds to the port)
mask, positions, index, first, sibling, tokens = eagle_utils.build_tree_kernel_efficient(
    torch.tensor([10]), torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]),
    torch.tensor([[11, 12, 13]]), torch.tensor([5]), 5, 1, 3, 4,
)
predicts = torch.full((4,), -7, dtype=torch.int32)
accept_index = torch.full((1, 4), -1, dtype=torch.int32)
accepted = torch.zeros((1,), dtype=torch.int32)
eagle_utils.verify_tree_greedy_func(
    predicts=predicts, accept_index=accept_index, accept_token_num=accepted,
    candidates=tokens.reshape(1, 4), retrieve_index=index, retrieve_next_token=first,
    retrieve_next_sibling=sibling, target_predict=torch.tensor([[11, 12, 99, 77]]), topk=1,
)
locs = assign_extend_cache_locs_func(
    req_pool_indices=torch.tensor([1, 0]),
    req_to_token=torch.stack([torch.arange(10), torch.arange(100, 110)]),
    start_offset=torch.tensor([2, 5]), end_offset=torch.tensor([4, 8]),
    batch_size=2, draft_token_num=2, device="cpu",
)
print("PROBE", positions.tolist(), first.tolist(), accepted.tolist(), accept_index.tolist(),
      predicts.tolist(), locs.tolist())
"""


def test_stand_ins_bind_the_ports_where_sglang_calls_them(pristine_root):
    """SGLang 0.5.11's own ``build_tree_kernel_efficient``, ``verify_tree_greedy_func`` and
    ``assign_extend_cache_locs_func``, imported with the stand-ins on the path (as in a smoke
    server), give the hand-worked chain's answers; without them the tree build is a NameError."""
    import os
    import subprocess
    import sys

    from sglang_eagle_sizing.families import BEFORE_REFACTOR

    STANDINS = BEFORE_REFACTOR.standins

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(SGLANG_EAGLE_SIZING_SMOKE="1", SGLANG_USE_CPU_ENGINE="1")
    with_standins = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600,
        env={**env, "PYTHONPATH": os.pathsep.join([str(STANDINS), str(pristine_root)])},
    )
    line = next((l for l in with_standins.stdout.splitlines() if l.startswith("PROBE")), None)
    assert line is not None, with_standins.stderr[-3000:]
    assert line.split(" ", 1)[1] == (
        "[5, 6, 7, 8] [[1, 2, 3, -1]] [2] [[0, 1, 2, -1]] [11, 12, 99, -7] [102, 103, 5, 6, 7]"
    )
    without = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600,
        env={**env, "PYTHONPATH": str(pristine_root)},
    )
    assert without.returncode != 0
    assert "NameError" in without.stderr and "sgl_build_tree_kernel_efficient" in without.stderr
