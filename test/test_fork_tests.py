"""The tests the patch adds to a fork, tested here: the CPU unit tests (one folder, a file per
concern) pass on the patched tree run as SGLang's CI runs them (`python3 <file>`, no GPU, no
libcuda; here all the files in one process, support/run_fork_tests.py) and fail on every mutant
of that tree; the GPU end-to-end test imports, is registered, and builds the right servers.

The mutants (test/support/mutants.py) put one routed sizing site back to its 0.5.11 expression,
break one rule of the contract in the inserted code, break a path around the sites (the target's
capture, the PD buffers, the workers' start-up and idle inputs), or make a change that is not a
bug (an unrelated buffer, a benign refactor such as black at another line length, or a site put
back where 0.5.11's expression computes what the classmethods do: these must pass). Each is a separate `python3 <file>` run, two at a time. CI runs the
sample CI_SAMPLE; scripts/fork_mutation_table.py runs them all and writes the table of
docs/fork-tests.md, whose sampled rows this file checks.
"""

from __future__ import annotations

import ast
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, SUPPORT, probe_json, run_python
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind
from sglang_eagle_sizing.families import BEFORE_REFACTOR

sys.path.insert(0, str(SUPPORT))
from mutants import (
    NOT_BUGS,
    Mutant,
    all_mutants,
    mutant_root,
    mutation_table,
    run_test_file,
    table_rows,
    with_harness,
)

INSERTED = REPO / "python" / "sglang_eagle_sizing" / "families" / "release_0_5_11" / "inserted_tests"
#: the fork's CPU tests: a folder (fork_test_slices.CPU_TEST_DIR)
CPU_TESTS = INSERTED / "test/registered/unit/speculative/eagle_hidden_sizing"
CPU_TEST_FILES = sorted(CPU_TESTS.glob("test_*.py"))
#: the harness they import (fork_test_slices.HARNESS_DIR: a module of SGLang's sglang.test)
HARNESS_MODULES = sorted((INSERTED / "python/sglang/test/speculative/eagle_hidden_sizing").glob("*.py"))
GPU_TEST = INSERTED / "test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py"
DOC = REPO / "docs" / "fork-tests.md"
PARALLEL_RUNS = 2
#: Mutants only the GPU test can kill, with the reason (docs/fork-tests.md lists them too).
GPU_ONLY: dict[str, str] = {}
#: The rules of the contract each have mutants (names start with "rule <family>").
RULE_FAMILIES = (
    "decode width",
    "decode dtype",
    "extend width",
    "extend dtype",
    "flag parser",
    "layer-id parser",
    "runner resolution",
    "refusal off",
    "start-up",
)
#: The mutants CI runs (scripts/fork_mutation_table.py runs them all): one per site kind
#: and rule family, the paths the CPU test reaches through the real workers (the three it
#: kills by behaviour where it once read source text among them), the false alarm and the
#: benign refactor a textual guard would fail on, a site put back that changes no behaviour,
#: and a speculators-format drafter whose
#: ids are renumbered as SGLang's (the hidden state before each).
#: test_ci_sample_covers_every_rule_and_site_kind keeps it covering.
CI_SAMPLE = (
    "site EAGLEWorker.forward_draft_extend_after_decode",
    "site EagleVerifyInput.verify #1",
    "site EAGLEDraftExtendCudaGraphRunner.__init__ #1",
    "site Scheduler.init_disaggregation #2",
    "site LlamaModel.__init__",
    "rule decode width: hidden_size",
    "rule decode dtype: the target's",
    "rule extend width: always 3 aux layers",
    "rule extend dtype: the target's",
    "rule flag parser: drafter's flag ignored",
    "rule layer-id parser: ids ignored",
    "rule runner resolution: model_runner only",
    "rule refusal off: validate_eagle_draft_config (target_hidden_size)",
    "rule start-up: EagleDraftWorker.__init__ as in 0.5.11",
    "target capture: layer ids shifted by one",
    "idle: v2 draft-extend input without a pointer row",
    "padded draft metadata: built for the unpadded batch",
    "PD buffers: prefill side takes the extend width without aux",
    "speculators config: ids renumbered as SGLang's",
    "not a bug: a DFLASH buffer",
    "benign: the PD condition's operands swapped",
)


def test_inserted_tests_are_the_cpu_folder_and_the_gpu_file():
    """apply adds exactly these files to a checkout (the folder's README.md is not one): the
    CPU folder, one test file per concern of TEST_CONCERNS, the harness they share (in
    SGLang's test package, HARNESS_DIR), and the GPU test."""
    from sglang_eagle_sizing.families.release_0_5_11.fork_test_slices import (
        HARNESS,
        HARNESS_DIR,
        TEST_CONCERNS,
    )
    from sglang_eagle_sizing.patch import inserted_test_files

    files = sorted(inserted_test_files(BEFORE_REFACTOR))
    cpu = sorted(p.relative_to(INSERTED).as_posix() for p in CPU_TESTS.glob("*.py"))
    harness = sorted(p.relative_to(INSERTED).as_posix() for p in HARNESS_MODULES)
    assert files == sorted([*cpu, *harness, GPU_TEST.relative_to(INSERTED).as_posix()])
    assert sorted(p.name for p in CPU_TESTS.glob("*.py")) == sorted(["__init__.py", *TEST_CONCERNS])
    assert harness == sorted(f"{HARNESS_DIR}/{name}" for name in HARNESS)


def test_cpu_files_are_the_size_of_their_neighbours():
    """As SGLang's unit tests are (test/registered/unit/): a test file at most 250 lines, a
    harness module at most 400."""
    from sglang_eagle_sizing.families.release_0_5_11.fork_test_slices import HARNESS

    for path in (*CPU_TESTS.glob("*.py"), *HARNESS_MODULES):
        limit = 400 if path.name in HARNESS else 250
        assert len(path.read_text().splitlines()) <= limit, path.name


def test_inserted_tests_do_not_read_source_text():
    """They test behaviour: neither parses nor reads a module's source, which an upstream
    refactor that changes no behaviour would break."""
    for path in (*CPU_TESTS.glob("*.py"), *HARNESS_MODULES, GPU_TEST):
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"ast", "inspect", "tokenize", "libcst"}, path.name


def test_registered_in_sglang_suites():
    """Each CPU test file registered in the CPU suite with its own measured est_time; the
    harness modules are not test files."""
    from sglang.test.ci.ci_register import HWBackend, collect_tests

    registries = collect_tests([*map(str, CPU_TEST_FILES), str(GPU_TEST)], sanity_check=True)
    found = {(Path(r.filename).name, r.backend, r.suite, r.nightly, r.disabled) for r in registries}
    assert found == {
        *((p.name, HWBackend.CPU, "stage-a-test-cpu", False, None) for p in CPU_TEST_FILES),
        (GPU_TEST.name, HWBackend.CUDA, "stage-b-test-2-gpu-large", False, None),
    }
    assert all(r.est_time > 0 for r in registries)


def _imported_modules(path: Path) -> list[str]:
    modules = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
    return modules


def test_cpu_test_stubs_sgl_kernel_before_the_worker_modules():
    """The CPU files import the real worker, scheduler and model-runner modules (themselves
    or through the harness); on a CPU runner ``sgl_kernel`` cannot load (no libcuda), so
    each test file calls SGLang's own ``maybe_stub_sgl_kernel()`` before its first import
    of SGLang's modules or of the harness (releases without it, 0.5.9, get it from
    ``support/older_release_compat.py``)."""
    imported: list[str] = []
    for path in (*CPU_TESTS.glob("*.py"), *HARNESS_MODULES):
        imported += _imported_modules(path)
        if path not in CPU_TEST_FILES:
            continue
        tree = ast.parse(path.read_text())
        stub_line = next(
            node.lineno
            for node in tree.body
            if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "maybe_stub_sgl_kernel"
        )
        heavy = [
            node.lineno
            for node in tree.body
            if isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith(("sglang.srt.", "sglang.test.speculative."))
        ]
        assert heavy and stub_line < min(heavy), path.name
    for module in (
        "sglang.srt.speculative.eagle_worker",
        "sglang.srt.speculative.eagle_worker_v2",
        "sglang.srt.speculative.multi_layer_eagle_worker",
        "sglang.srt.speculative.multi_layer_eagle_worker_v2",
        "sglang.srt.managers.scheduler",
        "sglang.srt.model_executor.model_runner",
    ):
        assert module in imported
    assert "sglang_eagle_sizing" not in {m.split(".")[0] for m in imported}


def _sample(mutants: list[Mutant]) -> list[Mutant]:
    by_name = {m.name: m for m in mutants}
    missing = [n for n in CI_SAMPLE if n not in by_name]
    assert missing == [], f"CI_SAMPLE names mutants that no longer exist: {missing}"
    return [by_name[n] for n in CI_SAMPLE]


@pytest.fixture(scope="module")
def all_mutants_of_the_tree(pristine, patched_root) -> list[Mutant]:
    return all_mutants(pristine / "srt", patched_root / "sglang" / "srt")


@pytest.fixture(scope="module")
def mutation_runs(patched_root, all_mutants_of_the_tree, libcuda_stub, tmp_path_factory):
    """The CPU files on the patched tree (as SGLang's CPU CI runs them: no libcuda, so
    ``maybe_stub_sgl_kernel`` stubs sgl_kernel; and with the libcuda stub, so the real
    sgl_kernel imports), then on the CI sample of the mutants, two runs at a time; each run
    one process running every file."""
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("mutants")
    fork_root = with_harness(patched_root, folder / "patched")
    baseline = run_test_file(fork_root, CPU_TESTS)  # also compiles the tree's bytecode
    with_stub = run_test_file(fork_root, CPU_TESTS, libcuda=libcuda_stub)
    mutants = _sample(all_mutants_of_the_tree)
    roots = [mutant_root(fork_root, m, folder / f"{i:02d}") for i, m in enumerate(mutants)]
    with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
        runs = list(pool.map(lambda root: run_test_file(root, CPU_TESTS, libcuda=libcuda_stub), roots))
    elapsed = time.monotonic() - started
    print(
        f"\nfork CPU tests: one run {baseline.seconds:.1f} s; {len(mutants)} sampled mutants, "
        f"{PARALLEL_RUNS} at a time, {elapsed:.0f} s in all\n"
        + mutation_table(list(zip(mutants, runs)))
    )
    return (baseline, with_stub), list(zip(mutants, runs))


def test_cpu_test_passes_on_the_patched_tree(mutation_runs):
    for run in mutation_runs[0]:
        assert run.returncode == 0, run.output[-4000:]
        assert run.failed == ()
        assert run.tests_ran >= 40
        assert "\nOK" in run.output


def test_sampled_mutants_are_killed(mutation_runs):
    _, results = mutation_runs
    survivors = [
        m.name
        for m, run in results
        if run.returncode == 0 and m.family not in NOT_BUGS and m.name not in GPU_ONLY
    ]
    assert survivors == []
    loads = [m.name for m, run in results if run.failed == ("(the file does not load)",)]
    assert loads == [], "a mutant must fail a test, not the import of the file"


def test_mutants_that_are_not_bugs_pass(mutation_runs):
    _, results = mutation_runs
    alarms = [(m.name, run.failed) for m, run in results if m.family in NOT_BUGS and run.returncode != 0]
    assert alarms == []


def test_mutants_cover_every_site_and_rule(all_mutants_of_the_tree):
    names = [m.name for m in all_mutants_of_the_tree]
    for site in SITES:
        assert any(n.startswith(f"site {site.scope}") for n in names), site.scope
    rules = [n for n in names if n.startswith("rule ")]
    for rule in RULE_FAMILIES:
        assert any(n.startswith(f"rule {rule}") for n in rules), rule
    assert {m.family for m in all_mutants_of_the_tree} == {"site", "rule", "path", *NOT_BUGS}


def test_ci_sample_covers_every_rule_and_site_kind(all_mutants_of_the_tree):
    sample = _sample(all_mutants_of_the_tree)
    assert {m.kind for m in sample if m.name.startswith("site ")} == {kind.value for kind in Kind}
    for rule in RULE_FAMILIES:
        assert any(m.name.startswith(f"rule {rule}") for m in sample), rule
    assert {m.family for m in sample} == {"site", "rule", "path", *NOT_BUGS}
    assert len(sample) <= 21  # about 2.5 minutes on two cores


def test_mutation_table_in_docs_is_current(all_mutants_of_the_tree, mutation_runs):
    """The table (scripts/fork_mutation_table.py writes it) lists every mutant, and the
    rows of the sampled mutants are what this run produced."""
    current = DOC.read_text()
    rows = table_rows(current)
    assert [row.split("`")[1] for row in rows] == [m.name for m in all_mutants_of_the_tree], (
        "docs/fork-tests.md's mutation table is stale: run scripts/fork_mutation_table.py"
    )
    _, results = mutation_runs
    sampled = mutation_table(results).splitlines()
    for line in sampled:
        if line.startswith("| `"):
            assert line in rows, f"stale row (run scripts/fork_mutation_table.py): {line}"


@pytest.fixture(scope="module")
def e2e_probe(patched_root, libcuda_stub):
    result = run_python(patched_root, libcuda_stub, [str(SUPPORT / "e2e_server_args_probe.py"), str(GPU_TEST)])
    assert result.returncode == 0, result.stderr[-4000:]
    return probe_json(result)


def test_gpu_test_imports_against_the_patched_tree(e2e_probe):
    assert e2e_probe["module_file"] == str(GPU_TEST)
    assert 0 < e2e_probe["request_timeout"] <= 300


def test_gpu_test_builds_its_models_offline(e2e_probe):
    """The file writes a tiny pair itself (the probe runs with HF_HUB_OFFLINE=1): a float16
    drafter, narrower than its bfloat16 target, naming four of its layers, which the
    patched tree's start-up validation accepts."""
    folder = e2e_probe["models_under"]
    assert all(path.startswith(folder) for path in e2e_probe["models"])
    assert e2e_probe["dtypes"] == ["bfloat16", "float16"]
    assert e2e_probe["hidden_sizes"] == [256, 128]
    assert len(e2e_probe["aux_layer_ids"]) == 4
    assert e2e_probe["validated"] is True


def test_gpu_tests_do_not_rely_on_their_order(e2e_probe):
    """No test is named to run before another (``test_a_...``): each stands alone."""
    for server in e2e_probe["servers"].values():
        assert len(server["tests"]) == 3
        assert not any(re.match(r"test_[a-z]_", name) for name in server["tests"]), server["tests"]


@pytest.mark.parametrize(
    "server,overlap,worker",
    [
        ("TestEagle3DpAttentionIdleRankV1", False, "EAGLEWorker"),
        ("TestEagle3DpAttentionIdleRankV2", True, "EAGLEWorkerV2"),
    ],
)
def test_gpu_test_serves_eagle3_under_dp_attention(e2e_probe, server, overlap, worker):
    args = e2e_probe["servers"][server]
    assert args["model_path"] == e2e_probe["models"][0]
    assert args["speculative_algorithm"] == "EAGLE3"
    assert args["speculative_draft_model_path"] == e2e_probe["models"][1]
    # the tiny models have no tokenizer
    assert args["skip_tokenizer_init"] is True
    # each model keeps its own dtype
    assert args["dtype"] == "auto"
    # two attention-DP ranks on two GPUs: one request leaves a rank idle
    assert (args["tp_size"], args["dp_size"], args["enable_dp_attention"]) == (2, 2, True)
    assert args["disable_cuda_graph"] is False
    assert args["disable_overlap_schedule"] is (not overlap)
    # 0.5.11 falls back to v1 when top-k > 1: v2 needs top-k 1
    assert args["speculative_eagle_topk"] == 1
    # every batch the test sends fits a captured CUDA graph
    assert args["cuda_graph_max_bs"] >= args["max_running_requests"]
    assert args["worker"] == worker
    # EagleServerBase's teardown waits for the server to exit
    assert args["tear_down_waits"] is True
