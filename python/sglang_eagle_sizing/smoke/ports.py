"""CPU ports of the three GPU kernels EAGLE needs to serve, written from what they compute.

SGLang 0.5.11 calls sgl-kernel's ``build_tree_kernel_efficient`` and ``verify_tree_greedy``
and a Triton ``assign_extend_cache_locs`` only on CUDA/HIP/MUSA (or NPU); on a CPU the first is
an unbound name and the other two do nothing. These are plain-PyTorch equivalents for the
smoke harness's stand-ins (``standins/sitecustomize.py``). They are slow (Python loops over a
handful of draft tokens) and test-only: nothing here ships in a fork.

The draft tree. A request drafts ``n = num_verify_tokens`` tokens: position 0 is the verified
token (the root), positions ``1..n-1`` the draft tokens selected by ``top_scores_index`` (sorted
ascending). A selected score index ``j`` names its parent through ``j // topk``: 0 is the root,
``p > 0`` is ``parent_list[b, p]``, the score index of the parent, which must itself be
selected.
"""

from __future__ import annotations

import warnings

import torch

#: ``eagle_utils.TreeMaskMode`` values the ports understand (FULL_MASK, QLEN_ONLY)
FULL_MASK, QLEN_ONLY = 0, 1


#: the parent of a draft token whose parent was not selected (see ``tree_parents``)
ORPHAN = -2


def tree_parents(parent_list: list[int], selected: list[int], topk: int) -> list[int]:
    """For one request: the tree position of each position's parent (-1 for the root).

    A draft token whose parent was not selected (scores can tie, e.g. at 0.0, and top-k
    then keeps a child of a token it dropped) gets ``ORPHAN``: like sgl-kernel, which warns
    and leaves it unlinked, the port keeps it out of the tree, so verification never
    reaches it (nor anything below it).
    """
    parents = [-1]
    for score_index in selected:
        parent_slot = score_index // topk
        if parent_slot == 0:
            parents.append(0)
            continue
        parent_score = parent_list[parent_slot]
        if parent_score not in selected:
            warnings.warn(
                f"invalid draft tree: score index {score_index} has parent {parent_score}, "
                f"which is not selected ({selected}); left out of the tree"
            )
            parents.append(ORPHAN)
            continue
        parents.append(selected.index(parent_score) + 1)
    return parents


def build_tree(
    parent_list: torch.Tensor, selected_scores: torch.Tensor, seq_lens: torch.Tensor,
    tree_mask: torch.Tensor, positions: torch.Tensor, index: torch.Tensor,
    first_child: torch.Tensor, next_sibling: torch.Tensor,
    topk: int, spec_steps: int, num_verify_tokens: int, tree_mask_mode: int,
) -> None:
    """Fill ``tree_mask``, ``positions``, ``index``, ``first_child`` and ``next_sibling`` in
    place (``selected_scores`` is SGLang's ``top_scores_index``).

    - ``positions``: the request's length plus the token's depth in the tree;
    - ``index[b, i]`` (SGLang's ``retrieve_index``): ``b * n + i``, the token's row in the
      verify batch;
    - ``first_child[b, i]`` (``retrieve_next_token``): the first child of ``i`` (lowest
      position), else -1;
    - ``next_sibling[b, i]`` (``retrieve_next_sibling``): the next child of ``i``'s parent,
      else -1;
    - ``tree_mask``: row ``i`` of request ``b`` lets token ``i`` see the prefix (left as the
      caller filled it: True), the root, and its ancestors and itself among the drafts.
      FULL_MASK rows are ``seq_len + n`` wide, one block per request after the blocks of
      the requests before it; QLEN_ONLY rows are ``n`` wide.
    """
    if tree_mask_mode not in (FULL_MASK, QLEN_ONLY):
        raise NotImplementedError(f"tree mask mode {tree_mask_mode} has no CPU port")
    n = num_verify_tokens
    lens = [int(x) for x in seq_lens.tolist()]
    parent_rows = parent_list.tolist()
    selected_rows = selected_scores.tolist()
    block_start = 0
    for b, seq_len in enumerate(lens):
        parents = tree_parents(
            [int(x) for x in parent_rows[b]] if parent_rows else [],
            [int(x) for x in selected_rows[b]],
            topk,
        )
        width = seq_len + n if tree_mask_mode == FULL_MASK else n
        first_draft_column = seq_len if tree_mask_mode == FULL_MASK else 0
        for i in range(n):
            ancestors = set()
            node, depth = i, 0
            while node > 0:
                ancestors.add(node)
                node = parents[node]
                depth += 1
            # an orphan (and what hangs below it) sees the root and its own chain
            positions[b * n + i] = seq_len + depth
            index[b, i] = b * n + i
            row = block_start + i * width + first_draft_column
            tree_mask[row] = True  # the root
            for k in range(1, n):
                tree_mask[row + k] = k in ancestors
        for i in range(n):
            children = [k for k in range(1, n) if parents[k] == i]
            first_child[b, i] = children[0] if children else -1
            for child, following in zip(children, children[1:] + [-1]):
                next_sibling[b, child] = following
        next_sibling[b, 0] = -1
        block_start += n * width


def verify_greedy(
    predicts: torch.Tensor, accept_index: torch.Tensor, accepted_counts: torch.Tensor,
    candidates: torch.Tensor, index: torch.Tensor, first_child: torch.Tensor,
    next_sibling: torch.Tensor, target: torch.Tensor,
) -> None:
    """Greedy tree verification, in place.

    Walk down the tree from the root: at each level take the first child (in sibling order)
    whose draft token equals the target's greedy token at the last accepted position; stop
    when none does or ``accept_index`` is full. ``accept_index[b]`` lists the accepted rows
    (root first), ``accepted_counts[b]`` how many drafts were accepted, and ``predicts`` holds
    the target's token at every accepted row (the last one is the bonus token).
    """
    flat_target = target.reshape(-1).tolist()
    candidate_rows = candidates.tolist()
    index_rows = index.tolist()
    next_rows = first_child.tolist()
    sibling_rows = next_sibling.tolist()
    levels = accept_index.shape[1]
    for b in range(candidates.shape[0]):
        last = index_rows[b][0]
        accept_index[b, 0] = last
        count = 0
        node = 0
        for _ in range(1, levels):
            node = next_rows[b][node]
            while node != -1 and candidate_rows[b][node] != flat_target[last]:
                node = sibling_rows[b][node]
            if node == -1:
                break
            predicts[last] = flat_target[last]
            count += 1
            last = index_rows[b][node]
            accept_index[b, count] = last
        accepted_counts[b] = count
        predicts[last] = flat_target[last]


def extend_cache_locs(
    pool_rows: torch.Tensor, req_to_token: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor
) -> torch.Tensor:
    """The KV-cache slots of each request's ``[start, end)`` positions, requests in order."""
    pieces = [
        req_to_token[int(pool), int(start) : int(end)]
        for pool, start, end in zip(pool_rows.tolist(), starts.tolist(), ends.tolist())
    ]
    if not pieces:
        return torch.empty((0,), dtype=torch.int64, device=req_to_token.device)
    return torch.cat(pieces).to(torch.int64)
