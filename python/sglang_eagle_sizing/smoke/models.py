"""Tiny models the smoke harness builds itself: a tokenizer, a target and drafters.

Nothing is downloaded. Every model is an HF folder (``config.json``, ``model.safetensors``,
tokenizer files) that both SGLang and transformers load.

Random weights make every draft token wrong (accept length 1), so acceptance would go
untested. The weights here are crafted instead, from one random embedding table ``E``
(``vocab x hidden``, rows of RMS about 1):

- the **target** maps a token ``x`` mostly to ``x + 1``: its LM head row for ``y`` is
  ``E[y - 1]``, and its layers add small random updates that change some tokens, depending on
  the context;
- an **EAGLE-3 drafter** attends to its own position (queries and keys are the token's
  embedding, scaled), so its output carries ``E[t]`` for the token ``t`` it was given and its
  LM head guesses ``t + 1``; its ``fc`` keeps a share of one captured target layer, so which
  layers the target captures changes some guesses (and the accept length), never the tokens;
- an **EAGLE** (EAGLE-1) drafter: ``fc`` maps ``[E[t], h]`` to ``E[t]`` plus a share of ``h``;
  the target's LM head (shared) guesses ``t + 1``;
- a **STANDALONE** drafter: a one-layer Llama that maps ``x`` to ``x + 1`` exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

VOCAB = 512
HIDDEN = 64
HEADS = 4
INTERMEDIATE = 128


def embedding_table(seed: int, vocab: int = VOCAB, hidden: int = HIDDEN) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(vocab, hidden, generator=generator)


def write_tokenizer(folder: Path, vocab: int = VOCAB) -> None:
    """A word-level tokenizer: token ``i`` is the word ``t<i>``; built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="t0", bos_token="t1", eos_token="t2"
    )
    fast.save_pretrained(folder)


def _save(folder: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    write_tokenizer(folder, config["vocab_size"])
    return folder


@dataclass(frozen=True)
class TargetSpec:
    """A tiny dense target: ``architecture`` is LlamaForCausalLM, Qwen2ForCausalLM or
    Qwen3ForCausalLM."""

    architecture: str = "LlamaForCausalLM"
    hidden_size: int = HIDDEN
    num_layers: int = 4
    num_heads: int = HEADS
    num_kv_heads: int = 2
    dtype: str = "float32"
    #: scale of the random layer weights: how often attention changes ``x -> x + 1``
    perturbation: float = 0.32
    seed: int = 0

    @property
    def model_type(self) -> str:
        return {
            "LlamaForCausalLM": "llama",
            "Qwen2ForCausalLM": "qwen2",
            "Qwen3ForCausalLM": "qwen3",
            STEP3P5: "step3p5",
        }[self.architecture]

    @property
    def config_only(self) -> bool:
        """Served with ``--load-format dummy``: no weights are built (``step3p5_config``)."""
        return self.architecture == STEP3P5


#: The multi-layer EAGLE (MTP) target: 0.5.11 serves the MTP worker only for Step-3.5 and
#: MiMo-V2, whose own checkpoints carry the MTP layers (model_config.py renames the draft
#: architecture to Step3p5MTP); Step-3.5's config class is SGLang's own (no remote code)
STEP3P5 = "Step3p5ForCausalLM"
#: step3p5_mtp.py builds its MTP block with ``layer_id = 45  # FIXME`` and attends as layer
#: 45 - num_hidden_layers of the draft's one-layer pool: only a 45-layer target serves
STEP3P5_LAYERS = 45
#: entries of the per-layer lists: the target's layers and 3 MTP layers
STEP3P5_LIST = STEP3P5_LAYERS + 3


def step3p5_config(spec: TargetSpec) -> dict:
    """A tiny dense Step-3.5 config (``moe_layers_enum`` names no layer), alternating full
    and sliding-window attention as the real model does, with 3 MTP layers."""
    n = STEP3P5_LIST
    return {
        "architectures": [STEP3P5],
        "model_type": "step3p5",
        "hidden_size": spec.hidden_size,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": STEP3P5_LAYERS,
        "num_nextn_predict_layers": 3,
        "num_attention_heads": spec.num_heads,
        "num_attention_groups": spec.num_kv_heads,
        "attention_other_setting": {
            "num_attention_heads": spec.num_heads,
            "num_attention_groups": spec.num_kv_heads,
        },
        "head_dim": spec.hidden_size // spec.num_heads,
        "layer_types": ["full_attention", "sliding_attention"] * (n // 2),
        "sliding_window": 256,
        "yarn_only_types": [],
        "rope_theta": [10000.0] * n,
        "rope_scaling": None,
        "partial_rotary_factors": [1.0] * n,
        "swiglu_limits": [0.0] * n,
        "swiglu_limits_shared": [0.0] * n,
        "use_head_wise_attn_gate": False,
        "moe_layers_enum": str(10 * n),
        "moe_num_experts": 4,
        "moe_top_k": 2,
        "moe_intermediate_size": INTERMEDIATE // 4,
        "moe_router_scaling_factor": 1.0,
        "use_moe_router_bias": True,
        "need_fp32_gate": False,
        "share_expert_dims": spec.hidden_size,
        "vocab_size": VOCAB,
        "max_seq_len": 512,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "scale_emb": 1.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": spec.dtype,
    }


def target_config(spec: TargetSpec) -> dict:
    config = {
        "architectures": [spec.architecture],
        "model_type": spec.model_type,
        "hidden_size": spec.hidden_size,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.hidden_size // spec.num_heads,
        "vocab_size": VOCAB,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": spec.dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if spec.model_type == "qwen2":
        config["attention_bias"] = True
    if spec.model_type == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    return config


def target_tensors(spec: TargetSpec) -> dict[str, torch.Tensor]:
    """Weights by HF name: ``E`` in, ``E`` shifted by one out, small random layers."""
    E = embedding_table(spec.seed, hidden=spec.hidden_size)
    generator = torch.Generator().manual_seed(spec.seed + 1)
    h, hd = spec.hidden_size, spec.hidden_size // spec.num_heads
    q_out, kv_out = spec.num_heads * hd, spec.num_kv_heads * hd

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * spec.perturbation / shape[-1] ** 0.5

    tensors = {
        "model.embed_tokens.weight": E,
        "lm_head.weight": torch.roll(E, shifts=1, dims=0),
        "model.norm.weight": torch.ones(h),
    }
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": torch.ones(h),
                p + "post_attention_layernorm.weight": torch.ones(h),
                p + "self_attn.q_proj.weight": rand(q_out, h) * 4,
                p + "self_attn.k_proj.weight": rand(kv_out, h) * 4,
                p + "self_attn.v_proj.weight": rand(kv_out, h) * 4,
                p + "self_attn.o_proj.weight": rand(h, q_out) * 4,
                p + "mlp.gate_proj.weight": rand(INTERMEDIATE, h),
                p + "mlp.up_proj.weight": rand(INTERMEDIATE, h),
                p + "mlp.down_proj.weight": rand(h, INTERMEDIATE),
            }
        )
        if spec.model_type == "qwen2":
            for name, size in (("q", q_out), ("k", kv_out), ("v", kv_out)):
                tensors[p + f"self_attn.{name}_proj.bias"] = torch.zeros(size)
        if spec.model_type == "qwen3":
            tensors[p + "self_attn.q_norm.weight"] = torch.ones(hd)
            tensors[p + "self_attn.k_norm.weight"] = torch.ones(hd)
    dtype = getattr(torch, spec.dtype)
    return {k: v.to(dtype) for k, v in tensors.items()}


def build_target(spec: TargetSpec, folder: Path) -> Path:
    if spec.config_only:
        folder.mkdir(parents=True, exist_ok=True)
        write_tokenizer(folder, VOCAB)
        (folder / "config.json").write_text(json.dumps(step3p5_config(spec), indent=2) + "\n")
        return folder
    return _save(folder, target_config(spec), target_tensors(spec))


@dataclass(frozen=True)
class DrafterSpec:
    """A tiny drafter for a ``TargetSpec``.

    ``kind``: ``eagle3`` (LlamaForCausalLMEagle3), ``eagle`` (LlamaForCausalLMEagle) or
    ``standalone`` (LlamaForCausalLM). For EAGLE-3: ``aux_layer_ids`` and where they are
    declared (``ids_at``: ``eagle_config`` or ``top``), ``use_aux_hidden_state`` (None: not
    declared), ``fc_chunk``: which captured layer ``fc`` keeps a share of.
    """

    kind: str = "eagle3"
    dtype: str = "float32"
    aux_layer_ids: tuple[int, ...] | None = (0, 1, 2)
    ids_at: str = "eagle_config"
    use_aux_hidden_state: bool | None = None
    fc_chunk: int = 0
    #: the share of the target's hidden state left in the drafter's first output
    aux_share: float = 0.3
    #: extra top-level config keys (e.g. a refused ``num_aux_hidden_states``)
    extra: dict = field(default_factory=dict)
    #: the drafter's width (None: the target's); other widths keep a pair's ratio
    hidden_size: int | None = None
    #: declared in the config; an EAGLE-3 drafter with more than one is refused by SGLang
    num_layers: int = 1
    #: EAGLE-3 draft vocabulary (None: the target's); smaller ones get a ``d2t`` table
    draft_vocab_size: int | None = None
    #: whether the EAGLE-3 config declares ``target_hidden_size``
    declare_target_hidden_size: bool = True


def drafter_config(spec: DrafterSpec, target: TargetSpec) -> dict:
    base = target_config(target)
    width = spec.hidden_size or target.hidden_size
    config = {
        **base,
        "hidden_size": width,
        "head_dim": width // target.num_heads,
        "num_hidden_layers": spec.num_layers,
        "num_key_value_heads": target.num_heads,
        "torch_dtype": spec.dtype,
    }
    if spec.kind == "eagle3":
        config["architectures"] = ["LlamaForCausalLMEagle3"]
        config["model_type"] = "llama"
        config["draft_vocab_size"] = spec.draft_vocab_size or VOCAB
        if spec.declare_target_hidden_size:
            config["target_hidden_size"] = target.hidden_size
        eagle_config: dict = {}
        if spec.aux_layer_ids is not None:
            if spec.ids_at == "top":
                config["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layer_ids)
            else:
                eagle_config["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layer_ids)
        if spec.use_aux_hidden_state is not None:
            eagle_config["use_aux_hidden_state"] = spec.use_aux_hidden_state
        if eagle_config:
            config["eagle_config"] = eagle_config
    elif spec.kind == "eagle":
        config["architectures"] = ["LlamaForCausalLMEagle"]
        config["model_type"] = "llama"
    elif spec.kind == "standalone":
        config["architectures"] = ["LlamaForCausalLM"]
        config["model_type"] = "llama"
    else:
        raise ValueError(f"unknown drafter kind {spec.kind!r}")
    config.update(spec.extra)
    return config


def _zero_attention_and_mlp(prefix: str, hidden: int) -> dict[str, torch.Tensor]:
    """A decoder layer's attention and MLP weights, all zero: the layer adds nothing to the
    residual stream, so the drafter's guess is decided by its ``fc`` and embeddings."""
    h = hidden
    return {
        prefix + "self_attn.q_proj.weight": torch.zeros(h, h),
        prefix + "self_attn.k_proj.weight": torch.zeros(h, h),
        prefix + "self_attn.v_proj.weight": torch.zeros(h, h),
        prefix + "self_attn.o_proj.weight": torch.zeros(h, h),
        prefix + "mlp.gate_proj.weight": torch.zeros(INTERMEDIATE, h),
        prefix + "mlp.up_proj.weight": torch.zeros(INTERMEDIATE, h),
        prefix + "mlp.down_proj.weight": torch.zeros(h, INTERMEDIATE),
    }


def drafter_tensors(spec: DrafterSpec, target: TargetSpec) -> dict[str, torch.Tensor]:
    h = spec.hidden_size or target.hidden_size
    # the target's embedding, cut or padded to the drafter's width
    E = embedding_table(target.seed, hidden=target.hidden_size) @ torch.eye(target.hidden_size, h)
    eye = torch.eye(h)
    zeros = torch.zeros
    if spec.kind == "standalone":
        p = "model.layers.0."
        tensors = {
            "model.embed_tokens.weight": E,
            "lm_head.weight": torch.roll(E, shifts=1, dims=0),
            "model.norm.weight": torch.ones(h),
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            **_zero_attention_and_mlp(p, h),
        }
    elif spec.kind == "eagle":
        # fc([E[t], h]) = E[t] + share * h / rms(h) (about); one zero layer after it
        p = "layers.0."
        fc = torch.cat([eye, eye * spec.aux_share * 0.1], dim=1)
        tensors = {
            "embed_tokens.weight": E,
            "fc.weight": fc,
            "fc.bias": zeros(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            **_zero_attention_and_mlp(p, h),
        }
    else:
        # Attention reads [norm(E[t]), norm(hidden)]: q = k = 3 * norm(E[t]) (each token
        # attends to itself), v = norm(E[t]) - norm(hidden), o = A * v. The output
        # residual + A * v keeps E[t] and cancels most of the incoming hidden state;
        # fc scales the captured chunk so that aux_share of it is left.
        amplitude = 4.0
        q = torch.cat([eye * 3.0, zeros(h, h)], dim=1)
        v = torch.cat([eye, -eye], dim=1)
        th = target.hidden_size
        fc = zeros(h, 3 * th)
        # residual F * h plus attention -A * h / rms(h) * rms-ish: about (F - A) * h
        fc[:, spec.fc_chunk * th : (spec.fc_chunk + 1) * th] = torch.eye(h, th) * amplitude * (
            1.0 + spec.aux_share
        )
        draft_vocab = spec.draft_vocab_size or VOCAB
        # hot tokens: the first draft_vocab ones (d2t maps draft id i to i + d2t[i])
        head = torch.roll(E, shifts=1, dims=0)[:draft_vocab]
        p = "midlayer."
        tensors = {
            "embed_tokens.weight": E,
            "fc.weight": fc,
            "norm.weight": torch.ones(h),
            "lm_head.weight": head,
            p + "input_layernorm.weight": torch.ones(h),
            p + "hidden_norm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            p + "self_attn.q_proj.weight": q,
            p + "self_attn.k_proj.weight": q.clone(),
            p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": eye * amplitude,
            p + "mlp.gate_proj.weight": zeros(INTERMEDIATE, h),
            p + "mlp.up_proj.weight": zeros(INTERMEDIATE, h),
            p + "mlp.down_proj.weight": zeros(h, INTERMEDIATE),
        }
        if draft_vocab != VOCAB:
            tensors["d2t"] = torch.zeros(draft_vocab, dtype=torch.int64)
    dtype = getattr(torch, spec.dtype)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}


def build_drafter(spec: DrafterSpec, target: TargetSpec, folder: Path) -> Path:
    return _save(folder, drafter_config(spec, target), drafter_tensors(spec, target))
