"""Which tensor each EAGLE-3 aux hidden state chunk of an SGLang model class is, computed by
running the class itself on a CPU against transformers' hidden states of the same weights.
Run by ``scripts/captured_tensors_table.py`` in a release's environment with the tree first on
``sys.path`` (and ``SGLANG_USE_CPU_ENGINE=1``, the CUDA driver stub on ``LD_LIBRARY_PATH``).

    python captured_tensor_probe.py SPEC_JSON

``SPEC_JSON``: ``{"scratch": DIR, "layers": L, "only": [[file, class], ...] or [],
"skip": [[file, class], ...]}``. For every class of a model file that defines
``set_eagle3_layers_to_capture`` (``capture_rules_probe.model_files``), in order:

1. a tiny instance of the architecture (the class's name, looked up in transformers without
   regard to case) is built by transformers: its config class with ``L`` layers of width 64,
   4 heads, 4 experts (2 per token) where it has experts, a vocabulary of 512, float32
   (``tiny_config``; the smoke targets' configs, ``smoke/classes.py``, where one exists),
   seeded random weights (layer weights scaled as the smoke targets'), ``save_pretrained``;
2. transformers runs it on 8 tokens: ``output_hidden_states`` (``k``: 0 the embeddings, ``k``
   the output of layer ``k - 1``), the last decoder layer's output before the final norm
   (``L-pre``, a forward hook) and each layer's branch without the residual (``mlp-branch-i``:
   the output of a layer's ``post_feedforward_layernorm`` where it has one, else of its MLP);
3. SGLang's own loader builds the class from that folder on the CPU (0.5.23:
   ``publish`` / ``init_parallel_runtime`` / ``get_model``; 0.5.9-0.5.11:
   ``init_distributed_environment`` / ``initialize_model_parallel`` / ``get_model``, as their
   model runners do, world size 1, gloo), the class's own ``set_eagle3_layers_to_capture`` is
   called with SGLang-format ids for the whole depth (``[0 .. L]``; when that raises, ``[0 ..
   L-1]``, then ``[0 .. L-2]``), and one prefill (``ForwardMode.EXTEND``) of the same tokens
   runs through the class's ``forward``; its ``LogitsProcessor`` is stopped when called and
   the ``aux_hidden_states`` it was handed are the chunks. Attention runs in this probe's
   ``EagerAttention`` (a causal softmax attention with the layer's own scaling, heads, sliding
   window, logit cap and sinks) in place of a serving backend, which would need SGLang's KV
   pools; everything else is the class's own code and SGLang's CPU kernels;
4. each chunk is matched with every reference (relative error: largest absolute difference
   over the reference's RMS, a match below ``MATCH``).

Prints ``CAPTURED-TENSORS-START {file, class}`` before each class and one
``CAPTURED-TENSORS {...}`` line when it is done (a class that kills the process is reported by
the caller, which runs the rest in a new process), then ``CAPTURED-TENSORS-DONE {...}``.
"""

import importlib
import importlib.util
import inspect
import json
import logging
import os
import socket
import sys
import time
import traceback
import warnings
from pathlib import Path

MARK = "CAPTURED-TENSORS "
START = "CAPTURED-TENSORS-START "
DONE = "CAPTURED-TENSORS-DONE "
CLASSES = "CAPTURED-TENSORS-CLASSES "
HERE = Path(__file__).resolve().parent
#: a chunk is a reference when their largest difference is below this share of the
#: reference's RMS (float32 kernels differ by about 1e-6; neighbouring layers by 1e-1 or more)
MATCH = 1e-4
TOKENS = [5, 17, 99, 3, 250, 41, 7, 300]
HIDDEN = 64
VOCAB = 512
#: transformers' random layers times this (as the smoke targets, smoke/classes.py)
LAYER_SCALE = 4.0


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rules = _load("capture_rules_probe", HERE / "capture_rules_probe.py")
standin = rules.standin


def _frame(frame) -> str | None:
    parts = Path(frame.filename).parts
    for package in ("sglang", "transformers", "torch", "triton", "sgl_kernel"):
        if package in parts:
            index = len(parts) - 1 - parts[::-1].index(package)
            return f"{'/'.join(parts[index:])}:{frame.lineno} {frame.name}"
    return None


def one_line(exc: BaseException) -> str:
    """``Type: message``, where SGLang's code raised it or made the call that did (its
    innermost frame in ``sglang``) and, when another library raised it, that frame, on one
    line."""
    frames = [(f, _frame(f)) for f in traceback.extract_tb(exc.__traceback__)]
    frames = [(f, where) for f, where in frames if where]
    where = ""
    ours = [w for f, w in frames if w.startswith("sglang/")]
    if ours:
        where = f" at {ours[-1]}"
    if frames and not frames[-1][1].startswith("sglang/"):
        where += f" (raised at {frames[-1][1]})"
    message = " ".join(str(exc).split())
    if len(message) > 220:
        message = message[:220] + "..."
    return f"{type(exc).__name__}: {message}{where}"


# -- 1. the tiny model, built by transformers ---------------------------------------------
def hf_class_of(name: str):
    import transformers

    if hasattr(transformers, name):
        return getattr(transformers, name)
    lowered = {n.lower(): n for n in dir(transformers)}
    found = lowered.get(name.lower())
    return getattr(transformers, found) if found else None


#: the smoke targets' configs (smoke/classes.py) where one exists
SMOKE_CONFIGS = (
    "Qwen3MoeForCausalLM",
    "DeepseekV3ForCausalLM",
    "GptOssForCausalLM",
    "Gemma3ForCausalLM",
)

#: small values for every config field of these names the config class has
SMALL_TEXT = {
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "expert_ffn_hidden_size": 32,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "vocab_size": VOCAB,
    "max_position_embeddings": 1024,
    "sliding_window": 128,
    "attention_chunk_size": 128,
    "q_lora_rank": 32,
    "kv_lora_rank": 256,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 32,
    "v_head_dim": 16,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "global_head_dim": 16,
    "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": VOCAB,
    "num_kv_shared_layers": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
SMALL_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "depth": 1,
    "num_attention_heads": 2,
    "num_heads": 2,
    "out_hidden_size": HIDDEN,
    "projection_dim": HIDDEN,
    "vision_output_dim": HIDDEN,
    "head_dim": 16,
}


def _has(config, key: str) -> bool:
    try:
        return hasattr(config, key)
    except Exception:  # noqa: BLE001  a per-layer field (Gemma-4) read globally
        return key in config.to_dict()


def _small(config_class, values: dict) -> dict:
    default = config_class()
    return {k: v for k, v in values.items() if _has(default, k)}


#: the MLA fields of the smoke's DeepSeek-V3 target (smoke/classes.py): the latent and RoPE
#: widths the Triton MLA kernel tiles, YaRN with factor 1 (SGLang's CPU RoPE for MLA is
#: deepseek_yarn only), as many key/value heads as query heads
MLA = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


def mla_fields(layers: int) -> dict:
    sys.path.insert(0, str(HERE.parents[1]))
    from sglang_eagle_sizing.smoke.classes import config_of
    from sglang_eagle_sizing.smoke.models import TargetSpec

    deepseek = config_of(
        TargetSpec(architecture="DeepseekV3ForCausalLM", num_layers=layers)
    )
    keys = (*MLA, "rope_parameters", "num_key_value_heads")
    return {k: deepseek[k] for k in keys}


def checkpoint_keys(name: str, text: dict, layers: int) -> dict:
    """Keys of the real checkpoints' configs that SGLang reads and transformers' config
    class does not declare (or declares otherwise), per architecture."""
    extra = {}
    if "kv_lora_rank" in text and not name.startswith("Glm5Next"):
        extra.update(mla_fields(layers))
        extra["num_key_value_heads"] = text.get("num_attention_heads", 4)
        if "head_dim" in text:
            extra["head_dim"] = extra["qk_rope_head_dim"]
        # DeepSeek's own config keys, which SGLang reads
        extra.setdefault("moe_layer_freq", 1)
        extra.setdefault("first_k_dense_replace", 1)
        if name == "DeepseekV2ForCausalLM":
            extra.update(scoring_func="softmax", topk_method="greedy")
        else:
            extra.update(scoring_func="sigmoid", topk_method="noaux_tc")
    if name.startswith("Glm5Next"):
        # its config class requires as many key/value heads as query heads and no RoPE part
        # (NoPE) in its indexed (DSA) attention
        extra["num_key_value_heads"] = text.get("num_attention_heads", 4)
        extra["qk_rope_head_dim"] = 0
        extra["head_dim"] = 0
    if name == "Qwen3NextForCausalLM":
        # the checkpoints' full_attention_interval (transformers keeps layer_types only)
        extra["full_attention_interval"] = layers
    if name.lower().startswith("exaonemoe"):
        # ExaoneMoE's checkpoints list which layers are sparse
        first = text.get("first_k_dense_replace", 1)
        extra["is_moe_layer"] = [i >= first for i in range(layers)]
        # SGLang's exaone_moe.py reads config.rope_theta, which transformers 5 keeps in
        # rope_parameters only, and falls back to 1e6: the tiny model uses that value
        extra["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    if name == "MiniMaxM2ForCausalLM":
        # transformers' MiniMax-M2 always norms q and k over all heads and routes with a
        # score bias; SGLang's reads whether from the checkpoints' keys
        extra.update(
            scoring_func="sigmoid",
            use_qk_norm=True,
            qk_norm_type="per_layer",
            use_routing_bias=True,
        )
    if name == "Qwen2_5_VLForConditionalGeneration":
        # the sections of the rotary half-width (8) for time, height, width
        extra["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": [2, 3, 3],
        }
    if name == "LongcatFlashForCausalLM":
        extra["num_layers"] = layers
        extra["max_position_embeddings"] = 1024
    return extra


def tiny_config(hf_class, layers: int):
    """The config of a tiny instance of ``hf_class``: text fields of ``SMALL_TEXT`` it has,
    ``layers`` layers; a multimodal config's text and vision configs shrunk alike."""
    name = hf_class.__name__
    config_class = hf_class.config_class
    if name in SMOKE_CONFIGS:
        sys.path.insert(0, str(HERE.parents[1]))
        from sglang_eagle_sizing.smoke.classes import config_of
        from sglang_eagle_sizing.smoke.models import TargetSpec

        values = config_of(TargetSpec(architecture=name, num_layers=layers))
        values["vocab_size"] = VOCAB
        return config_class(**values, dtype="float32")
    sub = getattr(config_class, "sub_configs", {}) or {}
    if "text_config" in sub:
        text_class = sub["text_config"]
        text = {**_small(text_class, SMALL_TEXT), "num_hidden_layers": layers}
        text.update(checkpoint_keys(name, text, layers))
        kwargs = {"text_config": text}
        if "vision_config" in sub and sub["vision_config"] is not None:
            kwargs["vision_config"] = _small(sub["vision_config"], SMALL_VISION)
        for key in ("audio_config",):
            if key in sub:
                kwargs[key] = None
        config = config_class(**kwargs)
        for key in ("image_token_id", "image_token_index", "video_token_id"):
            # tokens of the vocabulary the prompt does not use
            if getattr(config, key, None) is not None:
                setattr(config, key, VOCAB - 1 - ("video" in key))
        config.tie_word_embeddings = getattr(config, "tie_word_embeddings", False)
    else:
        values = {**_small(config_class, SMALL_TEXT), "num_hidden_layers": layers}
        values.update(checkpoint_keys(name, values, layers))
        config = config_class(**values)
        for key, value in checkpoint_keys(name, values, layers).items():
            setattr(config, key, value)
    return config


def build_tiny(hf_class, sglang_name: str, layers: int, folder: Path):
    """(the transformers model, its text config), saved to ``folder``."""
    import torch

    config = tiny_config(hf_class, layers)
    torch.manual_seed(0)
    model = hf_class(config).eval().to(torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layers." in name and "norm" not in name and param.dim() >= 2:
                param.mul_(LAYER_SCALE)
            elif "norm" in name and param.dim() == 1:
                # norms' weights off their initial value (ones or zeros) so that a norm
                # applied or not tells apart
                param.add_(0.1 * torch.randn(param.shape, generator=generator))
        embed = model.get_input_embeddings().weight
        embed.copy_(torch.randn(embed.shape, generator=generator))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    # SGLang's registry picks the class by this name (transformers may spell it otherwise,
    # e.g. ExaoneMoe for SGLang's ExaoneMoE)
    saved["architectures"] = [sglang_name]
    for part in (saved, *(v for v in saved.values() if isinstance(v, dict))):
        if "model_type" in part or part is saved:
            part["torch_dtype"] = part["dtype"] = "float32"
            # the checkpoints (written by transformers 4) keep rope_theta at the top level,
            # where some SGLang classes read it (else their default)
            rope = part.get("rope_parameters")
            if isinstance(rope, dict) and "rope_theta" in rope:
                part.setdefault("rope_theta", rope["rope_theta"])
    (folder / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True))
    return model


#: (architecture, prefix transformers saves, the checkpoints' prefix; None: not in them)
CHECKPOINT_NAMES = (
    # Gemma-3's checkpoints keep the SigLIP tower under vision_model (as SGLang loads it),
    # without SigLIP's pooling head
    ("Gemma3ForConditionalGeneration", "vision_tower.", "vision_tower.vision_model."),
    ("Gemma3ForConditionalGeneration", "vision_tower.vision_model.head.", None),
)


def rename_to_checkpoint_names(name: str, folder: Path) -> None:
    """Rename the saved tensors that transformers names otherwise than the real
    checkpoints."""
    renames = [(old, new) for arch, old, new in CHECKPOINT_NAMES if arch == name]
    if not renames:
        return
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    renamed = {}
    for key, value in tensors.items():
        for old, new in renames:
            if new is None and key.startswith(old):
                key = None
                break
            if key.startswith(old) and not key.startswith(new):
                key = new + key[len(old) :]
        if key is not None:
            renamed[key] = value
    save_file(renamed, str(path), metadata={"format": "pt"})


# -- 2. the references --------------------------------------------------------------------
def _decoder_layers(model, layers: int):
    """The text decoder's ``ModuleList`` of ``layers`` layers (not a vision tower's)."""
    import torch

    found = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList)
        and name.endswith("layers")
        and len(module) == layers
        and not any(w in name for w in ("vision", "visual", "audio", "mtp"))
    ]
    if not found:
        raise LookupError(f"no decoder ModuleList of {layers} layers")
    return min(found, key=lambda item: item[0].count("."))[1]


def references(model, layers: int) -> list:
    """``(label, state)`` for the 8 tokens: ``k`` (output_hidden_states), ``L-pre``,
    ``mlp-branch-i``."""
    import torch

    stack = _decoder_layers(model, layers)
    raw, branches = {}, {}

    def first(output):
        return output[0] if isinstance(output, tuple) else output

    handles = [
        stack[-1].register_forward_hook(
            lambda _m, _i, out: raw.__setitem__("last", first(out))
        )
    ]
    for i, layer in enumerate(stack):
        branch = getattr(layer, "post_feedforward_layernorm", None)
        if branch is None:
            branch = next(
                (
                    getattr(layer, n)
                    for n in ("mlp", "feed_forward", "block_sparse_moe")
                    if isinstance(getattr(layer, n, None), torch.nn.Module)
                ),
                None,
            )
        if branch is not None:
            handles.append(
                branch.register_forward_hook(
                    lambda _m, _i, out, i=i: branches.__setitem__(i, first(out))
                )
            )
    try:
        with torch.no_grad():
            out = model(torch.tensor([TOKENS]), output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()
    states = out.hidden_states
    if len(states) != layers + 1:
        raise LookupError(
            f"output_hidden_states has {len(states)} states, not {layers + 1}"
        )
    found = [(str(k), s.reshape(len(TOKENS), -1)) for k, s in enumerate(states)]
    found.append(("L-pre", raw["last"].reshape(len(TOKENS), -1)))
    found += [
        (f"mlp-branch-{i}", b.reshape(len(TOKENS), -1))
        for i, b in sorted(branches.items())
    ]
    return found


def relative_error(chunk, state) -> float:
    rms = float(state.double().pow(2).mean().sqrt())
    return float((chunk.double() - state.double()).abs().max()) / max(rms, 1e-30)


def label_chunk(chunk, index: int, layers: int, refs: list) -> dict:
    """What ``chunk`` (captured for hidden-state index ``index``) is."""
    expected = "L-pre" if index == layers else str(index)
    scored = sorted(
        (relative_error(chunk, s), label) for label, s in refs if s.shape == chunk.shape
    )
    errors = {label: err for err, label in scored}
    if expected in errors and errors[expected] < MATCH:
        return {
            "index": index,
            "is": "L-pre" if index == layers else "k",
            "err": errors[expected],
        }
    if not scored:
        return {"index": index, "is": "none", "nearest": None, "err": None}
    err, label = scored[0]
    return {"index": index, "is": "none", "nearest": label, "err": err}


# -- 3. SGLang's class on the CPU -----------------------------------------------------------
class StopAtLogits(Exception):
    pass


class KVSink:
    """What the attention code writes to the KV cache goes nowhere: a prefill without a
    prefix reads nothing back."""

    def set_kv_buffer(self, *args, **kwargs):
        pass

    set_mla_kv_buffer = set_kv_buffer


class EagerAttention:
    """Causal softmax attention over the prefill's own tokens (one request, no cache)."""

    token_to_kv_pool = KVSink()
    req_to_token_pool = None
    # the server's backend names (None: the server args'), which DeepSeek's attention reads
    prefill_attention_backend_str = None
    decode_attention_backend_str = None

    def init_forward_metadata(self, forward_batch):
        pass

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        import torch

        heads, kv_heads = layer.tp_q_head_num, layer.tp_k_head_num
        dtype = v.dtype
        qk_dim, v_dim = layer.qk_head_dim, layer.v_head_dim
        q = q.reshape(-1, heads, qk_dim).float()
        k = k.reshape(-1, kv_heads, qk_dim).float()
        v = v.reshape(-1, kv_heads, v_dim).float()
        n = q.shape[0]
        k = k.repeat_interleave(heads // kv_heads, 1)
        v = v.repeat_interleave(heads // kv_heads, 1)
        scores = torch.einsum("thd,shd->hts", q, k) * layer.scaling
        cap = getattr(layer, "logit_cap", 0) or 0
        if cap > 0:
            scores = cap * torch.tanh(scores / cap)
        position = torch.arange(n)
        mask = position[None, :] <= position[:, None]
        window = getattr(layer, "sliding_window_size", None)
        if window is not None and window > -1:
            mask &= position[:, None] - position[None, :] <= window
        scores = scores.masked_fill(~mask, float("-inf"))
        sinks = kwargs.get("sinks")
        if sinks is not None:
            sink = sinks.float().reshape(heads, 1, 1).expand(heads, n, 1)
            weights = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
        else:
            weights = scores.softmax(-1)
        out = torch.einsum("hts,shd->thd", weights, v)
        return out.reshape(n, heads * v_dim).to(dtype)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_0_5_23() -> bool:
    return importlib.util.find_spec("sglang.srt.runtime_context") is not None


#: (attention backend, MoE runner) the server args name, in order: SGLang's CPU default
#: backend, then (for a class that refuses it, as GPT-OSS) Triton, whose MoE runner loads
#: unquantized experts (docs/smoke-classes.md)
BACKENDS = (("torch_native", None), ("triton", "triton"), ("triton", None))


def server_args_for(folder: Path, attention: str, moe: str | None):
    from sglang.srt.server_args import ServerArgs

    extra = {} if moe is None else {"moe_runner_backend": moe}
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config", config)
    if "linear_attention" in (text.get("layer_types") or []):
        # a hybrid (Mamba-style) model: no radix cache, so no Mamba cache snapshots
        extra["disable_radix_cache"] = True
    return ServerArgs(
        model_path=str(folder),
        device="cpu",
        skip_tokenizer_init=True,
        dtype="float32",
        disable_cuda_graph=True,
        mem_fraction_static=0.5,
        attention_backend=attention,
        **extra,
    )


_PARALLEL = {"ready": False}


def load_sglang(folder: Path):
    """(SGLang's model built from ``folder`` by its own loader, the server args' attention
    backend and MoE runner)."""
    failed = []
    for attention, moe in BACKENDS:
        label = f"--attention-backend {attention}" + (
            "" if moe is None else f" --moe-runner-backend {moe}"
        )
        try:
            return _load_sglang(folder, attention, moe), label, failed
        except Exception as exc:
            # the next only when the class refused the CPU's default backend
            if not failed and "attention backend" not in str(exc):
                raise
            failed.append(f"{label}: {one_line(exc)}")
    raise EveryListRaised(failed)


def _load_sglang(folder: Path, attention: str, moe: str | None):
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    server_args = server_args_for(folder, attention, moe)
    if is_0_5_23():
        from sglang.srt.distributed.bootstrap import (
            init_layer_runtime,
            init_parallel_runtime,
        )
        from sglang.srt.runtime_context import SpawnRanks, publish

        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
        if not _PARALLEL["ready"]:
            init_parallel_runtime(
                server_args=server_args, device="cpu", dist_port=_free_port()
            )
            _PARALLEL["ready"] = True
        model_config = ModelConfig.from_server_args(server_args)
        init_layer_runtime(model_config=model_config)
    else:
        from sglang.srt.distributed import (
            init_distributed_environment,
            initialize_model_parallel,
        )
        from sglang.srt.layers.dp_attention import initialize_dp_attention
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
        model_config = ModelConfig.from_server_args(server_args)
        if not _PARALLEL["ready"]:
            init_distributed_environment(
                backend="gloo",
                world_size=1,
                rank=0,
                local_rank=0,
                distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
            )
            initialize_model_parallel()
            _PARALLEL["ready"] = True
        initialize_dp_attention(server_args=server_args, model_config=model_config)
        try:
            from sglang.srt.layers.moe import initialize_moe_config

            initialize_moe_config(server_args)
        except ImportError:
            pass
    load_config = LoadConfig(load_format="auto")
    from sglang.srt.configs.update_config import adjust_config_with_unaligned_cpu_tp

    # what the model runner does on a CPU before it loads
    model_config = adjust_config_with_unaligned_cpu_tp(model_config, load_config, 1)
    model = get_model(
        model_config=model_config,
        load_config=load_config,
        device_config=DeviceConfig("cpu", 0),
    )
    return model.eval()


def holder_of(model):
    """The module whose ``layers_to_capture`` the call set."""
    for module in model.modules():
        if getattr(module, "layers_to_capture", None):
            return module
    return None


def capture_and_run(model, layers: int, hidden: int) -> tuple:
    """(ids passed, indices set, chunks, what longer lists raised) for the longest of
    [0..L], [0..L-1], [0..L-2] for which the class's own method and one prefill run."""
    raised = []
    for top in (layers, layers - 1, layers - 2):
        ids = list(range(top + 1))
        try:
            model.set_eagle3_layers_to_capture(ids)
            holder = holder_of(model)
            got = sorted(int(i) for i in getattr(holder, "layers_to_capture", []) or [])
            chunks = run_sglang(model, hidden)
        except Exception as exc:  # noqa: BLE001  the class's rule refuses these ids
            raised.append(f"{ids}: {one_line(exc)}")
            continue
        return ids, got, chunks, raised
    raise EveryListRaised(raised)


class EveryListRaised(Exception):
    """Every id list (or every server backend) tried failed: ``raised``, one line each."""

    def __init__(self, raised: list):
        super().__init__(raised[-1].split(": ", 1)[1])
        self.raised = raised


def forward_batch_for(tokens):
    import torch
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardBatch,
        ForwardMode,
    )

    n = len(tokens)
    ids = torch.tensor(tokens)
    batch = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=ids,
        req_pool_indices=torch.zeros(1, dtype=torch.int64),
        seq_lens=torch.tensor([n]),
        out_cache_loc=torch.arange(n),
        seq_lens_sum=n,
    )
    values = {
        "positions": torch.arange(n),
        "extend_seq_lens": torch.tensor([n]),
        "extend_prefix_lens": torch.tensor([0]),
        "extend_start_loc": torch.tensor([0]),
        "extend_seq_lens_cpu": [n],
        "extend_prefix_lens_cpu": [0],
        "extend_logprob_start_lens_cpu": [n],
        "seq_lens_cpu": torch.tensor([n]),
        "extend_num_tokens": n,
        "capture_hidden_mode": CaptureHiddenMode.FULL,
        "mrope_positions": torch.arange(n).expand(3, n).contiguous(),
        "return_logprob": False,
    }
    for key, value in values.items():
        setattr(batch, key, value)
    return ids, batch


def logits_processor_of(model):
    from sglang.srt.layers.logits_processor import LogitsProcessor

    for module in model.modules():
        if isinstance(module, LogitsProcessor):
            return module
    return None


def run_sglang(model, hidden: int) -> list:
    """The aux hidden state chunks one prefill of ``TOKENS`` hands the logits processor."""
    import torch

    ids, batch = forward_batch_for(TOKENS)
    backend = EagerAttention()
    batch.attn_backend = backend
    batch.token_to_kv_pool = backend.token_to_kv_pool
    context = None
    try:
        from sglang.srt.model_executor import forward_context

        context = forward_context
        previous = context.set_forward_context(
            context.ForwardContext(attn_backend=backend)
        )
    except ImportError:
        pass
    processor = logits_processor_of(model)
    if processor is None:
        raise LookupError("the model has no LogitsProcessor")
    got = {}

    def record(*args, **kwargs):
        names = [
            "input_ids",
            "hidden_states",
            "lm_head",
            "logits_metadata",
            "aux_hidden_states",
        ]
        bound = dict(zip(names, args))
        bound.update(kwargs)
        got["aux"] = bound.get("aux_hidden_states")
        raise StopAtLogits

    processor.forward = record
    try:
        with torch.no_grad():
            model.forward(ids, batch.positions, batch)
    except StopAtLogits:
        pass
    finally:
        del processor.forward
        if context is not None:
            context.set_forward_context(previous)
    aux = got.get("aux")
    if aux is None:
        return []
    if isinstance(aux, torch.Tensor):
        return list(aux.reshape(len(TOKENS), -1).split(hidden, dim=-1))
    return [c.reshape(len(TOKENS), -1) for c in aux]


# -- the classes ---------------------------------------------------------------------------
def classes_of(file: str) -> list:
    """[(name, class or None, registered, import error)] of the file's classes with the
    method."""
    import sglang

    path = Path(sglang.__file__).parent / "srt" / "models" / f"{file}.py"
    try:
        module = importlib.import_module(f"sglang.srt.models.{file}")
    except Exception as exc:  # noqa: BLE001
        reason = f"import sglang.srt.models.{file}: {one_line(exc)}"
        return [(name, None, None, reason) for name in rules._classes_in_source(path)]
    entry = getattr(module, "EntryClass", [])
    entry = set(entry if isinstance(entry, (list, tuple)) else [entry])
    return [
        (name, cls, cls in entry, None)
        for name, cls in vars(module).items()
        if inspect.isclass(cls)
        and cls.__module__ == module.__name__
        and cls.__name__ == name
        and hasattr(cls, standin.METHOD)
    ]


def probe_class(file, name, cls, registered, scratch: Path, layers: int) -> dict:
    row = {"file": file, "class": name, "registered": registered}
    if not registered:
        row["status"] = "inner"
        return row
    hf_class = hf_class_of(name)
    if hf_class is None:
        row["status"] = "no-transformers"
        return row
    row["transformers_class"] = hf_class.__name__
    stage = "transformers builds the tiny model"
    try:
        folder = scratch / f"{file}.{name}"
        model = build_tiny(hf_class, name, layers, folder)
        rename_to_checkpoint_names(name, folder)
        stage = "transformers runs it"
        refs = references(model, layers)
        del model
        stage = "SGLang's loader builds the class"
        sgl_model, backend, refused = load_sglang(folder)
        row["server_attention_backend"] = backend
        if refused:
            row["load_refused"] = refused
        stage = "set_eagle3_layers_to_capture and the prefill"
        ids, indices, chunks, raised = capture_and_run(
            sgl_model, layers, refs[0][1].shape[-1]
        )
        row["attempts"] = raised
        row["ids"], row["layers_to_capture"] = ids, indices
    except EveryListRaised as exc:
        row["status"] = "error"
        row["stage"] = stage
        row["attempts"] = exc.raised
        row["error"] = str(exc)
        return row
    except Exception as exc:  # noqa: BLE001  what stops the class, and where
        row["status"] = "error"
        row["stage"] = stage
        row["error"] = one_line(exc)
        return row
    # the chunks come in layer order; an index beyond the last layer's output is never
    # reached, and L only where the forward captures the final boundary
    reachable = [i for i in indices if i <= layers]
    if len(chunks) < len(reachable):
        reachable = [i for i in reachable if i < layers]
    row["status"] = "ran"
    row["chunks"] = [
        label_chunk(chunk, index, layers, refs)
        for chunk, index in zip(chunks, reachable)
    ]
    if len(chunks) != len(reachable):
        row["chunk_count_mismatch"] = [len(chunks), reachable]
    return row


def probe(spec: dict):
    import sglang
    import torch

    torch.set_num_threads(1)
    scratch = Path(spec["scratch"])
    layers = spec.get("layers", 4)
    only = {tuple(x) for x in spec.get("only", [])}
    skip = {tuple(x) for x in spec.get("skip", [])}
    files = rules.model_files(Path(sglang.__file__).parent / "srt" / "models")
    for file in files:
        for name, cls, registered, import_error in classes_of(file):
            if (only and (file, name) not in only) or (file, name) in skip:
                continue
            start = time.monotonic()
            emit(START, {"file": file, "class": name})
            if import_error:
                row = {
                    "file": file,
                    "class": name,
                    "status": "error",
                    "stage": "import of the model file",
                    "error": import_error,
                }
            else:
                row = probe_class(file, name, cls, registered, scratch, layers)
            row["seconds"] = round(time.monotonic() - start, 1)
            emit(MARK, row)
    emit(DONE, {"version": getattr(sglang, "__version__", None), "files": files})


def emit(mark: str, value: dict) -> None:
    sys.__stdout__.write(mark + json.dumps(value) + "\n")
    sys.__stdout__.flush()


def list_classes(files: list) -> None:
    """``CAPTURED-TENSORS-CLASSES {file: [[class, registered], ...]}``: the classes with the
    method of model files a CPU engine cannot import (run without ``SGLANG_USE_CPU_ENGINE``,
    where they import)."""
    found = {}
    for file in files:
        try:
            found[file] = [[n, r] for n, _, r, err in classes_of(file) if err is None]
        except Exception:  # noqa: BLE001
            found[file] = []
    emit(CLASSES, found)


def main() -> None:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    if sys.argv[1] == "--list":
        with open(os.devnull, "w") as quiet:
            sys.stdout = quiet
            list_classes(sys.argv[2:])
        return
    spec = json.loads(Path(sys.argv[1]).read_text())
    with open(os.devnull, "w") as quiet:  # SGLang logs to stdout: keep it for the rows
        sys.stdout = quiet
        probe(spec)


if __name__ == "__main__":
    main()
