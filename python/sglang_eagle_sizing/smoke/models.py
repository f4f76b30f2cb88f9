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

Those drafters guess ``t + 1`` from the token they are given: a target that captures the wrong
layers (or none) changes few guesses. The ``layers`` craft (``TargetSpec.craft``,
``DrafterSpec.craft``) makes acceptance hang on the captured layers instead:

- the embedding is a Fourier table ``F[x] = sqrt(2) [1, cos(w_k x), sin(w_k x) ...]``
  (``fourier_table``: rows of RMS 1, a constant first coordinate), so that ``x -> x + 1`` is a
  rotation ``S`` (``shift_rotation``);
- each target layer ``i`` leaves the state ``M_i F[x]``, ``M_i`` a random rotation of its own
  (``layer_rotation``; the last layer's is the identity, so the target maps ``x`` to
  ``x + 1`` exactly): attention adds nothing (``o_proj`` is zero) and the MLP is linear
  (its gate reads only the constant coordinate), ``M_i M_{i-1}^T - I``;
- the drafter's ``fc`` reads every captured chunk: ``sum_j B_j M_{l_j}^T c_j`` with
  ``sum_j B_j = S P`` (``P`` keeps the drafter's share of the frequencies) and each ``B_j``
  carrying a large random term that cancels only between the right chunks, so the first draft
  state is ``F[x + 1]`` when the target captured exactly the layers ``l_j`` the drafter names
  and noise when any chunk holds another layer; its mid layer adds nothing but a linear MLP
  ``S - I`` (each draft step moves one token on) and its LM head row ``y`` is ``F[y]``.

With the right capture every draft is accepted (accept length ``num_steps + 1`` but for a
batch's last verify); with any chunk from another layer almost none is (accept length 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
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


#: architecture -> model_type
MODEL_TYPES = {
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Gemma3ForCausalLM": "gemma3_text",
}


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
    #: ``shift`` (random layers over ``x -> x + 1``) or ``layers`` (each layer's state a
    #: rotation of its own, see the module's docstring)
    craft: str = "shift"

    @property
    def model_type(self) -> str:
        return {
            "LlamaForCausalLM": "llama",
            "Qwen2ForCausalLM": "qwen2",
            "Qwen3ForCausalLM": "qwen3",
            STEP3P5: "step3p5",
            **MODEL_TYPES,
        }[self.architecture]

    @property
    def own_class(self) -> bool:
        """A class with its own capture rule or architecture (``classes.py``), built by
        transformers."""
        return self.architecture in MODEL_TYPES

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


def _family_attention_extras(spec: TargetSpec, prefix: str) -> dict[str, torch.Tensor]:
    """What a layer of the target's family adds to Llama's: Qwen2's q/k/v biases (zero),
    Qwen3's q/k norms (one)."""
    hd = spec.hidden_size // spec.num_heads
    q_out, kv_out = spec.num_heads * hd, spec.num_kv_heads * hd
    if spec.model_type == "qwen2":
        sizes = (("q", q_out), ("k", kv_out), ("v", kv_out))
        return {f"{prefix}self_attn.{n}_proj.bias": torch.zeros(size) for n, size in sizes}
    if spec.model_type == "qwen3":
        return {f"{prefix}self_attn.{n}_norm.weight": torch.ones(hd) for n in "qk"}
    return {}


def _shifted_head(E: torch.Tensor) -> dict[str, torch.Tensor]:
    """Embedding ``E``, final norm one, lm_head ``E`` shifted by one token: ``x -> x + 1``."""
    return {
        "model.embed_tokens.weight": E,
        "lm_head.weight": torch.roll(E, shifts=1, dims=0),
        "model.norm.weight": torch.ones(E.shape[1]),
    }


def target_tensors(spec: TargetSpec) -> dict[str, torch.Tensor]:
    """Weights by HF name: ``E`` in, ``E`` shifted by one out, small random layers."""
    E = embedding_table(spec.seed, hidden=spec.hidden_size)
    generator = torch.Generator().manual_seed(spec.seed + 1)
    h, hd = spec.hidden_size, spec.hidden_size // spec.num_heads
    q_out, kv_out = spec.num_heads * hd, spec.num_kv_heads * hd

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * spec.perturbation / shape[-1] ** 0.5

    tensors = _shifted_head(E)
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
        tensors.update(_family_attention_extras(spec, p))
    dtype = getattr(torch, spec.dtype)
    return {k: v.to(dtype) for k, v in tensors.items()}


#: frequencies (cycles over the vocabulary) of the ``layers`` craft's Fourier table, first the
#: ones a 32-wide drafter keeps (15, one odd: ``x -> F[x]`` is one-to-one); chosen by a seeded
#: search for the lowest largest cosine between two rows (0.40 for the first 15, 0.33 for 31)
FREQUENCIES = (
    149, 105, 145, 114, 81, 53, 120, 194, 251, 71, 199, 11, 90, 103, 200,
    134, 180, 68, 208, 101, 25, 93, 29, 58, 146, 179, 45, 89, 156, 4, 73,
)
#: the value silu(gate) the linear MLPs of the ``layers`` craft scale by
GATE = 4.0


def _pairs(width: int) -> int:
    """How many (cos, sin) pairs a state of ``width`` holds after its constant coordinate."""
    return min((width - 1) // 2, len(FREQUENCIES))


def fourier_table(width: int, vocab: int = VOCAB) -> torch.Tensor:
    """``vocab x width``: row ``x`` is ``c [1, cos(w_1 x), sin(w_1 x), ...]`` padded with
    zeros, ``c`` making its RMS 1 (``sqrt(2)`` for an even width)."""
    x = torch.arange(vocab, dtype=torch.float64)
    table = torch.zeros(vocab, width, dtype=torch.float64)
    table[:, 0] = 1.0
    for k, cycles in enumerate(FREQUENCIES[: _pairs(width)]):
        w = 2 * torch.pi * cycles / vocab
        table[:, 1 + 2 * k] = torch.cos(w * x)
        table[:, 2 + 2 * k] = torch.sin(w * x)
    table *= (width / (1 + _pairs(width))) ** 0.5
    return table


def shift_rotation(width: int, vocab: int = VOCAB) -> torch.Tensor:
    """``S`` with ``S @ F[x] = F[x + 1]`` (``F = fourier_table(width)``, rows as columns)."""
    S = torch.eye(width, dtype=torch.float64)
    for k, cycles in enumerate(FREQUENCIES[: _pairs(width)]):
        w = torch.tensor(2 * torch.pi * cycles / vocab, dtype=torch.float64)
        c, s = torch.cos(w), torch.sin(w)
        i = 1 + 2 * k
        S[i, i], S[i, i + 1], S[i + 1, i], S[i + 1, i + 1] = c, -s, s, c
    return S


def layer_rotation(layer: int, spec: TargetSpec) -> torch.Tensor:
    """``M_layer``: the ``layers`` craft's state after target layer ``layer`` is
    ``M_layer @ F[x]``; a random rotation keeping the constant coordinate, the identity for
    the embedding (``layer`` -1) and the last layer."""
    h = spec.hidden_size
    if layer < 0 or layer >= spec.num_layers - 1:
        return torch.eye(h, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1000 * spec.seed + 17 + layer)
    q, r = torch.linalg.qr(torch.randn(h - 1, h - 1, generator=generator, dtype=torch.float64))
    M = torch.eye(h, dtype=torch.float64)
    M[1:, 1:] = q * torch.sign(torch.diagonal(r))
    return M


def linear_mlp(prefix: str, matrix: torch.Tensor, hidden: int) -> dict[str, torch.Tensor]:
    """SwiGLU weights computing ``matrix @ n`` for a normed input ``n`` whose first coordinate
    is the ``layers`` craft's constant: the gate reads only it, so silu(gate) is ``GATE``."""
    # the constant coordinate of a row of fourier_table(hidden), which has RMS 1: norm keeps it
    constant = (hidden / (1 + _pairs(hidden))) ** 0.5
    # silu(g * constant) = GATE: g by bisection (silu increases for positive arguments)
    lo, hi = 0.0, 64.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid * torch.sigmoid(torch.tensor(mid, dtype=torch.float64)).item() < GATE:
            lo = mid
        else:
            hi = mid
    gate = torch.zeros(INTERMEDIATE, hidden, dtype=torch.float64)
    gate[:, 0] = lo / constant
    up = torch.zeros(INTERMEDIATE, hidden, dtype=torch.float64)
    up[:hidden, :hidden] = torch.eye(hidden, dtype=torch.float64)
    down = torch.zeros(hidden, INTERMEDIATE, dtype=torch.float64)
    down[:, :hidden] = matrix / GATE
    return {
        prefix + "mlp.gate_proj.weight": gate,
        prefix + "mlp.up_proj.weight": up,
        prefix + "mlp.down_proj.weight": down,
    }


def layered_target_tensors(spec: TargetSpec) -> dict[str, torch.Tensor]:
    """The ``layers`` craft's target: layer ``i`` turns ``M_{i-1} F[x]`` into ``M_i F[x]``."""
    h, hd = spec.hidden_size, spec.hidden_size // spec.num_heads
    q_out, kv_out = spec.num_heads * hd, spec.num_kv_heads * hd
    E = fourier_table(h)
    tensors = _shifted_head(E)
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        step = layer_rotation(i, spec) @ layer_rotation(i - 1, spec).T
        tensors.update(
            {
                p + "input_layernorm.weight": torch.ones(h),
                p + "post_attention_layernorm.weight": torch.ones(h),
                p + "self_attn.q_proj.weight": torch.zeros(q_out, h),
                p + "self_attn.k_proj.weight": torch.zeros(kv_out, h),
                p + "self_attn.v_proj.weight": torch.zeros(kv_out, h),
                p + "self_attn.o_proj.weight": torch.zeros(h, q_out),
                **linear_mlp(p, step - torch.eye(h, dtype=torch.float64), h),
            }
        )
        tensors.update(_family_attention_extras(spec, p))
    dtype = getattr(torch, spec.dtype)
    return {k: v.to(dtype) for k, v in tensors.items()}


def build_target(spec: TargetSpec, folder: Path) -> Path:
    """Build the tiny Llama, Qwen2/3 or Step-3.5 target ``spec`` describes in ``folder`` (a
    class of its own, ``spec.own_class``: ``targets.build_target``)."""
    if spec.config_only:
        folder.mkdir(parents=True, exist_ok=True)
        write_tokenizer(folder, VOCAB)
        (folder / "config.json").write_text(json.dumps(step3p5_config(spec), indent=2) + "\n")
        return folder
    if spec.own_class:
        raise ValueError(f"{spec.architecture}: built by classes.build_class_target")
    if spec.craft == "layers":
        return _save(folder, target_config(spec), layered_target_tensors(spec))
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
    #: ``shift`` (guesses ``t + 1`` from its token) or ``layers`` (drafts from the captured
    #: layers only; for a ``layers`` target, see the module's docstring)
    craft: str = "shift"
    #: ``hf`` (an HF Llama EAGLE-3 folder, as SpecForge and EAGLE's own scripts write it) or
    #: ``speculators`` (saved by the ``speculators`` library's ``Eagle3DraftModel``, with its
    #: config: the layer ids at the top level, the layer under ``transformer_layer_config``)
    format: str = "hf"
    #: the speculators format's norm options (``norm_before_fc`` ...) set to true
    speculators_norms: tuple[str, ...] = ()


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
        # one chunk per declared layer id (SGLang's default capture: 3)
        fc = zeros(h, len(spec.aux_layer_ids or (0, 0, 0)) * th)
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


#: the ``layers`` craft: the size of the random term of each chunk's part of ``fc``, which
#: cancels between the right chunks only (a wrong chunk leaves noise twice the signal)
CHUNK_NOISE = 1.0


def hidden_state_of(layer_id: int, drafter_format: str) -> int:
    """What a drafter's layer id means, by its format's owner, as an index into transformers'
    ``output_hidden_states`` (0: the embeddings, ``k``: the output of layer ``k - 1``): the
    speculators library counts ids so (``models/utils.py``, ``resolve_target_layer_ids``);
    SGLang, which SpecForge trains with, names the layer whose output is read."""
    return layer_id if drafter_format == "speculators" else layer_id + 1


def ids_meaning(spec) -> str:
    """How a drafter's declared ids count, for ``hidden_state_of``: ids at the top level of
    its config are vLLM's key, whose ids are ``output_hidden_states`` indices as the
    speculators format's are; ``eagle_config``'s are SGLang's."""
    return "speculators" if spec.format == "speculators" or spec.ids_at == "top" else "hf"


def layer_id_of(hidden_state: int, drafter_format: str) -> int:
    """The id a drafter of this format declares for that hidden state."""
    return hidden_state if drafter_format == "speculators" else hidden_state - 1


def captured_hidden_states(spec: DrafterSpec, target: TargetSpec) -> list[int]:
    """The target's hidden states the drafter was trained on (``hidden_state_of``), in layer
    order; without ids, the inputs of layers ``[2, L // 2, L - 3]`` (both formats)."""
    L = target.num_layers
    if spec.aux_layer_ids is None:
        states = [2, L // 2, L - 3]
    else:
        states = [hidden_state_of(i, ids_meaning(spec)) for i in spec.aux_layer_ids]
    if len(set(states)) != len(states) or not all(1 <= k <= L - 1 for k in states):
        raise ValueError(
            f"the layers craft needs distinct hidden states in 1..{L - 1} (the outputs of "
            f"the {L}-layer target's layers but its last): {spec.aux_layer_ids} gives {states}"
        )
    return sorted(states)


def layered_drafter_tensors(spec: DrafterSpec, target: TargetSpec) -> dict[str, torch.Tensor]:
    """The ``layers`` craft's EAGLE-3 drafter (HF names): ``fc`` turns the right chunks into
    ``F[x + 1]`` and any other into noise, the mid layer steps ``F[t] -> F[t + 1]``."""
    if target.craft != "layers":
        raise ValueError("a layers-craft drafter drafts from a layers-craft target only")
    h, th = spec.hidden_size or target.hidden_size, target.hidden_size
    states = captured_hidden_states(spec, target)
    n = len(states)
    F = fourier_table(h)
    # P: the target's Fourier coordinates the drafter keeps, rescaled to its RMS 1
    P = torch.zeros(h, th, dtype=torch.float64)
    keep = 1 + 2 * _pairs(h)
    P[:keep, :keep] = torch.eye(keep, dtype=torch.float64) * (
        (h / (1 + _pairs(h))) / (th / (1 + _pairs(th)))
    ) ** 0.5
    S = shift_rotation(h)
    generator = torch.Generator().manual_seed(1000 * target.seed + 7)
    Z = [torch.randn(h, th, generator=generator, dtype=torch.float64) / th**0.5 for _ in range(n)]
    blocks = []
    for j, k in enumerate(states):
        B = S @ P / n
        if n > 1:
            B = B + CHUNK_NOISE * (Z[j] - Z[j - 1])
        # hidden state k is the output of layer k - 1
        blocks.append(B @ layer_rotation(k - 1, target).T)
    fc = torch.cat(blocks, dim=1)
    draft_vocab = spec.draft_vocab_size or VOCAB
    heads = target.num_heads
    p = "midlayer."
    tensors = {
        "embed_tokens.weight": F,
        "fc.weight": fc,
        "norm.weight": torch.ones(h),
        # hot tokens: the first draft_vocab ones (d2t maps draft id i to i + d2t[i])
        "lm_head.weight": F[:draft_vocab],
        p + "input_layernorm.weight": torch.ones(h),
        p + "hidden_norm.weight": torch.ones(h),
        p + "post_attention_layernorm.weight": torch.ones(h),
        p + "self_attn.q_proj.weight": torch.zeros(h, 2 * h),
        p + "self_attn.k_proj.weight": torch.zeros(heads * (h // heads), 2 * h),
        p + "self_attn.v_proj.weight": torch.zeros(heads * (h // heads), 2 * h),
        p + "self_attn.o_proj.weight": torch.zeros(h, h),
        **linear_mlp(p, S - torch.eye(h, dtype=torch.float64), h),
    }
    if draft_vocab != VOCAB:
        tensors["d2t"] = torch.zeros(draft_vocab, dtype=torch.int64)
    dtype = getattr(torch, spec.dtype)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}


def save_speculators_drafter(
    spec: DrafterSpec, target: TargetSpec, tensors: dict[str, torch.Tensor], folder: Path
) -> Path:
    """Write an EAGLE-3 drafter in the speculators format with the ``speculators`` library
    itself: its config class and ``Eagle3DraftModel``, the crafted tensors loaded into the
    model (strictly: every parameter the library has, no other) and ``save_pretrained``."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    h = spec.hidden_size or target.hidden_size
    draft_vocab = spec.draft_vocab_size or VOCAB
    layer = LlamaConfig(
        hidden_size=h,
        intermediate_size=INTERMEDIATE,
        num_attention_heads=target.num_heads,
        num_key_value_heads=target.num_heads,
        head_dim=h // target.num_heads,
        num_hidden_layers=spec.num_layers,
        vocab_size=VOCAB,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=2,
    )
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=(
            list(spec.aux_layer_ids) if spec.aux_layer_ids is not None else None
        ),
        target_hidden_size=target.hidden_size if h != target.hidden_size else None,
        **{name: True for name in spec.speculators_norms},
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=[target.architecture]),
        ),
    )
    model = Eagle3DraftModel(config)
    state = {k.replace("midlayer.", "layers.0."): v for k, v in tensors.items()}
    # the vocabulary maps: d2t as the HF drafter has it, t2d marking the hot tokens
    d2t = state.pop("d2t", torch.zeros(draft_vocab, dtype=torch.int64))
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[torch.arange(draft_vocab) + d2t] = True
    # the norms the options add, all ones (the layers craft's states have RMS 1 already)
    for name, param in model.state_dict().items():
        if name not in state and ("input_norm" in name or "fc_norm" in name):
            state[name] = torch.ones_like(param)
        if name.startswith("verifier_") and name not in state:
            state[name] = param  # the verifier's own norm / head: not saved by the library
    if draft_vocab != VOCAB:
        # the library registers the maps as buffers for a reduced draft vocabulary only
        state.update({"d2t": d2t, "t2d": t2d})
    model.load_state_dict(state, strict=True)
    model.to(getattr(torch, spec.dtype))
    model.save_pretrained(folder)
    write_tokenizer(folder, VOCAB)
    return folder


def build_drafter(spec: DrafterSpec, target: TargetSpec, folder: Path) -> Path:
    if target.own_class:
        # a Llama drafter: its config and shift-craft weights as for a Llama target of the
        # same width, heads and embedding (the verifier named in a speculators config stays
        # the target's class)
        verifier = target
        target = replace(target, architecture="LlamaForCausalLM")
        if spec.format == "speculators":
            folder.mkdir(parents=True, exist_ok=True)
            return save_speculators_drafter(spec, verifier, drafter_tensors(spec, target), folder)
    if spec.craft == "layers":
        if spec.kind != "eagle3":
            raise ValueError("the layers craft builds EAGLE-3 drafters only")
        tensors = layered_drafter_tensors(spec, target)
    else:
        tensors = drafter_tensors(spec, target)
    if spec.format == "speculators":
        folder.mkdir(parents=True, exist_ok=True)
        return save_speculators_drafter(spec, target, tensors, folder)
    return _save(folder, drafter_config(spec, target), tensors)
