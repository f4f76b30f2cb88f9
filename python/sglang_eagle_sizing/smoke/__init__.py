"""``sglang-eagle-sizing smoke [PATH]``: serve tokens from a tree on the CPU and check them.

For each case: a server from the tree (first on ``PYTHONPATH``) with tiny crafted models this
command builds; its greedy tokens must equal the same tree's run without speculation and
transformers' ``generate``, and its accept length the unpatched release's for the same case.
The tree's release family (``families/``) picks the cases, the interpreter whose environment
supplies SGLang's dependencies and the stand-ins: a 0.5.9-0.5.11 tree is served with this
interpreter (0.5.11's environment), 0.5.11's cases and stand-ins, and compared with 0.5.11; a
0.5.23 tree with ``.venv-0.5.23`` (``server.interpreter_for``), 0.5.23's cases
(``cases_0_5_23.py``) and stand-ins (``standins_0_5_23/``), and compared with 0.5.23. See
docs/smoke.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HELP = (
    "serve tiny crafted models from a tree on the CPU (EAGLE, EAGLE-3, STANDALONE) and "
    "check tokens and accept lengths against the tree without speculation, transformers "
    "and the unpatched release of its family (0.5.11 or 0.5.23)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from sglang_eagle_sizing.cli import add_allow_flag

    parser.add_argument("path", nargs="?", metavar="PATH",
                        help="the tree to serve (same forms as check); default: the installed sglang")
    parser.add_argument("--list", action="store_true",
                        help="name the cases of the tree's release family and exit")
    parser.add_argument("--case", action="append", default=[], metavar="NAME",
                        help="run this case (repeatable); default: every case")
    parser.add_argument("--pair", action="append", default=[], metavar="DIR",
                        help="also (without --case: only) serve this drafter/target pair "
                        "(DIR/draft/config.json, DIR/target/config.json) shrunk to tiny scale; "
                        "targets: Llama, Qwen2, Qwen3; Qwen3-MoE, DeepSeek-V3, GPT-OSS, Gemma-3 "
                        "through their own class; Qwen2-MoE as a dense Qwen2. Drafters: "
                        "EAGLE-3, EAGLE, STANDALONE, the speculators format (repeatable)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="do not serve the unpatched release (0.5.11, or 0.5.23 for a 0.5.23 "
                        "tree) to compare accept lengths")
    parser.add_argument("--workdir", metavar="DIR",
                        help="keep models, logs and site records here (default: a temporary folder)")
    parser.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    add_allow_flag(parser)


def run(args: argparse.Namespace) -> int:
    from sglang_eagle_sizing.cli import locate
    from sglang_eagle_sizing.smoke.cases import case_named, cases_for

    # Serving writes nothing: a tree with upstream's own refactor (0.5.12) is a comparison.
    # The tree's family decides the cases, the interpreter and the stand-ins.
    tree = locate(args, args.path, allow_upstream_refactor=True)
    family = tree.family
    family_cases = cases_for(family)
    if args.list:
        for case in family_cases:
            mark = f"  [expected to fail: {case.known_failure}]" if case.known_failure else ""
            print(f"{case.name:36} {case.description}{mark}")
        return 0
    from sglang_eagle_sizing.smoke.pair import PairError, pair_case

    try:
        cases = [case_named(n, family_cases) for n in args.case]
        if not args.case and not args.pair:
            cases = list(family_cases)
        pairs = [pair_case(Path(folder), family) for folder in args.pair]
        for case in pairs:
            # what the pair was shrunk to, and what is served in place of what (a dense
            # counterpart of a mixture-of-experts target, ...)
            print(f"{case.name}: {case.description}", file=sys.stderr)
        cases += pairs
    except KeyError as exc:
        print(f"error: no smoke case {exc.args[0]!r} for SGLang {family.name}; smoke --list "
              "names them", file=sys.stderr)
        return 2
    except PairError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = tree.package.parent
    try:
        with tempfile.TemporaryDirectory(prefix="sglang-eagle-sizing-smoke-") as scratch:
            # Absolute: the servers run from another folder and are given paths under it.
            workdir = Path(args.workdir).resolve() if args.workdir else Path(scratch)
            workdir.mkdir(parents=True, exist_ok=True)
            release = family.tested_release(tree.version.number if tree.version else None)
            report = smoke(root, cases, workdir, baseline=not args.no_baseline, family=family,
                           release=release)
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    except KeyboardInterrupt:
        print("smoke: interrupted; every server it started is stopped", file=sys.stderr)
        return 130
    print_report(report)
    return 1 if report["failed"] else 0


def cache_dir() -> Path:
    from sglang_eagle_sizing.wheel import cache_folder

    return cache_folder()


def smoke(root: Path, cases, workdir: Path, baseline: bool = True, on_case=None,
          family=None, release: str | None = None) -> dict:
    """Serve every case from ``root`` (holding ``sglang/``), a tree of ``family`` (default:
    0.5.9-0.5.11), and from the unpatched release of that family; returns the report (a
    dict). ``on_case(report)``, if given, sees the report so far after each case."""
    from sglang_eagle_sizing.families import BEFORE_REFACTOR
    from sglang_eagle_sizing.smoke.runner import (
        Models,
        progress,
        reference_case,
        reference_tokens,
        release_root,
        serve_case,
    )

    family = family or BEFORE_REFACTOR
    # the unpatched release the tree is compared with: its own where the family is tested on it
    version = release or family.known_version
    cache = cache_dir()
    built = Models(workdir / "models")
    release = release_root(cache, version) if baseline else None
    started = time.monotonic()
    # One run without speculation and one transformers reference per target.
    references: dict = {}
    plain: dict = {}
    results = []
    for index, case in enumerate(cases, 1):
        progress(f"case {index}/{len(cases)}: {case.name}")
        entry = {"case": case.name, "description": case.description,
                 "known_failure": case.known_failure, "problems": []}
        target_key = (repr(case.target), case.dtype, case.target_flags)
        if case.batches and target_key not in references:
            target_dir = built.target(case.target)
            if case.reference:
                progress(f"transformers generate on the target ({case.target.dtype})")
            from sglang_eagle_sizing.smoke.cases import ALL_BATCHES

            references[target_key] = {
                b.name: reference_tokens(target_dir, b, case.target.dtype) for b in ALL_BATCHES
            } if case.reference else {}
            plain[target_key] = serve_case(root, "tree", reference_case(case), built, workdir,
                                           cache, speculative=False, family=family)
        spec = serve_case(root, "tree", case, built, workdir, cache, family=family)
        entry["tree"] = spec.__dict__
        if release is not None and case.expect == "serve":
            entry["release"] = serve_case(release, "release", case, built, workdir, cache,
                                          family=family).__dict__
        if case.compare_capture:
            from sglang_eagle_sizing.smoke.capture import meant_states

            # what the drafter's ids mean by its format's owner, beside what each tree captured
            entry["meant"] = meant_states(case.drafter, case.target)
        problems = entry["problems"]
        if case.expect == "refuse":
            if spec.status != "refused" or case.message not in spec.error:
                problems.append(f"expected a refusal with {case.message!r}: {spec.status} {spec.error}")
        else:
            if spec.status != "served":
                problems.append(f"{spec.status}: {spec.error}")
            else:
                base = plain[target_key]
                if base.status != "served":
                    problems.append(f"the run without speculation {base.status}: {base.error}")
                for batch in case.batches:
                    got = spec.outputs.get(batch.name)
                    if base.status == "served" and got != base.outputs.get(batch.name):
                        problems.append(f"{batch.name}: tokens differ from the run without speculation")
                    if case.reference and got != references[target_key][batch.name]:
                        problems.append(f"{batch.name}: tokens differ from transformers' generate")
                if case.pd and spec.sites and case.algorithm != "STANDALONE":
                    # a tree that records calls: both servers must size their buffers by it
                    sized = {r.get("server") for r in spec.sites
                             if r["scope"] == "Scheduler.init_disaggregation"}
                    for role in sorted({"prefill", "decode"} - sized):
                        problems.append(f"the {role} server's Scheduler.init_disaggregation "
                                        "did not call the contract")
                problems += capture_problems(case, entry)
                bound = case.min_accept_length
                if bound is not None and not (spec.accept_length or 0) > bound:
                    problems.append(
                        f"accept length {spec.accept_length} is not above {bound}: the drafter "
                        "did not get the target layers it was crafted for"
                    )
                rel = entry.get("release")
                if rel and case.release_error is not None:
                    if rel["status"] == "served":
                        problems.append(f"{version} served it; it must fail"
                                        + (f" with {case.release_error!r}" if case.release_error else ""))
                    elif case.release_error not in rel["error"]:
                        problems.append(f"{version} failed with another error than "
                                        f"{case.release_error!r}: {rel['error']}")
                elif rel and rel["status"] == "served" and rel["accept_length"] != spec.accept_length:
                    problems.append(
                        f"accept length {spec.accept_length} differs from the release's {rel['accept_length']}"
                    )
        entry["passed"] = not problems
        entry["expected_failure"] = is_expected_failure(case, problems)
        results.append(entry)
        if on_case is not None:
            on_case(_report(root, results, plain, started, family, version))
    return _report(root, results, plain, started, family, version)


def capture_problems(case, entry: dict) -> list[str]:
    """What the served target captured (``capture.py``) against what it must: a speculators
    drafter's ids are ``output_hidden_states`` indices on every class (issue 35); SGLang's ids
    (SpecForge) keep the meaning the unpatched release gives them on the class, so the tree
    must capture the layers the release captured when both served, as hidden states: a layer's
    branch without its residual is not what a drafter is trained on (0.5.23's Gemma-3)."""
    if not case.compare_capture:
        return []
    got = entry["tree"].get("capture") or {}
    if "captured" not in got:
        return [f"capture not compared: {got.get('error', 'nothing recorded')}"]
    if not got.get("consistent", True):
        return [f"the prompts of one prefill captured different hidden states: {got}"]
    if case.drafter.format == "speculators":
        meant = entry.get("meant")
        if meant is not None and got["captured"] != meant:
            return [f"captured hidden states {got['captured']}; the speculators drafter's ids "
                    f"mean {meant} (output_hidden_states indices)"]
        return []
    branches = [label for label in got["captured"] if _branch_layer(label) is not None]
    if branches:
        return [f"captured {got['captured']}: {', '.join(branches)} not a hidden state the "
                "drafter was trained on (a layer's branch without its residual)"]
    release = (entry.get("release") or {}).get("capture") or {}
    if "captured" in release and _layers(release["captured"]) != got["captured"]:
        return [f"captured hidden states {got['captured']}; the unpatched release captured "
                f"{release['captured']} for the same SGLang-format ids"]
    return []


def _branch_layer(label) -> int | None:
    """``j`` for ``mlp-branch-of-layer-j`` (``capture.py``), else None."""
    prefix = "mlp-branch-of-layer-"
    if isinstance(label, str) and label.startswith(prefix):
        return int(label.removeprefix(prefix))
    return None


def _layers(labels: list) -> list:
    """The release's labels with a layer's branch read as the hidden state of that layer's
    output (``j + 1``): which layers it captured, whatever tensor of them it handed on."""
    return [
        label if _branch_layer(label) is None else str(_branch_layer(label) + 1)
        for label in labels
    ]


def is_expected_failure(case, problems: list[str]) -> bool:
    """Whether a case failed the way it is known to: every problem names its known error.
    A known failure that fails with another error (a config that no longer loads, a new
    crash) is a failure."""
    if not (case.known_failure and case.known_error and problems):
        return False
    return all(case.known_error in problem for problem in problems)


def _report(root: Path, results: list, plain: dict, started: float, family,
            version: str) -> dict:
    failed = [e["case"] for e in results if not e["passed"] and not e["expected_failure"]]
    return {
        "root": str(root),
        # the tree's release family, and the unpatched release its cases are compared with
        "family": family.name,
        "release": version,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cases": results,
        "plain": {" ".join((k[0], k[1], *k[2])): v.__dict__ for k, v in plain.items()},
        "failed": failed,
        "seconds": time.monotonic() - started,
    }


def print_report(report: dict) -> None:
    from sglang_eagle_sizing import families
    from sglang_eagle_sizing.smoke.runner import site_hits

    release = report.get("release", families.BEFORE_REFACTOR.known_version)
    family = next(f for f in families.FAMILIES if release in f.tested_versions)
    # 0.5.23 has no sizing site of this patch's: every site calls upstream's helpers, whose
    # recorded callers are listed below the table
    before = bool(family.sites)
    rows = [("case", "tokens equal", f"accept length (tree / {release})",
             "sizing sites run" if before else "helper callers", "time", "result")]
    for entry in report["cases"]:
        tree = entry["tree"]
        rel = entry.get("release") or {}
        if tree["status"] == "refused":
            tokens = "-"
        else:
            tokens = "yes" if tree["status"] == "served" and not any(
                "tokens differ" in p for p in entry["problems"]) else "NO"
        accept = lambda r: (f"{r['accept_length']:.3f}" if r.get("accept_length") else
                            (r.get("status") or "-"))
        result = "ok" if entry["passed"] else (
            "expected failure" if entry["expected_failure"] else "FAIL")
        if entry["passed"] and entry["known_failure"]:
            result = "ok (known failure fixed)"
        hits = site_hits(tree["sites"], family) if before else {
            (r["file"], r["scope"]) for r in tree["sites"]}
        rows.append((entry["case"], tokens, f"{accept(tree)} / {accept(rel) if rel else '-'}",
                     str(len(hits)), f"{tree['seconds']:.0f} s", result))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print()
    if before:
        print("sizing sites:")
        for site in family.sites:
            label = f"{site.file} {site.scope}"
            ran = [e["case"] for e in report["cases"] if label in site_hits(e["tree"]["sites"], family)]
            why = f"ran in {', '.join(ran)}" if ran else f"not run: {family.smoke.unreachable_reason(site)}"
            print(f"  {label}: {why}")
    support = {}
    for entry in report["cases"]:
        for record in entry["tree"]["sites"]:
            if not before or family.site_for(record["file"], record["scope"]) is None:
                key = f"{record['function']} <- {record['file']}:{record['line']} {record['scope']}"
                support.setdefault(key, entry["case"])
    if support:
        print("supporting code run (function <- caller: first case):" if before else
              "sizing helpers and parser run (function <- caller: first case):")
        for key, case in support.items():
            print(f"  {key}: {case}")
    for entry in report["cases"]:
        if entry["problems"]:
            print(f"\n{entry['case']}: " + "; ".join(entry["problems"]))
            tail = entry["tree"].get("log_tail")
            if tail and not entry["passed"]:
                print("server log tail:\n" + tail)
    status = "FAILED: " + ", ".join(report["failed"]) if report["failed"] else "all cases as expected"
    print(f"\nsmoke: {status} ({report['seconds']:.0f} s)")
