"""What an SGLang 0.5.23-family tree's target captures for an EAGLE-3 drafter, against
transformers' ``output_hidden_states`` of the same target on the same tokens (float32, CPU).

Runs in ``.venv-0.5.23`` (transformers 5.19), inside one SGLang tree (first on sys.path):

    python capture_probe_0_5_23.py WORKDIR

It builds a tiny Llama target with transformers (random weights, norm weights away from 1),
saves it with ``save_pretrained`` and runs it with ``output_hidden_states=True``: the oracle
(``hidden_states[k]``: 0 the embeddings, k the output of layer k - 1). Then, per drafter config
of ``DRAFTERS`` (config only: the drafter never runs), the tree's own start-up decides what the
target captures: ``ServerArgs`` for the pair, ``_resolve_eagle_aux_hidden_state`` (the layer
ids the target asks for) and the target's ``set_eagle3_layers_to_capture``; the tree's
``LlamaForCausalLM`` is built from the saved target, ``load_weights`` fed by SGLang's own
safetensors iterator, and its real ``forward`` runs as ``EXTEND`` on the tokens
(``RadixAttention`` on ``TorchNativeAttnBackend`` with real KV pools, ``LogitsProcessor`` with
``CaptureHiddenMode.FULL``). Each captured chunk is matched to the oracle's hidden states.

Prints ``PROBE-JSON {...}``: per drafter the layer ids the target asked for, and per captured
chunk the index ``k`` of transformers' ``hidden_states`` it equals (None: none of them) and the
largest difference from the one the drafter's config means.

What stands in: ``sgl_kernel`` (SGLang's own CPU stub), and what ``cpu_forward_0_5_23.py``
says (the parallel groups, RoPE's CPU flag).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (SGLang imports it)

import json
import sys
from pathlib import Path

from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

import torch  # noqa: E402
import transformers  # noqa: E402
from cpu_forward_0_5_23 import forward_one_sequence, one_cpu_rank  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (  # noqa: E402
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator  # noqa: E402
from sglang.srt.models.llama import LlamaForCausalLM  # noqa: E402
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402
from sglang.test.test_utils import publish_build_topology  # noqa: E402

HIDDEN = 64
LAYERS = 8
TOKENS = [5, 77, 200, 31, 9, 40, 41, 142]
TARGET = dict(
    architectures=["LlamaForCausalLM"],
    hidden_size=HIDDEN,
    intermediate_size=128,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)
DRAFT = {
    "model_type": "llama",
    **{k: v for k, v in TARGET.items() if k != "num_hidden_layers"},
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "target_hidden_size": HIDDEN,
    "torch_dtype": "float32",
}
#: the speculators format's config.json: no model_type, the decoder layer's config nested
SPECULATORS = {
    "architectures": ["Eagle3DraftModel"],
    "speculators_model_type": "eagle3",
    "speculators_config": {
        "algorithm": "eagle3",
        "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "target"},
    },
    "transformer_layer_config": {
        **{k: v for k, v in DRAFT.items() if k not in ("architectures", "target_hidden_size")},
        "model_type": "llama",
    },
    "draft_vocab_size": 96,
    "target_hidden_size": HIDDEN,
}
#: drafter -> (its config.json, the indices into output_hidden_states its ids mean).
#: ``eagle_config``'s id i is SGLang's, layer i's output, hidden_states[i + 1]; the top
#: level's id k is vLLM's, hidden_states[k], as is the speculators library's ("speculators
#: uses the layer id directly", speculators/convert/dflash/converter.py); no ids: SGLang's
#: default layers, the inputs of layers 2, L // 2 and L - 3
DRAFTERS = {
    "ids in eagle_config": (
        {**DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 5]}},
        [1, 4, 6],
    ),
    "ids at the top level": (
        {**DRAFT, "eagle_aux_hidden_state_layer_ids": [1, 4, 6, 7]},
        [1, 4, 6, 7],
    ),
    "no ids": (DRAFT, [2, LAYERS // 2, LAYERS - 3]),
    "speculators format": (
        {**SPECULATORS, "eagle_aux_hidden_state_layer_ids": [1, 4, 6]},
        [1, 4, 6],
    ),
}


def save_target(folder: Path) -> tuple:
    """The target saved by transformers, and its ``output_hidden_states`` on ``TOKENS``."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**TARGET, dtype="float32")
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    with torch.no_grad():
        states = model(torch.tensor([TOKENS]), output_hidden_states=True).hidden_states
    return tuple(s[0] for s in states)


def asked_layer_ids(target: Path, draft: Path):
    """The layer ids the tree's target start-up asks its model to capture, and the
    hidden-state indices it hands on as they are (a tree with that path; else None)."""
    server_args = ServerArgs(
        model_path=str(target),
        device="cpu",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft),
        skip_tokenizer_init=True,
    )
    with use_context(create_context(server_args, role="probe", ranks=SpawnRanks(world_rank=0))):
        capture = SpecAuxHiddenStateConfig()
        _resolve_eagle_aux_hidden_state(
            config=capture,
            server_args=server_args,
            model_config=ModelConfig.from_server_args(server_args),
            spec_algorithm=SpeculativeAlgorithm.EAGLE3,
            is_draft_worker=False,
        )
    return capture.eagle_aux_hidden_state_layer_ids, getattr(
        capture, "eagle_aux_hidden_state_indices", None
    )


def captured(target: Path, layer_ids, hidden_state_ids=None) -> torch.Tensor:
    """The hidden states the tree's target hands the drafter: (tokens, chunks * HIDDEN)."""
    config = transformers.AutoConfig.from_pretrained(target)
    with one_cpu_rank():
        model = LlamaForCausalLM(config).eval()
    model.load_weights(safetensors_weights_iterator([str(target / "model.safetensors")]))
    if hidden_state_ids is not None:  # the tree hands indices on as they are
        model.set_eagle3_hidden_states_to_capture(hidden_state_ids)
    else:
        model.set_eagle3_layers_to_capture(layer_ids)
    output, _ = forward_one_sequence(
        model, torch.tensor(TOKENS), ForwardMode.EXTEND, kv_heads=config.num_key_value_heads,
        head_dim=HIDDEN // config.num_attention_heads, layers=LAYERS,
    )
    return output.hidden_states


def main():
    work = Path(sys.argv[1])
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    publish_build_topology(device="cpu", tp_size=1, pp_size=1)
    target = work / "target"
    states = save_target(target)
    out = {"drafters": {}}
    for name, (config, meant) in DRAFTERS.items():
        draft = work / name.replace(" ", "-")
        draft.mkdir(parents=True)
        (draft / "config.json").write_text(json.dumps(config))
        try:
            layer_ids, hidden_state_ids = asked_layer_ids(target, draft)
            got = captured(target, layer_ids, hidden_state_ids)
        except Exception as exc:  # reported: a tree may refuse the drafter
            out["drafters"][name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        chunks = got.split(HIDDEN, dim=-1)
        equals = [
            next((k for k, s in enumerate(states) if torch.allclose(c, s, atol=1e-5)), None)
            for c in chunks
        ]
        diff = (
            max((c - states[k]).abs().max().item() for c, k in zip(chunks, meant))
            if len(chunks) == len(meant)
            else None
        )
        out["drafters"][name] = {
            "layer_ids": layer_ids,
            "hidden_state_ids": hidden_state_ids,
            "captured": equals,
            "meant": meant,
            "max_diff_from_meant": diff,
        }
    print("PROBE-JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
