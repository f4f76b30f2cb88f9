"""``smoke --pair DIR``: a real drafter/target pair shrunk to tiny scale, as a smoke case.

``DIR`` holds ``draft/config.json`` and ``target/config.json`` (the layout of ``test/data/``
and ``/work/shared/drafters/``). What decides sizing is kept: the ratio of the drafter's width
to the target's, the aux layer ids (mapped into the tiny target's layers) and where they are
declared, ``use_aux_hidden_state``, whether ``target_hidden_size`` is declared, the dtypes
(served at ``--dtype auto``, as a user would), the number of draft layers, and the draft
vocabulary's share of the target's. Targets: dense Llama, Qwen2 and Qwen3, and the
mixture-of-experts families ``MOE_DENSE`` names, served as their dense counterpart of the same
width and depth (all that sizing reads; the case's description says so); any other is refused
by name. Drafters: SGLang's Llama EAGLE-3, EAGLE and STANDALONE architectures, and the
speculators format (``speculators_config`` in the config: ids at the top level, the layer
under ``transformer_layer_config``), written with the ``speculators`` library as the original
is.
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle_sizing.families import AFTER_REFACTOR, BEFORE_REFACTOR, Family
from sglang_eagle_sizing.smoke.cases import CHAIN, V1, Case
from sglang_eagle_sizing.smoke.models import (
    HIDDEN,
    VOCAB,
    DrafterSpec,
    TargetSpec,
    hidden_state_of,
    layer_id_of,
)

TARGETS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
#: targets served through their own class (``classes.py``: built by transformers), each with
#: its own capture rule or architecture; Gemma-3's multimodal checkpoints through the text
#: class of their ``text_config`` (what EAGLE-3 drafts from)
OWN_CLASS = {
    "Qwen3MoeForCausalLM": "Qwen3MoeForCausalLM",
    "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLM",
    "GptOssForCausalLM": "GptOssForCausalLM",
    "Gemma3ForCausalLM": "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
}
#: a mixture-of-experts target with no tiny class here, served as the dense architecture of
#: its family (of the same width and depth: all that sizing reads; its capture rule is the
#: dense one's, ``val + 1``)
MOE_DENSE = {
    "Qwen2MoeForCausalLM": "Qwen2ForCausalLM",
}
#: an EAGLE-3 drafter architecture SGLang 0.5.11 does not have (SpecForge's experimental
#: mixture-of-experts draft head), served as its Llama EAGLE-3 of the same width, ids and
#: vocabulary; the case's description says so
OTHER_EAGLE3 = "ForCausalLMEagle3"
DRAFTERS = {
    "LlamaForCausalLMEagle3": ("EAGLE3", "eagle3"),
    "LlamaForCausalLMEagle": ("EAGLE", "eagle"),
    "LlamaForCausalLM": ("STANDALONE", "standalone"),
}
TINY_LAYERS = 4
#: the tiny target's depth when the drafter relies on SGLang's default capture
DEFAULT_CAPTURE_LAYERS = 8


class PairError(ValueError):
    pass


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise PairError(f"{path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise PairError(f"{path}: not JSON ({exc})") from None


def _dtype(config: dict, path: Path) -> str:
    dtype = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in ("float16", "bfloat16", "float32"):
        raise PairError(f"{path}: torch_dtype {dtype!r} is not float16, bfloat16 or float32")
    return dtype


def _tiny_width(width: int) -> int:
    """A multiple of 8 (4 heads of an even head_dim), at least 16."""
    return max(16, int(round(width / 8)) * 8)


def map_hidden_states(states: list[int], num_layers: int) -> tuple[int, list[int]]:
    """The tiny target's depth and where the hidden states of a ``num_layers`` target land
    in it (indices into ``output_hidden_states``: 0 the embeddings, ``L`` the final one).
    Those a target captures, 1 .. L - 1, keep their order and stay distinct (the tiny
    target is deepened where needed), the first layer's output stays the first and the last
    layer's input the last; 0 and ``L``, which no target captures, stay what they are."""
    inner = sorted({k for k in states if 1 <= k <= num_layers - 1})
    tiny = max(TINY_LAYERS, len(inner) + 1)
    placed: dict[int, int] = {}
    below = 0
    for k in inner:  # in proportion, each past the one before
        share = (k - 1) / (num_layers - 2) if num_layers > 2 else 0
        placed[k] = below = max(1 + round(share * (tiny - 2)), below + 1)
    top = tiny - 1
    for k in reversed(inner):  # and back within the tiny target's last layer
        placed[k] = top = min(placed[k], top)
        top -= 1
    return tiny, [placed.get(k, 0 if k <= 0 else tiny) for k in states]


def keep_rule_branch(
    architecture: str, ids, tiny_ids, layers: int, tiny_layers: int, drafter_format: str
) -> tuple[int, tuple[int, ...]]:
    """The tiny ids moved, where needed, so that the target class's capture rule takes the
    same branch for them as for the real ids (SGLang 0.5.23, issue 35): DeepSeek-V3 adds 1
    only when the first id is 1, GPT-OSS keeps the ids as given when the largest is
    ``num_hidden_layers``. Rules read SGLang's ids: a speculators id ``k`` is SGLang's
    ``k - 1`` (the patch's adapter). The tiny target is deepened when the ids need it."""
    shift = 1 if drafter_format == "speculators" else 0
    real = [i - shift for i in ids]
    tiny = [i - shift for i in tiny_ids]
    if architecture == "DeepseekV3ForCausalLM" and (real[0] == 1) != (tiny[0] == 1):
        tiny[0] = 1 if real[0] == 1 else (0 if real[0] < 1 else 2)
        for j in range(1, len(tiny)):  # keep them increasing
            tiny[j] = max(tiny[j], tiny[j - 1] + 1)
        tiny_layers = max(tiny_layers, tiny[-1] + 2)
    if architecture == "GptOssForCausalLM" and (max(real) == layers) != (max(tiny) == tiny_layers):
        if max(real) == layers:
            tiny[tiny.index(max(tiny))] = tiny_layers
        else:
            tiny_layers += 1
    return tiny_layers, tuple(i + shift for i in tiny)


def pair_case(folder: Path, family: Family = BEFORE_REFACTOR) -> Case:
    """The pair as a case of ``family``'s smoke: served with the v1 worker on 0.5.11 (as its
    cases are), with 0.5.23's v2 worker (it has no other) on a 0.5.23 tree."""
    folder = Path(folder)
    release = family.known_version
    target_path, draft_path = folder / "target" / "config.json", folder / "draft" / "config.json"
    target, draft = _read(target_path), _read(draft_path)
    target_arch = (target.get("architectures") or ["<none>"])[0]
    served_arch = OWN_CLASS.get(target_arch) or MOE_DENSE.get(target_arch, target_arch)
    if served_arch not in TARGETS and target_arch not in OWN_CLASS:
        raise PairError(
            f"{target_path}: target architecture {target_arch} is not supported by --pair "
            f"(dense {', '.join(TARGETS)}; {', '.join(OWN_CLASS)} through their own class; "
            f"{', '.join(MOE_DENSE)} as its dense counterpart; only)"
        )
    if target_arch in MOE_DENSE:
        dense_note = (f"; the {target_arch} target served as a dense {served_arch} of the "
                      "same width and depth (all that sizing reads)")
    elif target_arch in OWN_CLASS:
        dense_note = f"; the {target_arch} target served through its own class {served_arch}"
        if served_arch != target_arch:
            dense_note += " (the text model of its text_config)"
        if "quantization_config" in target:
            dense_note += (f", unquantized (its {target['quantization_config'].get('quant_method')}"
                           " quantization is not registered on a CPU)")
    else:
        dense_note = ""
    # a multimodal target's language model (Gemma-3): its text_config
    target = {**target, **(target.get("text_config") or {})}
    speculators = "speculators_config" in draft
    if speculators:
        # the speculators format: the drafter's layer under transformer_layer_config
        layer = draft.get("transformer_layer_config") or {}
        draft_arch = f"speculators {draft.get('speculators_model_type', 'eagle3')}"
        if draft.get("speculators_model_type", "eagle3") != "eagle3" or layer.get(
            "model_type", "llama"
        ) != "llama":
            raise PairError(f"{draft_path}: a speculators drafter other than a Llama EAGLE-3 "
                            "is not supported by --pair")
        draft = {**layer, **{k: v for k, v in draft.items() if k != "transformer_layer_config"}}
        if draft.get("target_hidden_size") is None:
            draft.pop("target_hidden_size", None)
        algorithm, kind = "EAGLE3", "eagle3"
    else:
        draft_arch = (draft.get("architectures") or ["<none>"])[0]
        if draft_arch not in DRAFTERS and draft_arch.endswith(OTHER_EAGLE3):
            dense_note += (f"; the {draft_arch} drafter (not an architecture of SGLang {release}) "
                           "served as LlamaForCausalLMEagle3 of the same width, ids and vocabulary")
            draft_arch = "LlamaForCausalLMEagle3"
        if draft_arch not in DRAFTERS:
            raise PairError(
                f"{draft_path}: draft architecture {draft_arch} is not supported by --pair "
                f"({', '.join(DRAFTERS)} and the speculators format only)"
            )
        algorithm, kind = DRAFTERS[draft_arch]
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if not isinstance(target.get(key), int):
            raise PairError(f"{target_path}: {key} missing or not an integer")
    ratio = (draft.get("hidden_size") or target["hidden_size"]) / target["hidden_size"]
    eagle_config = draft.get("eagle_config") or {}
    nested_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    top_ids = draft.get("eagle_aux_hidden_state_layer_ids")
    ids = nested_ids if nested_ids is not None else top_ids
    drafter_format = "speculators" if speculators else "hf"
    # top-level ids count as output_hidden_states indices (vLLM's key), as speculators' do
    ids_format = "speculators" if speculators or nested_ids is None else "hf"
    tiny_layers, tiny_ids = TINY_LAYERS, None
    if ids:
        tiny_layers, states = map_hidden_states(
            [hidden_state_of(i, ids_format) for i in ids], target["num_hidden_layers"]
        )
        tiny_ids = tuple(layer_id_of(k, ids_format) for k in states)
        tiny_layers, tiny_ids = keep_rule_branch(
            served_arch, ids, tiny_ids, target["num_hidden_layers"], tiny_layers,
            ids_format,
        )
    draft_vocab = draft.get("draft_vocab_size")
    tiny_draft_vocab = (
        max(16, round(VOCAB * draft_vocab / target["vocab_size"])) if draft_vocab else None
    )
    target_dtype, draft_dtype = _dtype(target, target_path), _dtype(draft, draft_path)
    served_as = ""
    if target_dtype == draft_dtype == "bfloat16":
        # Triton's interpreter (the attention kernels on a CPU) has no bfloat16 scalar; one
        # dtype for both keeps what sizing sees (the draft's dtype is the target's)
        target_dtype = draft_dtype = "float16"
        served_as = " (bfloat16 served as float16: Triton's interpreter has no bfloat16)"
    # Without declared ids SGLang captures the target's default layers [2, L // 2, L - 3]:
    # three distinct layers only from L = 7 on (a 4-layer target gives [2, 2, 1], two layers,
    # and fc gets 2/3 of its features). Such pairs get an 8-layer tiny target.
    kind_needs_defaults = kind == "eagle3" and ids is None and eagle_config.get(
        "use_aux_hidden_state", True
    )
    target_spec = TargetSpec(
        architecture=served_arch,
        dtype=target_dtype,
        num_layers=DEFAULT_CAPTURE_LAYERS if kind_needs_defaults else tiny_layers,
    )
    drafter = DrafterSpec(
        kind=kind,
        dtype=draft_dtype,
        aux_layer_ids=tiny_ids,
        ids_at="eagle_config" if nested_ids is not None else "top",
        use_aux_hidden_state=eagle_config.get("use_aux_hidden_state"),
        hidden_size=_tiny_width(HIDDEN * ratio),
        num_layers=draft.get("num_hidden_layers", 1),
        draft_vocab_size=tiny_draft_vocab if kind == "eagle3" else None,
        declare_target_hidden_size="target_hidden_size" in draft,
        format=drafter_format,
        # an absent norm_before_residual is true, as vLLM reads the format
        speculators_norms=tuple(
            k for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
            if speculators and draft.get(k, k == "norm_before_residual")
        ),
    )
    known = ""
    if draft_dtype != target_dtype:
        known = (
            f"a {draft_dtype} drafter on a {target_dtype} target at --dtype auto crashes in "
            f"{release} unpatched; a bfloat16 model does not serve on this CPU anyway "
            "(Triton's interpreter has no bfloat16 scalar)"
        )
    return Case(
        name=f"pair:{folder.name}",
        description=(
            f"{folder}: {target_arch} target ({target_dtype}), {draft_arch} drafter "
            f"({draft_dtype}), width ratio {ratio:g}, aux ids {ids} -> {tiny_ids}, "
            f"draft vocab {draft_vocab} -> {tiny_draft_vocab}{served_as}{dense_note}"
        ),
        algorithm=algorithm,
        drafter=drafter,
        flags=CHAIN if family is AFTER_REFACTOR else CHAIN + V1,
        target=target_spec,
        dtype="auto",
        known_failure=known,
        known_error="get_bf16" if known else "",
    )
