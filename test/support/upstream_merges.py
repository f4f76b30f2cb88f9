"""Upstream merges as a fork lives them, for ``test/test_upstream_merges.py`` and
``benchmark/upstream_merges.py``: a git checkout of the release tagged ``v<release>``, the
patch applied and committed, then an upstream branch made from the tag, one upstream-style
commit on it that moves code the patch touched, merged into the fork with conflicts resolved
upstream's way (``git merge -X theirs``, a maintainer taking upstream's side of each hunk).

Three commits per release family:

- **a capture rule changed in one model file**. 0.5.23: GPT-OSS stops capturing its final
  hidden-state boundary (ids no longer kept when they end at the layer count, no capture after
  the last layer), which the patch's ``captures_final_hidden_state = True`` says it does.
  0.5.11: the EAGLE-3 drafter's ``fc`` (``models/llama_eagle3.py``, which the patch sizes by
  the aux-layer count) gets upstream's new ``bias=False``;
- **the parser's function renamed**. 0.5.23: ``_resolve_eagle_aux_hidden_state``, where the
  target reads the drafter's layer ids (which the patch makes ask its parser), becomes
  ``_resolve_eagle3_aux_hidden_state``. 0.5.11: ``EAGLEWorker._draft_preprocess_idle``, a
  sizing site's method, becomes ``_prepare_idle_draft``;
- **the speculators loader's call moved**. 0.5.23: ``HfModelConfigParser.parse``'s chain of
  config loaders (before whose ``AutoConfig`` fallback the patch calls the speculators loader)
  moves into a helper, ``_load_hf_config``; and, a lighter move, upstream adds a loader of its
  own where the patch calls the speculators loader (the merge, taking upstream's side, drops
  the patch's call, which ``apply`` puts back).
  0.5.11: ``get_config``'s ``AutoConfig.from_pretrained`` call (which the patch turns into
  ``auto_config_or_speculators_eagle3``) moves into a helper, ``_auto_config``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SRT = "python/sglang/srt/"
HOOK_ID = "sglang-eagle-sizing-check"


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=cwd, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


@dataclass(frozen=True)
class Merge:
    release: str
    #: what upstream's commit does (its subject)
    name: str
    #: the file it moves code of, from the checkout root
    file: str
    edit: Callable[[Path], None]
    #: on a tree ``check`` accepts after the merge: whether the patch's piece is whole there
    whole: Callable[[Path], bool]


# -- 0.5.23 ----------------------------------------------------------------------------------
GPT_OSS = SRT + "models/gpt_oss.py"
CAPTURE = SRT + "model_executor/model_runner_components/spec_aux_hidden_state.py"
CONFIG_0_5_23 = SRT + "utils/hf_transformers/config.py"
FLAG = "captures_final_hidden_state = True"


def gpt_oss_drops_the_final_boundary(fork: Path) -> None:
    model = fork / GPT_OSS
    replace_once(
        model,
        "            # Preserve IDs that already include the final hidden-state\n"
        "            # boundary; otherwise retain the legacy output-layer conversion.\n"
        "            if layer_ids and max(layer_ids) == num_layers:\n"
        "                self.model.layers_to_capture = list(layer_ids)\n"
        "            else:\n"
        "                self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
        "            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
    )
    replace_once(
        model,
        "                    capture=aux_hidden_states.capture\n"
        "                    if self.end_layer in self.layers_to_capture\n"
        "                    else None,\n",
        "",
    )
    replace_once(
        model,
        "            elif self.end_layer in self.layers_to_capture:\n"
        "                aux_hidden_states.append(\n"
        "                    residual_batch.snapshot(hidden_states, forward_batch)\n"
        "                )\n",
        "",
    )


def _gpt_oss_flag_tells_the_truth(fork: Path) -> bool:
    text = (fork / GPT_OSS).read_text()
    return FLAG not in text or "if self.end_layer in self.layers_to_capture" in text


def resolver_renamed(fork: Path) -> None:
    path = fork / CAPTURE
    text = path.read_text()
    assert text.count("_resolve_eagle_aux_hidden_state(") == 2
    path.write_text(
        text.replace("_resolve_eagle_aux_hidden_state(", "_resolve_eagle3_aux_hidden_state(")
    )


def _capture_asks_the_parser(fork: Path) -> bool:
    text = (fork / CAPTURE).read_text()
    return "parse_eagle3_draft_config(" in text and '"eagle_aux_hidden_state_layer_ids"' not in text


_CHAIN_0_5_23 = (
    "        config = _try_load_longcat_config(model, revision, **kwargs)\n"
    "        if config is None:\n"
    "            config = _try_load_raw_mamba_config(model, revision, **kwargs)\n"
)
_AUTO_0_5_23 = (
    "        if config is None:\n"
    "            config = AutoConfig.from_pretrained(\n"
    "                model,\n"
    "                trust_remote_code=trust_remote_code,\n"
    "                revision=revision,\n"
    "                **kwargs,\n"
    "            )\n"
)


def loader_chain_moves_into_a_helper(fork: Path) -> None:
    path = fork / CONFIG_0_5_23
    replace_once(
        path,
        _CHAIN_0_5_23 + _AUTO_0_5_23,
        "        config = _load_hf_config(model, trust_remote_code, revision, **kwargs)\n",
    )
    helper = "".join(line[4:] + "\n" for line in (_CHAIN_0_5_23 + _AUTO_0_5_23).splitlines())
    replace_once(
        path,
        '@register_model_config_parser("hf")\n',
        "def _load_hf_config(model, trust_remote_code, revision, **kwargs):\n"
        + helper
        + "    return config\n\n\n"
        '@register_model_config_parser("hf")\n',
    )


def another_special_loader(fork: Path) -> None:
    """Upstream adds its own ``_try_load_*`` fallback where the patch added its call."""
    replace_once(
        fork / CONFIG_0_5_23,
        _CHAIN_0_5_23,
        _CHAIN_0_5_23
        + "        if config is None:\n"
        "            config = _try_load_nemotron_config(model, revision, **kwargs)\n",
    )


def _speculators_before_auto_config(fork: Path) -> bool:
    text = (fork / CONFIG_0_5_23).read_text()
    call = "config = _try_load_speculators_eagle3_config("
    auto = "config = AutoConfig.from_pretrained("
    return call in text and text.index(call) < text.index(auto)


# -- 0.5.11 ----------------------------------------------------------------------------------
DRAFTER = SRT + "models/llama_eagle3.py"
WORKER = SRT + "speculative/eagle_worker.py"
CONFIG_0_5_11 = SRT + "utils/hf_transformers/config.py"


def drafter_fc_without_bias(fork: Path) -> None:
    replace_once(
        fork / DRAFTER,
        "            config.hidden_size,\n            bias=getattr(config, \"bias\", False),\n",
        "            config.hidden_size,\n            bias=False,\n",
    )


def _fc_sized_by_the_aux_count(fork: Path) -> bool:
    text = (fork / DRAFTER).read_text()
    return "self.hidden_size_in * 3," not in text


def idle_preprocess_renamed(fork: Path) -> None:
    path = fork / WORKER
    text = path.read_text()
    assert text.count("_draft_preprocess_idle(") == 2
    path.write_text(text.replace("_draft_preprocess_idle(", "_prepare_idle_draft("))


def _idle_input_routed(fork: Path) -> bool:
    return "hidden_size=self.model_config.spec_hidden_size," not in (fork / WORKER).read_text()


def auto_config_moves_into_a_helper(fork: Path) -> None:
    path = fork / CONFIG_0_5_11
    replace_once(
        path,
        "            config = AutoConfig.from_pretrained(\n"
        "                model, trust_remote_code=trust_remote_code, revision=revision, **kwargs\n"
        "            )\n",
        "            config = _auto_config(model, trust_remote_code, revision, **kwargs)\n",
    )
    replace_once(
        path,
        "@lru_cache_frozenset(maxsize=32)\ndef get_config(\n",
        "def _auto_config(model, trust_remote_code, revision, **kwargs):\n"
        "    return AutoConfig.from_pretrained(\n"
        "        model, trust_remote_code=trust_remote_code, revision=revision, **kwargs\n"
        "    )\n\n\n"
        "@lru_cache_frozenset(maxsize=32)\ndef get_config(\n",
    )


def _speculators_read(fork: Path) -> bool:
    return "auto_config_or_speculators_eagle3(" in (fork / CONFIG_0_5_11).read_text()


MERGES = (
    Merge("0.5.23", "GPT-OSS: no final hidden-state boundary", GPT_OSS,
          gpt_oss_drops_the_final_boundary, _gpt_oss_flag_tells_the_truth),
    Merge("0.5.23", "rename _resolve_eagle_aux_hidden_state", CAPTURE,
          resolver_renamed, _capture_asks_the_parser),
    Merge("0.5.23", "config loaders move into _load_hf_config", CONFIG_0_5_23,
          loader_chain_moves_into_a_helper, _speculators_before_auto_config),
    Merge("0.5.23", "one more config loader where the patch calls its own", CONFIG_0_5_23,
          another_special_loader, _speculators_before_auto_config),
    Merge("0.5.11", "EAGLE-3 drafter's fc without bias", DRAFTER,
          drafter_fc_without_bias, _fc_sized_by_the_aux_count),
    Merge("0.5.11", "rename EAGLEWorker._draft_preprocess_idle", WORKER,
          idle_preprocess_renamed, _idle_input_routed),
    Merge("0.5.11", "AutoConfig call moves into _auto_config", CONFIG_0_5_11,
          auto_config_moves_into_a_helper, _speculators_read),
)


def merge_upstream(fork: Path, merge: Merge) -> None:
    """An upstream branch from the release tag with ``merge.edit`` committed, merged into the
    fork's branch, conflicts resolved upstream's way."""
    branch = git(fork, "rev-parse", "--abbrev-ref", "HEAD").strip()
    git(fork, "checkout", "-q", "-b", "upstream", f"v{merge.release}")
    merge.edit(fork)
    git(fork, "commit", "-q", "-am", f"upstream: {merge.name}")
    git(fork, "checkout", "-q", branch)
    git(fork, "merge", "-q", "--no-edit", "-X", "theirs", "upstream")


def hook() -> dict:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (found,) = [h for h in hooks if h["id"] == HOOK_ID]
    return found


def run_hook(checkout: Path, bin_dir: Path | None = None) -> subprocess.CompletedProcess | None:
    """The hook as pre-commit runs it on the last commit: skipped (``None``) unless a file the
    commit changed matches its ``files``; else its entry split shell-style at the checkout
    root, ``bin_dir`` (the environment holding the console script) first on PATH."""
    found = hook()
    changed = git(checkout, "diff", "--name-only", "HEAD^1", "HEAD").split("\n")
    if not any(re.search(found["files"], path) for path in changed if path):
        return None
    env = dict(os.environ)
    bin_dir = bin_dir or Path(sys.executable).parent
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    return subprocess.run(  # noqa: PLW1510 (the caller checks the exit code)
        shlex.split(found["entry"]) + found.get("args", []),
        cwd=checkout, env=env, capture_output=True, text=True,
    )


def refusal_names(err: str, file: str) -> bool:
    """Whether ``err`` is one ``error:`` line naming ``file:LINE`` first."""
    return bool(re.fullmatch(rf"error: {re.escape(file)}:\d+: [^\n]*\n", err))
