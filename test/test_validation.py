"""Start-up validation inside the patched SGLang: a drafter that cannot consume what the target
produces stops the worker with one message naming the key (``None``: missing), its value, the
value expected and both config paths.

Runs the patched tree's own ``validate_eagle_draft_config`` and parsers (its ``eagle_info.py``
and ``spec_info.py``, where the parser lives, loaded under private names) on real
``ModelConfig``s built from edited copies of a shared
drafter/target pair. Every refusal the inserted code can make is walked here.
"""

from __future__ import annotations

import ast
import json
import logging
import shutil
import warnings

import pytest
from conftest import DATA, config_json
from sglang_eagle_sizing.families.release_0_5_11.sites import AUX_FLAG_WORKERS
from sglang_eagle_sizing.report.configs import load_pair
from sglang_eagle_sizing.report.evaluate import load_eagle_info, load_spec_info

PAIR = DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"
DELETE = object()


@pytest.fixture(scope="module")
def eagle_info(patched_root):
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    return load_eagle_info(patched_root / "sglang" / "srt")


@pytest.fixture(scope="module")
def spec_info(patched_root):
    """The parser of the drafter's config: the patched tree's ``spec_info.py``."""
    return load_spec_info(patched_root / "sglang" / "srt")


def _edited(source, folder, changes):
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is DELETE:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _pair_with(tmp_path, target=None, **changes):
    draft = _edited(PAIR / "draft", tmp_path / "draft", changes)
    target_folder = PAIR / "target"
    if target:
        target_folder = _edited(PAIR / "target", tmp_path / "target", target)
    return load_pair(draft, target_folder)


WIDE_TARGET = {"hidden_size": 5120, "num_attention_heads": 40, "head_dim": 128}
IDS = "eagle_aux_hidden_state_layer_ids"
TOP_LEVEL_EXPECTED = (
    "a non-empty list of indices of the target's hidden states from 1 (0, the embeddings, "
    "is not captured)"
)

# (case, drafter edits, target edits, key, value, expected)
REFUSALS = [
    ("eagle_config of a wrong type", {"eagle_config": "aux"}, None,
     "eagle_config", "aux", "a dict, an object with attributes, or nothing"),
    ("non-boolean use_aux_hidden_state", {"eagle_config": {"use_aux_hidden_state": "yes"}}, None,
     "eagle_config.use_aux_hidden_state", "yes", "true or false"),
    ("empty aux layer ids", {"eagle_config": {IDS: []}}, None,
     "eagle_config." + IDS, [], "a non-empty list of target layer indices"),
    ("malformed aux layer ids", {"eagle_config": {IDS: [1, "x", 3]}}, None,
     "eagle_config." + IDS, [1, "x", 3], "a non-empty list of target layer indices"),
    ("negative aux layer id", {"eagle_config": {IDS: [-1, 2, 3]}}, None,
     "eagle_config." + IDS, [-1, 2, 3], "a non-empty list of target layer indices"),
    # top-level ids are hidden-state indices (vLLM's key): 0, the embeddings, is refused
    ("malformed top-level aux layer ids", {IDS: "1,2,3"}, None,
     IDS, "1,2,3", TOP_LEVEL_EXPECTED),
    ("top-level aux layer ids naming the embeddings", {IDS: [0, 2, 4]}, None,
     IDS, [0, 2, 4], TOP_LEVEL_EXPECTED),
    ("num_aux_hidden_states against the default layers", {"num_aux_hidden_states": 4}, None,
     "num_aux_hidden_states", 4, "3, the number of the target's default layers"),
    ("num_aux_hidden_states against the declared ids", {IDS: [1, 8, 16, 24], "num_aux_hidden_states": 3}, None,
     "num_aux_hidden_states", 3, f"4, the number of layers in {IDS}"),
    ("target_hidden_size", {"target_hidden_size": 5120}, None,
     "target_hidden_size", 5120, "4096, the target's hidden_size"),
    # without declared ids the target captures the inputs of its layers [2, L // 2, L - 3];
    # layer 0's input is the embedding, so 3 and 4 layers give 2 distinct layer outputs,
    # 2 and 5 layers give 1; 0.5.11 starts such a server and crashes at its first request,
    # at the drafter's fc (or, for 3 layers, in llama.py's capture of layer 0's input)
    ("default layers of a 4-layer target", {}, {"num_hidden_layers": 4},
     "eagle_config." + IDS, None,
     "3 layer ids for a target of 4 layers: by default it captures the inputs of its "
     "layers [2, 2, 1], the outputs of only 2 of its layers"),
    ("default layers of a 3-layer target", {}, {"num_hidden_layers": 3},
     "eagle_config." + IDS, None,
     "3 layer ids for a target of 3 layers: by default it captures the inputs of its "
     "layers [2, 1, 0], the outputs of only 2 of its layers"),
    ("default layers of a 2-layer target", {}, {"num_hidden_layers": 2},
     "eagle_config." + IDS, None,
     "3 layer ids for a target of 2 layers: by default it captures the inputs of its "
     "layers [2, 1, -1], the outputs of only 1 of its layers"),
    ("default layers of a 5-layer target", {}, {"num_hidden_layers": 5},
     "eagle_config." + IDS, None,
     "3 layer ids for a target of 5 layers: by default it captures the inputs of its "
     "layers [2, 2, 2], the outputs of only 1 of its layers"),
    ("fc width: target_hidden_size missing for a wider target", {}, WIDE_TARGET,
     "target_hidden_size", None,
     "5120, the target's hidden_size: without it the draft model's fc reads each aux hidden "
     "state as hidden_size = 4096 features, the target's are 5120 wide"),
    ("fc width: target_hidden_size missing, four ids", {IDS: [1, 8, 16, 24]}, WIDE_TARGET,
     "target_hidden_size", None,
     "5120, the target's hidden_size: without it the draft model's fc reads each aux hidden "
     "state as hidden_size = 4096 features, the target's are 5120 wide"),
]


PARSER_REFUSALS = [c for c in REFUSALS if c[2] is None and not c[0].startswith(("fc width", "target_hidden"))]
PARSER_CASES = {c[0] for c in PARSER_REFUSALS}


@pytest.mark.parametrize(
    "case,changes,target,key,value,expected", REFUSALS, ids=[c[0] for c in REFUSALS]
)
def test_each_bad_drafter_stops_with_one_message_naming_the_cause(
    eagle_info, tmp_path, case, changes, target, key, value, expected
):
    pair = _pair_with(tmp_path, target, **changes)
    algorithm = eagle_info.SpeculativeAlgorithm.from_string("EAGLE3")
    with pytest.raises(ValueError) as raised:
        eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target)
    message = str(raised.value)
    target_path = tmp_path / "target" if target else PAIR / "target"
    # the target's path where the check is against the target (the parser's own refusals,
    # of a malformed declaration, name the drafter alone)
    where = "" if case in PARSER_CASES else f" for the target model config {target_path}"
    # the whole message, as a user reads it
    assert message == (
        f"Invalid {key}={value!r} in the draft model config {tmp_path / 'draft'}{where}: "
        f"expected {expected}."
    )


def test_the_known_wrong_message_now_names_the_missing_target_hidden_size(eagle_info, tmp_path):
    """A 4096-wide drafter without target_hidden_size for a 5120-wide target was refused as
    ``eagle_config.eagle_aux_hidden_state_layer_ids=None``; the cause is the missing key."""
    pair = _pair_with(tmp_path, WIDE_TARGET)
    algorithm = eagle_info.SpeculativeAlgorithm.from_string("EAGLE3")
    with pytest.raises(ValueError, match=r"^Invalid target_hidden_size=None ") as raised:
        eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target)
    assert IDS not in str(raised.value)




@pytest.mark.parametrize(
    "case,changes,target,key,value,expected", PARSER_REFUSALS, ids=[c[0] for c in PARSER_REFUSALS]
)
def test_the_parsers_refuse_the_same_drafters_naming_the_draft_config(
    eagle_info, spec_info, tmp_path, case, changes, target, key, value, expected
):
    """What a worker calls at start-up (and the target ModelRunner calls) refuses with the
    message the validation gives, without a target path: the parsers do not know the target."""
    hf_config = _pair_with(tmp_path, **changes).draft.hf_config
    algorithm = eagle_info.SpeculativeAlgorithm.from_string("EAGLE3")
    with pytest.raises(ValueError) as raised:
        spec_info.parse_eagle_use_aux_hidden_state(algorithm, hf_config)
        spec_info.get_eagle_aux_hidden_state_layer_ids(hf_config)
        spec_info.get_eagle_num_aux_hidden_states(hf_config)
    assert str(raised.value) == (
        f"Invalid {key}={value!r} in the draft model config {hf_config.name_or_path}: "
        f"expected {expected}."
    )


@pytest.mark.parametrize(
    "changes",
    [{"eagle_config": {IDS: [1, 8, 16, 24]}}, {IDS: [1, 8, 16, 24]}, {IDS: [1, 2]},
     {IDS: [1, 8, 16, 24], "target_hidden_size": 4096}],
    ids=["four ids in eagle_config", "four ids at the top level", "two ids", "four ids, target_hidden_size"],
)
def test_llama_eagle3_drafters_with_other_than_three_layers_pass(eagle_info, tmp_path, changes):
    """llama_eagle3.py's fc takes the aux layers the drafter declares: nothing to refuse."""
    pair = _pair_with(tmp_path, **changes)
    algorithm = eagle_info.SpeculativeAlgorithm.from_string("EAGLE3")
    assert eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target) is None


def test_no_later_patch_takes_back_a_refusal_of_the_validation(tmp_path):
    """The validation the series lands is the same after every patch from its own on (the
    drafter-fc patch sizes fc by the aux layers; the validation checks only the width fc reads
    each of them as, which that patch does not change)."""
    from sglang_eagle_sizing import concerns
    from sglang_eagle_sizing.families.release_0_5_11 import concerns as concerns_0_5_11
    from sglang_eagle_sizing.families.release_0_5_11 import inserted
    from sglang_eagle_sizing.families.release_0_5_11.rules.contract import enabled_helpers

    start = concerns_0_5_11.ORDER.index(concerns_0_5_11.VALIDATION) + 1
    for count in range(start, len(concerns_0_5_11.ORDER) + 1):
        with concerns.only(concerns_0_5_11.prefix(count)):
            assert inserted.VALIDATION_HELPERS in enabled_helpers(), concerns_0_5_11.ORDER[count - 1]
    assert "3 layer ids" not in inserted.VALIDATION_HELPERS


def test_aux_layer_ids_are_read_wherever_the_drafter_declares_them(spec_info, tmp_path):
    """eagle_config's ids are SGLang's; top-level ids (vLLM's key) are hidden-state indices,
    SGLang's id + 1; declared in both places, eagle_config's come first (0.5.11's target read
    eagle_config alone), whatever the top level says."""
    nested = _pair_with(tmp_path / "a", eagle_config={IDS: [1, 8, 30]}).draft.hf_config
    top = _pair_with(tmp_path / "b", **{IDS: [2, 9, 31]}).draft.hf_config
    both = _pair_with(tmp_path / "c", eagle_config={IDS: [1, 8, 30]}, **{IDS: [5, 6]}).draft.hf_config
    for hf_config in (nested, top, both):
        assert spec_info.get_eagle_aux_hidden_state_layer_ids(hf_config) == [1, 8, 30]
        assert spec_info.get_eagle_num_aux_hidden_states(hf_config) == 3
    none = _pair_with(tmp_path / "d").draft.hf_config
    assert spec_info.get_eagle_aux_hidden_state_layer_ids(none) is None
    assert spec_info.get_eagle_num_aux_hidden_states(none) == 3


PAIRS = sorted(p.name for p in DATA.iterdir() if (p / "draft").is_dir())


@pytest.mark.parametrize("name", PAIRS)
def test_every_real_drafter_parses_to_the_ids_and_count_its_config_declares(
    spec_info, patched_root, name
):
    """Speculators-format drafters included: the patched tree reads the format itself. Its
    ids, and any at the top level of a config, count hidden states as output_hidden_states
    does (SGLang's id of the layer whose output is hidden state k is k - 1)."""
    config = config_json(DATA / name / "draft")
    pair = load_pair(DATA / name / "draft", DATA / name / "target", patched_root / "sglang" / "srt")
    nested = (config.get("eagle_config") or {}).get(IDS)
    declared = nested or config.get(IDS)
    sglang_ids = declared
    if declared and not nested:
        sglang_ids = [k - 1 for k in declared]
    assert spec_info.get_eagle_aux_hidden_state_layer_ids(pair.draft.hf_config) == sglang_ids
    assert spec_info.get_eagle_num_aux_hidden_states(pair.draft.hf_config) == len(declared or [0, 0, 0])


@pytest.mark.parametrize("num_layers", [3, 7, 8, 32])
def test_default_layers_of_a_deep_enough_target_pass(eagle_info, tmp_path, num_layers):
    """7 layers is the shallowest target whose default layers are 3 distinct ones (3 layers
    pass when the drafter declares its ids or takes no aux hidden states)."""
    algorithm = eagle_info.SpeculativeAlgorithm.from_string("EAGLE3")
    target = {"num_hidden_layers": num_layers}
    changes = {}
    if num_layers == 3:
        changes = {IDS: [1, 2, 2]}  # hidden states: the outputs of layers 0, 1, 1
    pair = _pair_with(tmp_path / "ids", target, **changes)
    assert eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target) is None
    pair = _pair_with(tmp_path / "no-aux", target, eagle_config={"use_aux_hidden_state": False})
    assert eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target) is None


def test_valid_drafters_and_other_algorithms_pass(eagle_info, tmp_path):
    pair = _pair_with(tmp_path, target_hidden_size=4096, eagle_config={"use_aux_hidden_state": False})
    for name in ("EAGLE3", "EAGLE", "STANDALONE"):
        algorithm = eagle_info.SpeculativeAlgorithm.from_string(name)
        assert eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target) is None
    # not EAGLE-3: nothing about aux hidden states is read
    bad = _pair_with(tmp_path / "bad", target_hidden_size=5120)
    eagle = eagle_info.SpeculativeAlgorithm.from_string("EAGLE")
    assert eagle_info.validate_eagle_draft_config(eagle, bad.draft, bad.target) is None


def test_every_worker_reads_and_validates_before_it_builds_the_draft_model(patched_root):
    for (file, class_name), builder in AUX_FLAG_WORKERS.items():
        module = ast.parse((patched_root / "sglang" / "srt" / file).read_text())
        cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == class_name)
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        source = ast.unparse(init)
        order = [
            source.index("draft_model_config = get_eagle_draft_model_config(server_args)"),
            source.index("validate_eagle_draft_config(self.speculative_algorithm, draft_model_config"),
            source.index("self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state("),
            source.index("self.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states("),
            source.index(builder + "("),
        ]
        assert order == sorted(order), class_name
        assert source.count("self.eagle_use_aux_hidden_state =") == 1, class_name


def test_ids_the_target_cannot_capture_are_refused_naming_the_key_and_its_layers(
    eagle_info, patched_root, tmp_path
):
    """An id naming the last layer's output (layer 31 of 32, hidden state 32) is captured by
    no SGLang target: no layer reads it; the target refuses it before its weights load,
    naming the ids as declared (hidden-state indices at the top level). gemma-3-27b's target
    class (Gemma3ForConditionalGeneration) captures nothing in 0.5.11 (it loaded its weights,
    then raised AttributeError): refused first, naming the class. Every other shared pair's
    ids are captured."""
    srt = patched_root / "sglang" / "srt"
    for name in PAIRS:
        pair = load_pair(DATA / name / "draft", DATA / name / "target", srt)
        if name != "gemma-3-27b-it__specforge-eagle3":
            eagle_info.get_eagle_captured_layer_ids(pair.draft.hf_config, pair.target)
            continue
        with pytest.raises(ValueError) as raised:
            eagle_info.get_eagle_captured_layer_ids(pair.draft.hf_config, pair.target)
        assert str(raised.value) == (
            "The target model Gemma3ForConditionalGeneration does not capture EAGLE-3 aux hidden "
            "states (no set_eagle3_layers_to_capture): --speculative-algorithm EAGLE3 cannot "
            "serve it."
        )
    for key, changes, expected in (
        (f"eagle_config.{IDS}=[1, 16, 31]", {"eagle_config": {IDS: [1, 16, 31]}},
         "a target of 32 layers captures; hidden state 32 is not captured"),
        (f"{IDS}=[2, 17, 32]", {IDS: [2, 17, 32]},
         "a target of 32 layers captures; index 32, after its last layer, is not captured"),
    ):
        pair = _pair_with(tmp_path / str(len(key)), **changes)
        with pytest.raises(ValueError) as raised:
            eagle_info.get_eagle_captured_layer_ids(pair.draft.hf_config, pair.target)
        assert key in str(raised.value) and expected in str(raised.value)
