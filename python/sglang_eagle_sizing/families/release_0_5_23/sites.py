"""Where SGLang 0.5.23 decides how many target layers an EAGLE-3 drafter concatenates.

Upstream routes every idle input and CUDA-graph buffer through its helpers in
``speculative/eagle_utils.py``; the number of aux hidden states is still read by four rules
of their own (``docs/release-0.5.23.md``, section 2). These are the readers the patch makes
ask one parser; a reader the rules cannot find is reported, never skipped. Paths are relative
to ``sglang/srt``.
"""

from __future__ import annotations

import ast
import json

from pathlib import Path

from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    CAPTURE,
    CONTRACT,
    EAGLE3_DRAFT_CHECK,
    EAGLE3_DRAFT_CONFIG,
    EAGLE3_DRAFT_CONFIG_FILE,
    HIDDEN_STATE_INDICES_CAPTURED,
    HIDDEN_STATE_INDICES_CHECK_CAPTURED,
    HIDDEN_STATE_INDICES_CHECK_SIGNATURE,
    HIDDEN_STATE_INDICES_CHECKED,
    HIDDEN_STATE_INDICES_FIELD,
    HIDDEN_STATE_INDICES_PARSED,
    HIDDEN_STATE_INDICES_RETURNED,
)
from sglang_eagle_sizing.texts import rewritten

#: ``num_aux = getattr(<config>, "num_aux_hidden_states", None)`` and the ``if num_aux is
#: None:`` block after it: the extend helper (the buffers' width) and the drafter's ``fc``.
AUX_COUNT_BLOCKS = (
    ("speculative/eagle_utils.py", "get_draft_input_from_target_hidden_dim"),
    ("models/llama_eagle3.py", "LlamaModel.__init__"),
)
#: A function returning the count, read from the layer ids alone (Kimi-K2.5's drafter).
AUX_COUNT_FUNCTIONS = (("models/kimi_k25_eagle3.py", "_get_eagle_aux_layer_count"),)
#: What the target captures: ``try: ... eagle_config["eagle_aux_hidden_state_layer_ids"]``.
TARGET_CAPTURE = (
    "model_executor/model_runner_components/spec_aux_hidden_state.py",
    "_resolve_eagle_aux_hidden_state",
)
#: The struct the resolution fills (its ``eagle_aux_hidden_state_layer_ids`` field), the
#: function that hands it to the model and the model runner's call of that function: the
#: path of hidden-state indices beside the layer ids.
SPEC_AUX_CONFIG = (TARGET_CAPTURE[0], "SpecAuxHiddenStateConfig")
CONFIGURE_CAPTURE = (
    "model_executor/model_runner_components/attention_backend_setup.py",
    "configure_aux_hidden_state_capture",
)
CONFIGURE_CAPTURE_CALL = (
    "model_executor/model_runner.py",
    "ModelRunner.init_attention_backends",
)

#: The model files whose classes capture EAGLE-3 aux hidden states
#: (``set_eagle3_layers_to_capture(self, layer_ids)``): each such class declares what it
#: captures (``get_eagle3_layers_to_capture``), in three patches of nine files by rule:
#: the classes that add 1 and hold ``layers_to_capture`` on their model; those that add 1 and
#: hand the indices on (an inner model's method, flags on the layers, a multimodal model);
#: those with rules of their own, the last layer's output or a language model to ask.
#: ``models/mindspore.py`` is none of them: its ``MindSporeForCausalLM`` hands the ids to a
#: model class chosen at run time, so it stays undeclared and captures as the release does.
CAPTURE_CONTRACT_GROUPS = {
    concerns.CAPTURE_CONTRACT: (
        "apertus",
        "exaone_moe",
        "glm4_moe",
        "glm5_next",
        "llama",
        "longcat_flash",
        "minimax_m2",
        "qwen2",
        "qwen3",
    ),
    concerns.CAPTURE_CONTRACT_HANDED_ON: (
        "bailing_moe",
        "minimax_m3",
        "minimax_m3_vl",
        "qwen2_5_vl",
        "qwen2_moe",
        "qwen3_5_text",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
    ),
    concerns.CAPTURE_CONTRACT_OWN_RULES: (
        "deepseek_v2",
        "gemma3_causal",
        "gemma3_mm",
        "gemma4_causal",
        "gemma4_mm",
        "glm4_moe_lite",
        "gpt_oss",
        "kimi_k25",
        "mllama4",
    ),
}
CAPTURE_CONTRACT_MODELS = tuple(
    sorted(f"models/{name}.py" for names in CAPTURE_CONTRACT_GROUPS.values() for name in names)
)
#: Where Gemma-3 captures EAGLE-3 aux hidden states: its model's forward, whose decoder
#: layers return their branch and the residual stream apart.
GEMMA3_AUX = ("models/gemma3_causal.py", "Gemma3TextModel.forward")
#: The classes that may capture the last layer's output (hidden state ``num_hidden_layers``),
#: each with the model whose forward would capture it. Whether it does is read from that
#: forward in each release (``release_facts``): 0.5.23's Gemma-3/4, GPT-OSS and MiniMax-M3
#: do; GPT-OSS before 0.5.21 does inside its layer loop; MiniMax-M3 before 0.5.23 does not.
FINAL_HIDDEN_STATE_CLASSES = {
    ("models/gemma3_causal.py", "Gemma3ForCausalLM"): ("models/gemma3_causal.py", "Gemma3TextModel"),
    ("models/gemma3_mm.py", "Gemma3ForConditionalGeneration"): ("models/gemma3_causal.py", "Gemma3TextModel"),
    ("models/gemma4_causal.py", "Gemma4ForCausalLM"): ("models/gemma4_causal.py", "Gemma4TextModel"),
    ("models/gemma4_mm.py", "Gemma4ForConditionalGeneration"): ("models/gemma4_causal.py", "Gemma4TextModel"),
    ("models/gpt_oss.py", "GptOssForCausalLM"): ("models/gpt_oss.py", "GptOssModel"),
    ("models/minimax_m3.py", "MiniMaxM3SparseForCausalLM"): ("models/minimax_m3.py", "MiniMaxM3Model"),
    ("models/minimax_m3_vl.py", "MiniMaxM3SparseForConditionalGeneration"): ("models/minimax_m3.py", "MiniMaxM3Model"),
}
FINAL_HIDDEN_STATE_HOLDERS = tuple(sorted(set(FINAL_HIDDEN_STATE_CLASSES.values())))

#: Where the server arguments check the drafter against its target and decide the draft
#: model's dtype: ``_handle_eagle_family``. The dtype follows its call of
#: ``_handle_iquest_q1_mtp_draft`` (the other per-drafter decision, 0.5.21 on), else its
#: ``if model_arch in [...]:`` block (where the MTP drafter's path is decided, as that call
#: does from 0.5.21).
DRAFT_DTYPE = ("arg_groups/speculative_hook.py", "_handle_eagle_family")
DRAFT_DTYPE_ANCHOR = "_handle_iquest_q1_mtp_draft"
#: The drafter is checked against its target after the algorithm is
#: (``_check_oot_speculative_algorithm``, ``_handle_eagle_family``'s first call, 0.5.23 on),
#: else first thing (after ``cfg = resolving_view(server_args)`` where it starts so).
DRAFT_CHECK_ANCHOR = "_check_oot_speculative_algorithm"

#: Where a model's config is read: ``config = AutoConfig.from_pretrained(...)`` in the HF
#: parser, after upstream's own ``_try_load_*`` readers of configs it cannot read.
CONFIG_READ = ("utils/hf_transformers/config.py", "HfModelConfigParser.parse")

#: The EAGLE-3 drafter's decoder layer: ``__init__`` reads ``norm_before_residual`` after
#: ``self.hidden_norm = ...``; ``forward``'s input-layer branch (``if self.is_input_layer:``,
#: ``residual = hidden_states`` then ``hidden_states = self.hidden_norm(hidden_states)``)
#: takes the residual it chooses. The other three norm flags of the speculators format
#: (``norm_before_fc``, ``fc_norm``, ``norm_output``) 0.5.23's ``LlamaModel`` reads itself.
DRAFTER_LAYER = ("models/llama_eagle3.py", "LlamaDecoderLayer")

#: STANDALONE under PD disaggregation: where the prefill server hands each request its draft
#: proposal (``output_topk_p`` / ``output_topk_index``, only ``is_eagle()`` in the release),
#: where ``MetadataBuffers`` copies it (only with hidden states), where the decode server builds
#: its first draft input from it (``None`` for STANDALONE) and where that input stacks hidden
#: states (which STANDALONE does not make).
DISAGG_PREFILL_DRAFT = (
    "disaggregation/prefill.py",
    "SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill",
)
DISAGG_METADATA_DRAFT = ("disaggregation/utils.py", "MetadataBuffers.set_buf")
DISAGG_DRAFT_INPUT = ("speculative/spec_info.py", "SpeculativeAlgorithm.build_disagg_draft_input")
DISAGG_DRAFT_HIDDEN = ("speculative/eagle_disaggregation.py", "build_eagle_disagg_draft_input")

#: The verify input an idle rank builds (``EagleVerifyInput.create_idle_input``): a class
#: without the ``kv_indptr`` / ``kv_indices`` the attention backends read of an idle batch.
IDLE_VERIFY_INPUT = ("speculative/eagle_info.py", "EagleVerifyInput")

#: No sizing site of 0.5.23 is rewritten (they all call upstream's helpers).
SITES: tuple = ()

#: Files a 0.5.23 tree must hold, and the only ones the rules read.
SITE_FILES: tuple[str, ...] = tuple(
    sorted(
        {f for f, _ in AUX_COUNT_BLOCKS}
        | {f for f, _ in AUX_COUNT_FUNCTIONS}
        | {TARGET_CAPTURE[0], DRAFT_DTYPE[0], CONFIG_READ[0], DRAFTER_LAYER[0]}
        | {CONFIGURE_CAPTURE[0], CONFIGURE_CAPTURE_CALL[0]}
        | set(CAPTURE_CONTRACT_MODELS)
        | {
            f
            for f, _ in (
                DISAGG_PREFILL_DRAFT,
                DISAGG_METADATA_DRAFT,
                DISAGG_DRAFT_INPUT,
                DISAGG_DRAFT_HIDDEN,
                IDLE_VERIFY_INPUT,
            )
        }
    )
)

#: Modules the patch adds: ``{file relative to srt/: its parts}``, each part ``(the concern
#: that writes it, its text)``, appended, or ``(concern, (old, new))``, a text of an earlier
#: part's that the concern rewrites; the first part's concern adds the module.
NEW_MODULES = {
    EAGLE3_DRAFT_CONFIG_FILE: (
        (concerns.AUX_COUNT, EAGLE3_DRAFT_CONFIG),
        (concerns.DRAFT_CHECK, EAGLE3_DRAFT_CHECK),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_FIELD),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_PARSED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_RETURNED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CHECKED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CHECK_SIGNATURE),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CHECK_CAPTURED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CAPTURED),
    )
}

#: The fork's tests, by the concern whose patch adds them (paths from the checkout root):
#: self-contained files beside upstream's own speculative unit tests.
UNIT_TESTS = "test/registered/unit/speculative/"
TEST_CONCERNS = {
    UNIT_TESTS + "test_eagle3_aux_layer_count.py": concerns.AUX_COUNT,
    UNIT_TESTS + "test_eagle3_top_level_layer_ids.py": concerns.TOP_LEVEL_LAYER_IDS,
    UNIT_TESTS + "test_eagle3_draft_check.py": concerns.DRAFT_CHECK,
    UNIT_TESTS + "test_eagle3_capture_contract.py": concerns.CAPTURE_CONTRACT,
    UNIT_TESTS
    + "test_eagle3_capture_contract_handed_on.py": concerns.CAPTURE_CONTRACT_HANDED_ON,
    UNIT_TESTS
    + "test_eagle3_capture_contract_own_rules.py": concerns.CAPTURE_CONTRACT_OWN_RULES,
    UNIT_TESTS + "test_eagle_draft_dtype.py": concerns.DRAFT_DTYPE,
    UNIT_TESTS + "test_eagle3_speculators_config.py": concerns.SPECULATORS_EAGLE3,
    UNIT_TESTS + "test_eagle3_speculators_layer_ids.py": concerns.SPECULATORS_EAGLE3,
    UNIT_TESTS + "test_eagle3_norm_before_residual.py": concerns.SPECULATORS_NORMS,
    UNIT_TESTS + "test_standalone_disagg_draft_input.py": concerns.STANDALONE_DISAGG,
    UNIT_TESTS + "test_idle_verify_input.py": concerns.IDLE_VERIFY_KV,
    UNIT_TESTS + "test_gemma3_aux_hidden_states.py": concerns.GEMMA3_AUX_RESIDUAL,
}


def _module_text(parts) -> str:
    text = ""
    for concern, part in parts:
        if not enabled(concern):
            continue
        text = text + part if isinstance(part, str) else rewritten(text, part)
    return text


def new_modules() -> dict[str, str]:
    """The modules the enabled concerns add."""
    return {
        file: _module_text(parts)
        for file, parts in NEW_MODULES.items()
        if enabled(parts[0][0])
    }


def carries_patch(srt: Path) -> bool:
    """Whether the tree holds a module the patch adds."""
    return any((srt / file).is_file() for file in NEW_MODULES)


#: Test methods of the fork's tests that exercise what a release may not have: ``{(file,
#: method): fact of release_facts}``; a release without the fact gets the file without the
#: method (``release_notes`` says so).
TEST_NEEDS = {
    (
        UNIT_TESTS + "test_eagle3_draft_check.py",
        "test_capture_without_a_drafter_is_not_checked",
    ): "return_aux_hidden_states",
}
#: Fork test files a release takes only with a fact of ``release_facts``.
TEST_FILE_NEEDS = {UNIT_TESTS + "test_gemma3_aux_hidden_states.py": "gemma3_residual"}
TEST_FILE_NEEDS_TEXT = "test_gemma3_aux_hidden_states.py is"
#: What each fact of ``TEST_NEEDS`` is, for the note.
FACT_TEXT = {
    "return_aux_hidden_states": "--enable-return-aux-hidden-states (0.5.23 on)",
}


def test_files(files: dict[str, bytes], release: str | None = None) -> dict[str, bytes]:
    """Of the fork's tests, those the enabled concerns add (a file no concern owns: none), as
    the release (``release_facts``) takes them (``fork_tests.for_release``): without the
    methods of ``TEST_NEEDS`` whose fact it lacks, without the rows of a class table for a
    model file that captures nothing there, and in the release's own runtime idiom."""
    from sglang_eagle_sizing.families.release_0_5_23.fork_tests import (
        RUNTIME_FACTS,
        for_release,
    )

    facts = json.loads(release) if release else {}
    absent = {f.removeprefix("models/").removesuffix(".py") for f in facts.get("not_capturing", ())}
    chosen = {}
    for key, data in files.items():
        if key not in TEST_CONCERNS or not enabled(TEST_CONCERNS[key]):
            continue
        if facts.get(TEST_FILE_NEEDS.get(key, ""), True) is False:
            continue
        dropped = {
            method
            for (file, method), fact in TEST_NEEDS.items()
            if file == key and facts.get(fact, True) is False
        }
        older = {fact for fact in RUNTIME_FACTS if facts.get(fact, True) is False}
        changed = dropped or absent or older
        chosen[key] = for_release(data, dropped, absent, older) if changed else data
    return chosen


def _defines_class(name: str):
    return lambda module: any(
        isinstance(n, ast.ClassDef) and n.name == name for n in module.body
    )


def _defines_function(name: str):
    return lambda module: any(
        isinstance(n, ast.FunctionDef) and n.name == name for n in module.body
    )


def _defines_method(name: str):
    return lambda module: any(
        isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(module)
    )


def _calls_in(function: str, callee: str):
    def found(module: ast.Module) -> bool:
        for node in module.body:
            if isinstance(node, ast.FunctionDef) and node.name == function:
                return any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == callee
                    for n in ast.walk(node)
                )
        return True

    return found


#: How the release's runtime looks where the fork's tests stand in for it, each a yes/no fact
#: read from one file: ``publish`` takes the process's ranks (``SpawnRanks``, 0.5.21 on), the
#: parallel groups live in the runtime context (``get_tp_group`` asks ``get_parallel()``,
#: 0.5.21 on; before, they are ``parallel_state``'s globals), and how the KV index
#: translator lays out rows (``fork_tests`` writes each stand-in as the release reads it).
RUNTIME_IDIOMS = {
    "spawn_ranks": ("runtime_context.py", _defines_class("SpawnRanks")),
    # a published context is saved and put back (0.5.19 on), else cleared (``reset_context``)
    "snapshot_context": ("runtime_context.py", _defines_function("snapshot_context")),
    "groups_in_context": ("distributed/parallel_state.py", _calls_in("get_tp_group", "get_parallel")),
    # the KV index translator packs a read plan (``pack_read_stream``, 0.5.22 on), else
    # fills the rows itself (``fill_packed_read_stream``, 0.5.20-0.5.21)
    "packs_read_plans": ("mem_cache/kv_index_translator.py", _defines_method("pack_read_stream")),
}


#: the per-layer flag some forwards capture by (MiniMax-M3), set by the capture setter
CAPTURE_FLAG = "_is_layer_to_capture"


def _reads_unset_flag(forward: ast.FunctionDef, module: ast.Module) -> bool:
    """Whether ``forward`` reads ``CAPTURE_FLAG`` and nothing in ``module`` sets it."""

    def names_flag(call) -> bool:
        return (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Constant)
            and call.args[1].value == CAPTURE_FLAG
        )

    reads = any(names_flag(n) and n.func.id == "getattr" for n in ast.walk(forward))
    sets = any(
        (names_flag(n) and n.func.id == "setattr")
        or (isinstance(n, ast.Attribute) and n.attr == CAPTURE_FLAG and isinstance(n.ctx, ast.Store))
        for n in ast.walk(module)
    )
    return reads and not sets


def _binds_residual(module: ast.Module, scope: str) -> bool:
    """Whether ``Class.method`` of ``module`` binds a ``residual`` (its layers return the
    residual stream beside their branch) or is absent (the rule then says so)."""
    owner, method = scope.split(".")
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for function in node.body:
                if isinstance(function, ast.FunctionDef) and function.name == method:
                    return any(
                        isinstance(n, ast.Name) and n.id == "residual" and isinstance(n.ctx, ast.Store)
                        for n in ast.walk(function)
                    )
    return True


def _captures_final(forward: ast.FunctionDef) -> bool:
    """Whether a model's forward captures the last layer's output: ``self.end_layer`` (or
    ``num_layers``) ``in self.layers_to_capture``, or ``i + 1 in self.layers_to_capture``
    inside ``for i in range(..., self.end_layer)`` (GPT-OSS before 0.5.21)."""

    def membership(node, left) -> bool:
        return (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and ast.unparse(node.comparators[0]) == "self.layers_to_capture"
            and ast.unparse(node.left) in left
        )

    for node in ast.walk(forward):
        if membership(node, ("self.end_layer", "num_layers")):
            return True
        if (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and isinstance(node.iter, ast.Call)
            and ast.unparse(node.iter.func) == "range"
            and node.iter.args
            and ast.unparse(node.iter.args[-1]) == "self.end_layer"
        ):
            after = f"{node.target.id} + 1"
            if any(membership(n, (after,)) for n in ast.walk(node)):
                return True
    return False


#: Files of ``SITE_FILES`` a release may lack: the model files of the classes that capture
#: (``glm5_next.py`` arrives in 0.5.20; a release may also define no capture in one, as
#: 0.5.21's ``qwen3_5_text.py``). ``release_notes`` names each.
MAY_BE_ABSENT = CAPTURE_CONTRACT_MODELS


def files_in(srt: Path, read) -> list[str]:
    """The files the rules read in a tree: ``SITE_FILES``, less the model files it lacks."""
    return [f for f in SITE_FILES if f not in MAY_BE_ABSENT or (srt / f).is_file()]


SETTER_NAME = "set_eagle3_layers_to_capture"


def release_facts(read) -> str:
    """What the rules write depends on of the release beyond each file they rewrite, read
    from its code (``read(path)``: a file's text, ``OSError`` if absent), as JSON:
    ``final_hidden_state``, the models of ``FINAL_HIDDEN_STATE_HOLDERS`` whose forward
    captures the last layer's output; ``holders``, those the release defines;
    ``not_capturing``, the model files of ``MAY_BE_ABSENT`` it lacks or that define no
    ``set_eagle3_layers_to_capture``."""
    final, holders, not_capturing, flags_unset = [], [], [], []
    try:
        resolved = read(TARGET_CAPTURE[0])
    except OSError:
        resolved = ""
    for file in MAY_BE_ABSENT:
        try:
            text = read(file)
        except OSError:
            not_capturing.append(file)
            continue
        # neither the release's capture nor the patch's (a file holding only the patch's
        # methods is half patched: its rule refuses it)
        if not any(name in text for name in (SETTER_NAME, CONTRACT, CAPTURE)):
            not_capturing.append(file)
    for file, name in FINAL_HIDDEN_STATE_HOLDERS:
        try:
            module = ast.parse(read(file))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in module.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                holders.append(name)
                forward = [
                    f
                    for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name == "forward"
                ]
                if forward and _captures_final(forward[0]):
                    final.append(name)
                if forward and _reads_unset_flag(forward[0], module):
                    flags_unset.append(name)
    try:
        gemma3 = ast.parse(read(GEMMA3_AUX[0]))
    except (OSError, SyntaxError, ValueError):
        gemma3 = None
    runtime = {}
    for fact, (file, found) in RUNTIME_IDIOMS.items():
        try:
            runtime[fact] = found(ast.parse(read(file)))
        except (OSError, SyntaxError, ValueError):
            runtime[fact] = True
    return json.dumps(
        {
            **runtime,
            "final_hidden_state": final,
            # Gemma-3's layer returns the residual stream beside its branch (0.5.17 on)
            "gemma3_residual": gemma3 is None or _binds_residual(gemma3, GEMMA3_AUX[1]),
            "holders": holders,
            # holders whose forward captures by per-layer flags nothing sets (MiniMax-M3
            # in 0.5.16-0.5.17): they capture nothing, released or patched
            "flags_unset": flags_unset,
            "not_capturing": not_capturing,
            # the target's aux capture without a drafter (0.5.23 on)
            "return_aux_hidden_states": "return_aux_hidden_state_layer_ids" in resolved,
        }
    )


def release_notes(text: str | None) -> list[str]:
    """One line per concern, or part of one, that the release (its ``release_facts``) does
    not have, with the reason."""
    if not text:
        return []
    facts = json.loads(text)
    notes = [
        f"models/{file.removeprefix('models/')}: no class captures EAGLE-3 aux hidden states "
        "in this release (no set_eagle3_layers_to_capture): none to declare or test"
        for file in facts["not_capturing"]
    ]
    for holder_file, holder in FINAL_HIDDEN_STATE_HOLDERS:
        if holder in facts.get("flags_unset", ()):
            notes.append(
                f"{holder_file}: {holder}.forward captures by per-layer {CAPTURE_FLAG} "
                "flags that nothing in this release sets: it captures no aux hidden states "
                "for EAGLE-3, released and patched alike (not a concern this patch fixes)"
            )
        elif holder in facts["holders"] and holder not in facts["final_hidden_state"]:
            classes = sorted(
                n for k, (_, h) in FINAL_HIDDEN_STATE_CLASSES.items() for n in [k[1]] if h == holder
            )
            notes.append(
                f"{holder_file}: {holder}.forward does not capture the last layer's output "
                f"in this release: {' and '.join(classes)} take hidden states up to "
                "num_hidden_layers - 1, and ids naming that output are refused before load"
            )
    if facts.get("gemma3_residual", True) is False:
        notes.append(
            f"{GEMMA3_AUX[0]}: Gemma-3's decoder layer hands on the whole residual stream "
            "in this release (no residual returned beside it): each aux capture already "
            f"takes the layer's output, nothing to fix, and {TEST_FILE_NEEDS_TEXT} not added"
        )
    for (file, method), fact in TEST_NEEDS.items():
        if facts.get(fact, True) is False:
            notes.append(
                f"{file}: without {method}: this release has no {FACT_TEXT[fact]}"
            )
    return notes
