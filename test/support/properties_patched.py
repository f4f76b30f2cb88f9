"""Property tests of the code the patch inserts, run INSIDE the patched tree (first on sys.path):
``test/test_properties.py`` runs pytest on this module in a subprocess.

Every generated drafter config, hostile ones included, must give the contract's value
(docs/design.md) or a ValueError whose message names the offending key; never another error.
"""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.spec_info import (
    SpeculativeAlgorithm,
    get_eagle_num_aux_hidden_states,
    parse_eagle_use_aux_hidden_state,
)

SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=list(HealthCheck)
)
MISSING = object()
NOT_A_CONFIG = (str, bytes, int, float, list, tuple, set)


class ConfigError(Exception):
    """What the contract says must be a ValueError naming ``key``."""

    def __init__(self, key: str):
        self.key = key


anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=4),
    st.tuples(st.integers()),
    st.sets(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
sizes = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([0, 1, 4096])
)
layer_ids = st.one_of(
    st.just(MISSING), st.none(), st.lists(st.integers(0, 200), max_size=8), anything
)
use_aux = st.one_of(st.just(MISSING), st.booleans(), anything)


@st.composite
def eagle_configs(draw):
    fields = {}
    for key, strategy in (
        ("use_aux_hidden_state", use_aux),
        ("eagle_aux_hidden_state_layer_ids", layer_ids),
    ):
        value = draw(strategy)
        if value is not MISSING:
            fields[key] = value
    shape = draw(st.sampled_from(["missing", "none", "dict", "object", "other"]))
    if shape == "missing":
        return MISSING
    if shape == "none":
        return None
    if shape == "dict":
        return fields
    if shape == "object":
        return SimpleNamespace(**fields)
    return draw(anything.filter(lambda v: v is not None and not isinstance(v, dict)))


def hf_config(eagle_config) -> SimpleNamespace:
    config = SimpleNamespace(name_or_path="generated/drafter")
    if eagle_config is not MISSING:
        config.eagle_config = eagle_config
    return config


def eagle_config_value(eagle_config, key, default):
    if isinstance(eagle_config, dict):
        return eagle_config.get(key, default)
    return getattr(eagle_config, key, default)


def expected_use_aux(algorithm, config) -> bool:
    if not algorithm.is_eagle3():
        return False
    eagle_config = getattr(config, "eagle_config", None)
    if isinstance(eagle_config, NOT_A_CONFIG):
        raise ConfigError("eagle_config")
    if eagle_config is None:
        return True
    value = eagle_config_value(eagle_config, "use_aux_hidden_state", True)
    # 0.5.11 read the flag by its truth value: null, 0 and 1 stay accepted
    accepted = value is None or (
        isinstance(value, (bool, int, float)) and value in (0, 1)
    )
    if not accepted:
        raise ConfigError("use_aux_hidden_state")
    return bool(value)


def expected_num_aux(config) -> int:
    eagle_config = getattr(config, "eagle_config", None)
    if isinstance(eagle_config, NOT_A_CONFIG):
        raise ConfigError("eagle_config")
    ids = (
        None
        if eagle_config is None
        else eagle_config_value(eagle_config, "eagle_aux_hidden_state_layer_ids", None)
    )
    if ids is None:
        return 3
    if (
        not isinstance(ids, (list, tuple))
        or not ids
        or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        )
    ):
        raise ConfigError("eagle_aux_hidden_state_layer_ids")
    return len(ids)


def outcome(call):
    try:
        return ("value", call())
    except ValueError as exc:
        return ("error", str(exc))


def expectation(call):
    try:
        return ("value", call())
    except ConfigError as exc:
        return ("error", exc.key)


def same(actual, expected) -> None:
    if expected[0] == "error":
        assert actual[0] == "error", (actual, expected)
        assert expected[1] in actual[1], (actual, expected)
    else:
        assert actual == expected


algorithms = st.sampled_from(
    [
        SpeculativeAlgorithm.EAGLE,
        SpeculativeAlgorithm.EAGLE3,
        SpeculativeAlgorithm.STANDALONE,
    ]
    + ([SpeculativeAlgorithm.NEXTN] if hasattr(SpeculativeAlgorithm, "NEXTN") else [])
)


@SETTINGS
@given(algorithm=algorithms, eagle_config=eagle_configs())
def test_flag_parser_gives_the_contract_or_names_the_key(algorithm, eagle_config):
    config = hf_config(eagle_config)
    same(
        outcome(lambda: parse_eagle_use_aux_hidden_state(algorithm, config)),
        expectation(lambda: expected_use_aux(algorithm, config)),
    )


def model_config(hidden, spec, dtype, eagle_config=MISSING):
    # 0.5.11's ModelConfig: spec_hidden_size is the width of the hidden states it passes on
    return SimpleNamespace(
        hidden_size=hidden,
        spec_hidden_size=spec,
        dtype=dtype,
        hf_config=hf_config(eagle_config),
    )


def spec_of(config) -> int:
    return config.spec_hidden_size


@st.composite
def workers(draw, layer_ids_ok: bool = False):
    algorithm = draw(algorithms)
    eagle_config = draw(eagle_configs())
    if layer_ids_ok and isinstance(eagle_config, (dict, SimpleNamespace)):
        ids = eagle_config_value(eagle_config, "eagle_aux_hidden_state_layer_ids", None)
        if ids is not None and not (
            isinstance(ids, list)
            and ids
            and all(isinstance(i, int) and i >= 0 for i in ids)
        ):
            eagle_config = None
    draft = model_config(
        draw(sizes),
        draw(sizes),
        draw(st.sampled_from(["bf16", "fp16"])),
        eagle_config,
    )
    target = model_config(draw(sizes), draw(sizes), "bf16")
    runner = SimpleNamespace(model_config=draft)
    worker = SimpleNamespace(
        speculative_algorithm=algorithm,
        target_worker=SimpleNamespace(model_config=target),
    )
    if draw(st.booleans()):
        worker.draft_runner = runner  # v2 draft worker
    else:
        worker.model_runner = runner  # v1 worker
    # What a patched worker's __init__ does before it builds the draft model; a refusal
    # there means no worker exists to size.
    worker.start_up_error = None
    try:
        worker.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
            algorithm, draft.hf_config
        )
        worker.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states(
            draft.hf_config
        )
    except ValueError as exc:
        worker.start_up_error = str(exc)
    return worker, draft, target


def expected_extend_width(worker, draft, target) -> int:
    algorithm = worker.speculative_algorithm
    if algorithm.is_eagle3() and expected_use_aux(algorithm, draft.hf_config):
        return expected_num_aux(draft.hf_config) * target.hidden_size
    if algorithm.is_standalone():
        return spec_of(draft)
    return spec_of(target)


@SETTINGS
@given(case=workers())
def test_decode_classmethods_give_the_draft_runner_sizes(case):
    worker, draft, _ = case
    assert EagleDraftInput.hidden_size_for(worker) == spec_of(draft)
    assert EagleDraftInput.dtype_for(worker) == draft.dtype


def check_extend(case) -> None:
    worker, draft, target = case
    algorithm = worker.speculative_algorithm
    if worker.start_up_error is not None:
        # the worker refused its drafter at start-up, naming the key
        same(
            ("error", worker.start_up_error),
            expectation(
                lambda: (
                    expected_use_aux(algorithm, draft.hf_config),
                    expected_num_aux(draft.hf_config),
                )
            ),
        )
        return
    same(
        outcome(lambda: EagleDraftExtendInput.hidden_size_for(worker)),
        expectation(lambda: expected_extend_width(worker, draft, target)),
    )
    assert EagleDraftExtendInput.dtype_for(worker) == draft.dtype


@SETTINGS
@given(case=workers(layer_ids_ok=True))
def test_extend_classmethods_give_the_contract(case):
    check_extend(case)


@SETTINGS
@given(case=workers())
def test_extend_width_with_hostile_layer_ids_names_the_key(case):
    check_extend(case)
