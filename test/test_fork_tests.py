"""The tests the patch adds to a fork, tested here: the CPU unit test passes on the patched tree
run as SGLang's CI runs it (`python3 <file>`, no GPU, no libcuda) and fails on every mutant of
that tree; the GPU end-to-end test imports, is registered, and builds the right servers.

The mutants (test/support/mutants.py) put one routed sizing site back to its 0.5.11 expression,
or break one rule of the contract in the inserted code. Each is a separate `python3 <file>`
run, two at a time. The table of which test killed which mutant is docs/fork-tests.md; set
SGLANG_EAGLE_SIZING_WRITE_FORK_TESTS_DOC=1 to rewrite it from a run.
"""

from __future__ import annotations

import ast
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, SUPPORT, probe_json, run_python
from sglang_eagle_sizing.sites import SITES

sys.path.insert(0, str(SUPPORT))
from mutants import (
    all_mutants,
    mutant_root,
    mutation_table,
    run_test_file,
    with_table,
)

INSERTED = REPO / "python" / "sglang_eagle_sizing" / "inserted_tests"
CPU_TEST = INSERTED / "test/registered/unit/speculative/test_eagle_hidden_sizing.py"
GPU_TEST = INSERTED / "test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py"
DOC = REPO / "docs" / "fork-tests.md"
PARALLEL_RUNS = 2
#: Mutants only the GPU test can kill, with the reason (docs/fork-tests.md lists them too).
GPU_ONLY: dict[str, str] = {}


def test_inserted_tests_are_the_two_files():
    """apply adds exactly these two files to a checkout (the folder's README.md is not one)."""
    from sglang_eagle_sizing.patch import inserted_test_files

    files = sorted(inserted_test_files())
    assert files == sorted(p.relative_to(INSERTED).as_posix() for p in (CPU_TEST, GPU_TEST))


def test_registered_in_sglang_suites():
    from sglang.test.ci.ci_register import HWBackend, collect_tests

    registries = collect_tests([str(CPU_TEST), str(GPU_TEST)], sanity_check=True)
    found = {(Path(r.filename).name, r.backend, r.suite, r.nightly, r.disabled) for r in registries}
    assert found == {
        (CPU_TEST.name, HWBackend.CPU, "stage-a-test-cpu", False, None),
        (GPU_TEST.name, HWBackend.CUDA, "stage-b-test-1-gpu-small", False, None),
    }


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_cpu_test_imports_no_worker_module():
    """Worker, graph-runner and scheduler modules import sgl_kernel, which needs a GPU driver;
    the CPU file reads those modules as text (its structural guard) and never imports them."""
    imported = _imported_modules(CPU_TEST)
    heavy = {m for m in imported if m.endswith(("_worker", "_worker_v2", "cuda_graph_runner", "scheduler"))}
    assert heavy == set()
    assert "sglang_eagle_sizing" not in {m.split(".")[0] for m in imported}


@pytest.fixture(scope="module")
def mutation_runs(pristine, patched_root, tmp_path_factory):
    """The CPU file on the patched tree, then on every mutant, two runs at a time."""
    started = time.monotonic()
    baseline = run_test_file(patched_root, CPU_TEST)  # also compiles the tree's bytecode
    mutants = all_mutants(pristine / "srt", patched_root / "sglang" / "srt")
    folder = tmp_path_factory.mktemp("mutants")
    roots = [mutant_root(patched_root, m, folder / f"{i:02d}") for i, m in enumerate(mutants)]
    with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
        runs = list(pool.map(lambda root: run_test_file(root, CPU_TEST), roots))
    elapsed = time.monotonic() - started
    print(
        f"\nfork CPU test: one run {baseline.seconds:.1f} s; {len(mutants)} mutants, "
        f"{PARALLEL_RUNS} at a time, {elapsed:.0f} s in all"
    )
    return baseline, list(zip(mutants, runs))


def test_cpu_test_passes_on_the_patched_tree(mutation_runs):
    baseline, _ = mutation_runs
    assert baseline.returncode == 0, baseline.output[-4000:]
    assert baseline.failed == ()
    assert baseline.tests_ran >= 20
    assert "\nOK" in baseline.output


def test_every_mutant_is_killed(mutation_runs):
    _, results = mutation_runs
    survivors = [m.name for m, run in results if run.returncode == 0 and m.name not in GPU_ONLY]
    assert survivors == []
    loads = [m.name for m, run in results if run.failed == ("(the file does not load)",)]
    assert loads == [], "a mutant must fail a test, not the import of the file"


def test_site_mutants_are_caught_by_the_structural_guard(mutation_runs):
    _, results = mutation_runs
    for mutant, run in results:
        if mutant.family == "site":
            assert "TestSizingSitesUseTheContract.test_no_inline_hidden_state_sizes" in run.failed, mutant.name


def test_mutants_cover_every_site_and_rule(mutation_runs):
    _, results = mutation_runs
    names = [m.name for m, _ in results]
    for site in SITES:
        assert any(n.startswith(f"site {site.scope}") for n in names), site.scope
    rules = [n for n in names if n.startswith("rule ")]
    for rule in ("decode width", "decode dtype", "extend width", "extend dtype",
                 "flag parser", "layer-id parser", "refusal off: validate_eagle_draft_config"):
        assert any(n.startswith(f"rule {rule}") for n in rules), rule


def test_mutation_table_in_docs_is_current(mutation_runs):
    _, results = mutation_runs
    table = mutation_table(results)
    current = DOC.read_text()
    wanted = with_table(current, table)
    if os.environ.get("SGLANG_EAGLE_SIZING_WRITE_FORK_TESTS_DOC") == "1":
        DOC.write_text(wanted)
    assert current == wanted, (
        "docs/fork-tests.md's mutation table is stale: rerun with "
        "SGLANG_EAGLE_SIZING_WRITE_FORK_TESTS_DOC=1 pytest test/test_fork_tests.py"
    )


@pytest.fixture(scope="module")
def e2e_probe(patched_root, libcuda_stub):
    result = run_python(patched_root, libcuda_stub, [str(SUPPORT / "e2e_server_args_probe.py"), str(GPU_TEST)])
    assert result.returncode == 0, result.stderr[-4000:]
    return probe_json(result)


def test_gpu_test_imports_against_the_patched_tree(e2e_probe):
    assert e2e_probe["module_file"] == str(GPU_TEST)
    # SGLang 0.5.11's own EAGLE-3 test pair
    assert e2e_probe["defaults"] == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
    ]


@pytest.mark.parametrize(
    "server,overlap,spec_v2,worker",
    [("v1", False, False, "EAGLEWorker"), ("v2", True, True, "EAGLEWorkerV2")],
)
def test_gpu_test_serves_eagle3_with_each_worker(e2e_probe, server, overlap, spec_v2, worker):
    args = e2e_probe["servers"][server]
    assert args["model_path"] == e2e_probe["defaults"][0]
    assert args["speculative_algorithm"] == "EAGLE3"
    assert args["speculative_draft_model_path"] == e2e_probe["defaults"][1]
    assert args["disable_cuda_graph"] is False
    assert args["disable_overlap_schedule"] is (not overlap)
    assert args["env_spec_v2"] is spec_v2
    # 0.5.11 falls back to v1 when top-k > 1: v2 needs top-k 1
    assert args["speculative_eagle_topk"] == 1
    # every batch the test sends fits a captured CUDA graph
    assert args["cuda_graph_max_bs"] >= args["max_running_requests"]
    assert args["worker"] == worker
