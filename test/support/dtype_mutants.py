"""Mutants of the start-up dtype decision, and which of test_patched_sglang.py's dtype tests
kill them. A script, not collected by pytest (each mutant costs one probe process, ~20 s):

    PYTHONPATH=$PWD/python .venv/bin/python test/support/dtype_mutants.py

It patches a scratch copy of the installed (unpatched) SGLang, then for each mutant copies the
patched tree, makes one textual change, runs probe_patched.py's ``start_up_dtypes`` on it and
calls the dtype tests on the result. Prints one line per (mutant, test) and exits 1 if a mutant
survives every test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TEST = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEST))

import test_patched_sglang as tests  # noqa: E402
from conftest import LIBCUDA_STUB_SOURCE as STUB_SOURCE  # noqa: E402
from conftest import SUPPORT, probe_json, run_python
from sglang_eagle_sizing.cli import main as cli_main  # noqa: E402

DTYPE_LINE = (
    "        set_eagle_draft_dtype(\n"
    "            server_args, draft_model_config, self.target_worker.model_config\n"
    "        )\n"
)
CHANGE = (
    "    server_args.dtype = target_dtype\n"
    "    draft_model_config.dtype = target_model_config.dtype\n"
)
#: name -> (file under srt/, text, replacement)
MUTANTS = {
    "decision keeps --dtype unchanged (0.5.11's behaviour)": (
        "speculative/eagle_info.py", CHANGE, ""
    ),
    "--dtype set, the handed draft config left in its own dtype": (
        "speculative/eagle_info.py",
        "    draft_model_config.dtype = target_model_config.dtype\n",
        "",
    ),
    "the drafter's dtype wins": (
        "speculative/eagle_info.py",
        CHANGE,
        "    server_args.dtype = draft_dtype\n",
    ),
    "always bfloat16": (
        "speculative/eagle_info.py",
        "    draft_dtype = str(",
        '    server_args.dtype = "bfloat16"\n'
        "    draft_model_config.dtype = torch.bfloat16\n"
        "    return\n"
        "    draft_dtype = str(",
    ),
    "--dtype auto replaced even when both agree": (
        "speculative/eagle_info.py",
        "    if draft_dtype == target_dtype:\n        return\n",
        "    if draft_dtype == target_dtype:\n"
        "        server_args.dtype = target_dtype\n"
        "        return\n",
    ),
    "EAGLEWorker without the dtype statement": ("speculative/eagle_worker.py", DTYPE_LINE, ""),
    "EagleDraftWorker without the dtype statement": ("speculative/eagle_worker_v2.py", DTYPE_LINE, ""),
    "MultiLayerEagleWorker without the dtype statement": (
        "speculative/multi_layer_eagle_worker.py", DTYPE_LINE, ""
    ),
    "MultiLayerEagleDraftWorker without the dtype statement": (
        "speculative/multi_layer_eagle_worker_v2.py", DTYPE_LINE, ""
    ),
}


def dtype_tests(probe):
    cases = {
        "one dtype, EAGLE-3 fp16 on bf16": lambda: tests.test_a_float16_drafter_on_a_bfloat16_target_gets_one_dtype_everywhere(
            probe, "eagle3 fp16 on bf16, --dtype auto"
        ),
        "one dtype, EAGLE fp16 on bf16": lambda: tests.test_a_float16_drafter_on_a_bfloat16_target_gets_one_dtype_everywhere(
            probe, "eagle fp16 on bf16, --dtype auto"
        ),
        "explicit float16": lambda: tests.test_an_explicit_dtype_keeps_its_meaning_for_both_models(probe, "float16"),
        "explicit bfloat16": lambda: tests.test_an_explicit_dtype_keeps_its_meaning_for_both_models(probe, "bfloat16"),
        "agreeing pair unchanged": lambda: tests.test_a_drafter_of_the_targets_dtype_changes_nothing(probe),
    }
    for name, run in cases.items():
        try:
            run()
            yield name, "passed"
        except Exception:  # an assertion, or any error: the test fails
            yield name, "FAILED"


def main() -> int:
    import sglang

    scratch = Path(tempfile.mkdtemp(prefix="dtype-mutants-"))
    try:
        patched = scratch / "patched"
        shutil.copytree(Path(sglang.__file__).parent, patched / "sglang",
                        ignore=shutil.ignore_patterns("__pycache__"))
        assert cli_main(["apply", "--quiet", str(patched / "sglang")]) == 0
        stub = scratch / "stub"
        stub.mkdir()
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so.1"),
                        str(STUB_SOURCE)], check=True)
        cases = scratch / "cases"
        cases.mkdir()
        # the probe's other sections need one pair; the dtype tests read only start_up_dtypes
        name, pair, algorithm = tests.CASES[0]
        draft, target = tests._folders(pair)
        (cases / "pairs.json").write_text(json.dumps(
            [{"name": name, "draft": str(draft), "target": str(target), "algorithm": algorithm}]
        ))
        (cases / "start_up.json").write_text("[]")
        (cases / "dtypes.json").write_text(json.dumps(tests.dtype_cases(cases)))
        survivors = 0
        for name, (file, old, new) in MUTANTS.items():
            root = scratch / "mutant"
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(patched, root)
            path = root / "sglang" / "srt" / file
            text = path.read_text()
            if text.count(old) != 1:
                print(f"{name}: the text to mutate is not in {file} exactly once")
                return 2
            path.write_text(text.replace(old, new))
            result = run_python(root, stub, [str(SUPPORT / "probe_patched.py"),
                                             *(str(cases / f) for f in ("pairs.json", "start_up.json", "dtypes.json"))])
            probe = probe_json(result)
            outcomes = dict(dtype_tests(probe))
            for test, outcome in outcomes.items():
                print(f"{name}: {test}: {outcome}")
            killed = "FAILED" in outcomes.values()
            survivors += not killed
            print(f"{name}: {'killed' if killed else 'SURVIVED'}")
        return 1 if survivors else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
