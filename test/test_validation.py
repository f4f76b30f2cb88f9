"""Start-up validation inside the patched SGLang: a drafter that cannot consume what the target
produces stops the worker with one message naming the key, the value and both config paths.

Runs the patched tree's own ``validate_eagle_draft_config`` (its ``eagle_info.py``, loaded
under a private name) on real ``ModelConfig``s built from edited copies of a shared drafter.
"""

from __future__ import annotations

import ast
import json
import logging
import shutil
import warnings

import pytest

from conftest import DATA
from sglang_eagle_sizing.configs import load_pair
from sglang_eagle_sizing.evaluate import load_eagle_info
from sglang_eagle_sizing.sites import AUX_FLAG_WORKERS

PAIR = DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"


@pytest.fixture(scope="module")
def eagle_info(patched_root):
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    return load_eagle_info(patched_root / "sglang" / "srt")


def _pair_with(tmp_path, **changes):
    draft = tmp_path / "draft"
    shutil.copytree(PAIR / "draft", draft)
    config = json.loads((draft / "config.json").read_text())
    for key, value in changes.items():
        if value is DELETE:
            config.pop(key, None)
        else:
            config[key] = value
    (draft / "config.json").write_text(json.dumps(config))
    return load_pair(draft, PAIR / "target")


DELETE = object()

CASES = [
    ("target_hidden_size", {"target_hidden_size": 5120}, "target_hidden_size", 5120),
    ("eagle_config of a wrong type", {"eagle_config": "aux"}, "eagle_config", "aux"),
    ("non-boolean use_aux_hidden_state", {"eagle_config": {"use_aux_hidden_state": "yes"}},
     "eagle_config.use_aux_hidden_state", "yes"),
    ("empty aux layer ids", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}},
     "eagle_config.eagle_aux_hidden_state_layer_ids", []),
    ("malformed aux layer ids", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, "x", 3]}},
     "eagle_config.eagle_aux_hidden_state_layer_ids", [1, "x", 3]),
    ("negative aux layer id", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 3]}},
     "eagle_config.eagle_aux_hidden_state_layer_ids", [-1, 2, 3]),
    ("num_aux_hidden_states", {"num_aux_hidden_states": 4}, "num_aux_hidden_states", 4),
    ("top-level aux layer ids", {"eagle_aux_hidden_state_layer_ids": [1, 2]},
     "eagle_aux_hidden_state_layer_ids", [1, 2]),
    ("fc width", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 8, 16, 24]}},
     "eagle_config.eagle_aux_hidden_state_layer_ids", [1, 8, 16, 24]),
]


@pytest.mark.parametrize("case,changes,key,value", CASES, ids=[c[0] for c in CASES])
def test_each_bad_drafter_stops_with_one_clear_message(eagle_info, tmp_path, case, changes, key, value):
    pair = _pair_with(tmp_path, **changes)
    algorithm = eagle_info.SpeculativeAlgorithm.from_string("EAGLE3")
    with pytest.raises(ValueError) as raised:
        eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target)
    message = str(raised.value)
    assert "\n" not in message
    assert f"{key}={value!r}" in message
    assert str(tmp_path / "draft") in message
    assert str(PAIR / "target") in message


def test_valid_drafters_and_other_algorithms_pass(eagle_info, tmp_path):
    pair = _pair_with(tmp_path, target_hidden_size=4096, eagle_config={"use_aux_hidden_state": False})
    for name in ("EAGLE3", "EAGLE", "STANDALONE"):
        algorithm = eagle_info.SpeculativeAlgorithm.from_string(name)
        assert eagle_info.validate_eagle_draft_config(algorithm, pair.draft, pair.target) is None
    # not EAGLE-3: nothing about aux hidden states is read
    bad = _pair_with(tmp_path / "bad", target_hidden_size=5120)
    eagle = eagle_info.SpeculativeAlgorithm.from_string("EAGLE")
    assert eagle_info.validate_eagle_draft_config(eagle, bad.draft, bad.target) is None


def test_every_worker_validates_before_it_reads_the_flag(patched_root):
    for (file, class_name), _ in AUX_FLAG_WORKERS.items():
        module = ast.parse((patched_root / "sglang" / "srt" / file).read_text())
        cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == class_name)
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        source = ast.unparse(init)
        validate = source.index("validate_eagle_draft_config(")
        flag = source.index("self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(")
        assert validate < flag, class_name
        if "self.init_cuda_graphs()" in source:
            assert flag < source.rindex("self.init_cuda_graphs()"), class_name
