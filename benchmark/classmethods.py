"""Cost of the sizing classmethods next to the idle input they size, in one process.

An idle input is built as ``EagleDraftInput.create_idle_input(hidden_size=<Phase>.hidden_size_for
(worker), dtype=<Phase>.dtype_for(worker), ...)``: the classmethods run once per idle input. This
times, side by side in one process and on the same objects, both classmethods of each phase and
the ``create_idle_input`` call they feed (CPU tensors: this machine has no GPU), and prints the
ratio. It also times 0.5.11's inline attribute reads at the same sites, for scale.

Runs in a scratch copy of the installed SGLang, patched by this tool (never the installed one).
The worker is a v1 ``EAGLEWorker`` made with ``__new__`` (its ``__init__`` loads models) holding
what a patched worker's ``__init__`` sets (``eagle_use_aux_hidden_state``,
``eagle_num_aux_hidden_states``, through the same inserted functions), with real ``ModelConfig``s
of the bundled llama3.1-8b EAGLE-3 pair; its draft runner is a namespace holding the draft
``ModelConfig``. The worker module's import needs ``libcuda.so.1``; a stub is compiled as the
test suite does."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO, TOOL, machine, run, scratch_copy

PAIR = REPO / "python" / "sglang_eagle_sizing" / "data" / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"

INNER = r"""
import json, logging, sys, timeit, warnings
from types import SimpleNamespace as NS

logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.spec_info import (
    SpeculativeAlgorithm,
    get_eagle_num_aux_hidden_states,
    parse_eagle_use_aux_hidden_state,
)

draft = ModelConfig(sys.argv[1] + "/draft", is_draft_model=True)
target = ModelConfig(sys.argv[1] + "/target")
worker = EAGLEWorker.__new__(EAGLEWorker)
worker._model_runner = NS(model_config=draft)
worker.target_worker = NS(model_config=target)
worker.model_config = draft
worker.speculative_algorithm = SpeculativeAlgorithm.EAGLE3
worker.device = "cpu"
worker.topk = 1
# what the patched EAGLEWorker.__init__ sets, with the same inserted functions
worker.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(
    worker.speculative_algorithm, draft.hf_config
)
worker.eagle_num_aux_hidden_states = get_eagle_num_aux_hidden_states(draft.hf_config)


def idle(cls, hidden_size, dtype):
    return cls.create_idle_input(
        device="cpu", hidden_size=hidden_size, dtype=dtype, topk=1,
        capture_hidden_mode=CaptureHiddenMode.LAST,
    )


w, mc = worker, draft
cases = {
    "decode": (
        lambda: (EagleDraftInput.hidden_size_for(w), EagleDraftInput.dtype_for(w)),
        lambda: (w.model_config.spec_hidden_size, w.model_config.dtype),
        lambda: idle(EagleDraftInput, 4096, mc.dtype),
    ),
    "extend (EAGLE-3 with aux)": (
        lambda: (EagleDraftExtendInput.hidden_size_for(w), EagleDraftExtendInput.dtype_for(w)),
        lambda: (
            w.model_config.hidden_size * 3
            if w.speculative_algorithm.is_eagle3() and w.eagle_use_aux_hidden_state
            else w.model_config.spec_hidden_size,
            w.model_config.dtype,
        ),
        lambda: idle(EagleDraftExtendInput, 12288, mc.dtype),
    ),
}
out = {}
for name, calls in cases.items():
    number = 20000
    # interleaved repeats, best of each: the three run under the same load
    best = [float("inf")] * 3
    for _ in range(7):
        for i, call in enumerate(calls):
            best[i] = min(best[i], timeit.timeit(call, number=number) / number * 1e9)
    out[name] = best
print(json.dumps(out))
"""


def libcuda_stub() -> str:
    folder = tempfile.mkdtemp(prefix="eagle-sizing-libcuda-")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", os.path.join(folder, "libcuda.so.1"),
         str(REPO / "python" / "sglang_eagle_sizing" / "smoke" / "libcuda_stub.c")],
        check=True,
    )
    return folder


def main() -> None:
    import json

    root = scratch_copy()
    assert run([*TOOL, "apply", "-q", str(root / "sglang")]).returncode == 0
    env = dict(
        os.environ,
        PYTHONPATH=str(root),
        LD_LIBRARY_PATH=os.pathsep.join(filter(None, [libcuda_stub(), os.environ.get("LD_LIBRARY_PATH")])),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    result = run([sys.executable, "-c", INNER, str(PAIR)], env=env, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    print(f"machine: {machine()}")
    print(
        f"{'phase':28} {'hidden_size_for + dtype_for':>28} {'inline 0.5.11':>14} "
        f"{'create_idle_input':>18} {'classmethods / idle input':>26}"
    )
    for name, (both, inline, idle) in json.loads(result.stdout.splitlines()[-1]).items():
        print(
            f"{name:28} {both:25.0f} ns {inline:11.0f} ns {idle:15.0f} ns {both / idle:25.1%}"
        )
    print("both classmethods are read once per idle input (and once per CUDA-graph buffer at start-up)")


if __name__ == "__main__":
    main()
