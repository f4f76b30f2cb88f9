"""Tiny targets of the classes whose EAGLE-3 capture rule or architecture is not Llama's.

SGLang 0.5.23's model files follow three capture rules (issue 35): ``val + 1`` for every id
(Llama, Qwen3-MoE, which delegates to its inner model, ...), DeepSeek-V3's ``+ 1`` only when
the first id is 1 (else the ids as given), GPT-OSS's ids as given when the largest is
``num_hidden_layers`` (its model then captures the final boundary), else ``+ 1``. Each target
here is built by transformers itself (its config class, seeded random layers,
``save_pretrained``, which writes the checkpoint's own tensor names), so that SGLang loads it
as the real checkpoints and transformers' ``output_hidden_states`` of the same weights is the
oracle of what the target captured (``capture.py``).

The embedding is ``models.embedding_table`` and the LM head row ``y`` its row ``y - 1``, as
the ``shift`` craft's target (``models.target_tensors``): the target maps a token ``x`` mostly
to ``x + 1`` (clear greedy margins, so another kernel gives the same tokens) and the
``shift`` drafters of ``models.py``, whose embedding is the same table, guess ``t + 1``.
Gemma-3 ties its head to the embedding (as its checkpoints do): no shift, few drafts accepted. The
layers keep transformers' random initialisation (scaled by ``LAYER_SCALE``): each changes the
state enough that the hidden states of two layers are told apart.
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle_sizing.smoke.models import MODEL_TYPES

#: transformers' random layers (std 0.02) times this
LAYER_SCALE = 4.0


def config_of(spec) -> dict:
    """The transformers config of a tiny target of ``spec.architecture`` (a ``TargetSpec``):
    width ``spec.hidden_size``, ``spec.num_layers`` layers, 4 experts (2 per token) where the
    class has experts, the vocabulary of ``models.VOCAB``, float32 unless the spec says."""
    from sglang_eagle_sizing.smoke.models import INTERMEDIATE, VOCAB

    h, heads = spec.hidden_size, spec.num_heads
    common = {
        "hidden_size": h,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": heads,
        "vocab_size": VOCAB,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    arch = spec.architecture
    if arch == "Qwen3MoeForCausalLM":
        return {
            **common,
            "intermediate_size": INTERMEDIATE,
            "moe_intermediate_size": INTERMEDIATE // 4,
            "num_key_value_heads": spec.num_kv_heads,
            "head_dim": h // heads,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
        }
    if arch == "DeepseekV3ForCausalLM":
        # MLA: queries through a rank-32 LoRA, keys/values through a 256-wide latent, a
        # 16-wide part without and a 32-wide part with RoPE; layer 0 dense, then MoE with
        # one shared expert
        return {
            **common,
            "intermediate_size": INTERMEDIATE,
            "moe_intermediate_size": INTERMEDIATE // 4,
            "num_key_value_heads": heads,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            # keys of the real checkpoints' config (DeepSeek's own config class) that SGLang
            # reads and transformers' class does not declare
            "moe_layer_freq": 1,
            "topk_method": "noaux_tc",
            "scoring_func": "sigmoid",
            "ep_size": 1,
            "q_lora_rank": 32,
            # the latent and RoPE widths the Triton MLA decode kernel tiles (Lk = 288:
            # decode_attention.py _decode_grouped_att_m_fwd; another Lk gets one power-of-two
            # tile for both and fails: "incompatible dimensions at index 1: 32 and 64")
            "kv_lora_rank": 256,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 32,
            "v_head_dim": 16,
            # YaRN as every DeepSeek-V3 checkpoint has (SGLang's CPU RoPE for MLA is
            # deepseek_yarn only, rotary_embedding/factory.py get_rope_cpu); factor 1: the
            # plain rotation
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 1.0,
                "original_max_position_embeddings": 1024,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        }
    if arch == "GptOssForCausalLM":
        # unquantized (no quantization_config): the CPU build registers no mxfp4. The expert
        # width equals the model's, as in the real checkpoints (2880 both): with another,
        # SGLang's loader of the fused experts refuses transformers' down_proj (E, I, H)
        # ("The size of tensor a (64) must match the size of tensor b (32) at non-singleton
        # dimension 2", fused_moe_triton/layer.py _load_w2)
        return {
            **common,
            "intermediate_size": h,
            "num_key_value_heads": spec.num_kv_heads,
            "head_dim": h // heads,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 128,
            "layer_types": [
                "sliding_attention" if i % 2 == 0 else "full_attention"
                for i in range(spec.num_layers)
            ],
            # the real checkpoints' clamp of the SwiGLU (transformers' experts clamp at 7.0;
            # 0.5.11's gpt_oss.py reads the key and fails without it)
            "swiglu_limit": 7.0,
            # the real checkpoints' YaRN
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
            },
        }
    if arch == "Gemma3ForCausalLM":
        # tied, as every Gemma-3 checkpoint: SGLang's Gemma3ForCausalLM reads no lm_head and
        # scores with the embedding (an untied head served one token lower than transformers)
        return {
            **common,
            "tie_word_embeddings": True,
            "intermediate_size": INTERMEDIATE,
            "num_key_value_heads": spec.num_kv_heads,
            "head_dim": h // heads,
            "sliding_window": 128,
            "final_logit_softcapping": None,
            "attn_logit_softcapping": None,
            "query_pre_attn_scalar": h // heads,
            "rope_scaling": None,
        }
    raise ValueError(f"{arch}: not a class target ({', '.join(MODEL_TYPES)})")


def build_class_target(spec, folder: Path) -> Path:
    """Build the tiny ``spec.architecture`` target with transformers and save it to
    ``folder`` (with the word-level tokenizer of ``models.write_tokenizer``)."""
    import torch
    import transformers

    from sglang_eagle_sizing.smoke.models import VOCAB, embedding_table, write_tokenizer

    config_class = transformers.AutoConfig.for_model(MODEL_TYPES[spec.architecture]).__class__
    config = config_class(**config_of(spec), dtype="float32")
    model_class = getattr(transformers, spec.architecture)
    torch.manual_seed(spec.seed)
    model = model_class(config).eval()
    E = embedding_table(spec.seed, hidden=spec.hidden_size)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layers." in name and "norm" not in name and param.dim() >= 2:
                param.mul_(LAYER_SCALE)
        embed = model.get_input_embeddings().weight
        if spec.architecture == "Gemma3ForCausalLM":
            # Gemma scales the embedding by sqrt(hidden): keep the state's RMS about 1
            embed.copy_(E / spec.hidden_size**0.5)
        else:
            embed.copy_(E)
        if not config.tie_word_embeddings:
            model.get_output_embeddings().weight.copy_(torch.roll(E, shifts=1, dims=0))
    model.to(getattr(torch, spec.dtype))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_tokenizer(folder, VOCAB)
    config_file = folder / "config.json"
    saved = json.loads(config_file.read_text())
    saved["torch_dtype"] = spec.dtype
    config_file.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    return folder
