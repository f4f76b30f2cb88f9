"""0.5.23's rules on small sources of our own, before and after, for the forms of the code the
releases 0.5.20-0.5.23 have where they differ: the server arguments' per-drafter decisions
with and without the call they follow, and the final boundary read from the model's forward.
A form a rule does not know is refused, naming what it looked for."""

from __future__ import annotations

import json
import textwrap

import pytest
from sglang_eagle_sizing.engine import Finding, RewriteError, rewrite_source
from sglang_eagle_sizing.families.release_0_5_23 import sites
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    DRAFT_CHECK_HOOK,
    DRAFT_DTYPE_HOOK,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_check import DraftCheckRule
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_dtype import DraftDtypeRule

HOOK_FILE = sites.DRAFT_DTYPE[0]

#: 0.5.23's shape: the algorithm's check first, the IQuest MTP decision after the MTP block
RELEASE_0_5_23 = """
def _check_oot_speculative_algorithm(algorithm, device):
    pass


def _handle_iquest_q1_mtp_draft(server_args):
    return True


def _handle_eagle_family(server_args):
    cfg = resolving_view(server_args)
    _check_oot_speculative_algorithm(algorithm=cfg.speculative_algorithm, device=cfg.device)

    model_arch = model_config_of(server_args).hf_config.architectures[0]
    if model_arch in ["DeepseekV3ForCausalLM"]:
        pass

    _handle_iquest_q1_mtp_draft(server_args)
    if cfg.speculative_num_steps is None:
        pass
"""
#: 0.5.20's: neither call (0.5.22 lacks the first only)
RELEASE_0_5_20 = """
def _handle_eagle_family(server_args):
    cfg = resolving_view(server_args)

    model_arch = model_config_of(server_args).hf_config.architectures[0]
    if model_arch in ["DeepseekV3ForCausalLM"]:
        if cfg.speculative_draft_model_path is None:
            pass

    if cfg.speculative_num_steps is None:
        pass
"""


def rewrite(source, rule):
    result = rewrite_source(HOOK_FILE, textwrap.dedent(source), (rule,))
    return result.new_text, result.findings


def body_of(text, function):
    lines = text.splitlines()
    start = lines.index(f"def {function}(server_args):")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("def ")), len(lines))
    return [line.strip() for line in lines[start + 1 : end] if line.strip()]


@pytest.mark.parametrize(
    "source, after",
    [
        (RELEASE_0_5_23, "_check_oot_speculative_algorithm(algorithm"),
        (RELEASE_0_5_20, "cfg = resolving_view(server_args)"),
    ],
    ids=["0.5.23: after the algorithm's check", "0.5.20: after cfg"],
)
def test_the_drafter_is_checked_first_thing(source, after):
    text, findings = rewrite(source, DraftCheckRule)
    body = body_of(text, "_handle_eagle_family")
    call = f"{DRAFT_CHECK_HOOK}(server_args)"
    assert body[body.index(call) - 1].startswith(after)
    assert body.index(call) == (2 if "_check_oot" in source else 1)
    assert f"def {DRAFT_CHECK_HOOK}(server_args" in text
    assert [f.status for f in findings] == [Finding.UNROUTED]
    again, findings = rewrite(text, DraftCheckRule)
    assert again == text and [f.status for f in findings] == [Finding.ROUTED]


@pytest.mark.parametrize(
    "source, after",
    [
        (RELEASE_0_5_23, "_handle_iquest_q1_mtp_draft(server_args)"),
        (RELEASE_0_5_20, 'if model_arch in ["DeepseekV3ForCausalLM"]:'),
    ],
    ids=["0.5.21 on: after the IQuest MTP decision", "0.5.20: after the MTP block"],
)
def test_the_draft_dtype_follows_the_mtp_decision(source, after):
    text, findings = rewrite(source, DraftDtypeRule)
    body = body_of(text, "_handle_eagle_family")
    call = f"{DRAFT_DTYPE_HOOK}(server_args)"
    # the statement before the call: the anchor's call, or the MTP block's last line
    at = body.index(call)
    assert body[at + 1] == "if cfg.speculative_num_steps is None:"
    assert any(line.startswith(after) for line in body[:at])
    # defined once, before the function that calls it where the anchor has no definition
    assert text.count(f"def {DRAFT_DTYPE_HOOK}(") == 1
    assert text.index(f"def {DRAFT_DTYPE_HOOK}(") < text.index("def _handle_eagle_family(")
    assert [f.status for f in findings] == [Finding.UNROUTED]
    again, _ = rewrite(text, DraftDtypeRule)
    assert again == text


def test_a_hook_without_its_place_is_refused_naming_what_it_looked_for():
    source = """
    def _handle_eagle_family(server_args):
        cfg = resolving_view(server_args)
    """
    with pytest.raises(RewriteError, match=r"no _handle_iquest_q1_mtp_draft\(\.\.\.\) call to follow, nor an `if model_arch in"):
        rewrite(source, DraftDtypeRule)
    renamed = RELEASE_0_5_23.replace("def _handle_eagle_family", "def _handle_eagle_algorithms")
    with pytest.raises(RewriteError, match=r"_handle_eagle_family: no _check_oot_speculative_algorithm"):
        rewrite(renamed, DraftCheckRule)


GPT_OSS_IN_LOOP = """
class GptOssModel:
    def forward(self, hidden_states):
        for i in range(self.start_layer, self.end_layer):
            hidden_states = self.layers[i](hidden_states)
            if i + 1 in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
"""
GPT_OSS_AFTER_LOOP = """
class GptOssModel:
    def forward(self, hidden_states):
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        if self.end_layer in self.layers_to_capture:
            aux_hidden_states.append(hidden_states)
"""
#: the layer's input only: index end_layer is never captured
GPT_OSS_INPUTS_ONLY = """
class GptOssModel:
    def forward(self, hidden_states):
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
"""


@pytest.mark.parametrize(
    "source, final",
    [(GPT_OSS_IN_LOOP, True), (GPT_OSS_AFTER_LOOP, True), (GPT_OSS_INPUTS_ONLY, False)],
    ids=["in the loop (0.5.17-0.5.20)", "after the loop (0.5.21 on)", "inputs only"],
)
def test_the_final_boundary_is_read_from_the_forward(source, final):
    def read(file):
        if file == "models/gpt_oss.py":
            return textwrap.dedent(source)
        raise OSError(file)

    facts = json.loads(sites.release_facts(read))
    assert facts["holders"] == ["GptOssModel"]
    assert ("GptOssModel" in facts["final_hidden_state"]) is final
    notes = sites.release_notes(sites.release_facts(read))
    said = [n for n in notes if n.startswith("models/gpt_oss.py: GptOssModel.forward")]
    assert len(said) == (0 if final else 1)
    # every capture model file this fake release lacks is named
    assert len([n for n in notes if "no class captures" in n]) == len(sites.MAY_BE_ABSENT)


def _rules():
    from sglang_eagle_sizing.families.release_0_5_23.rules import RULES

    return RULES


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r.__name__)
def test_a_rule_whose_anchor_is_gone_refuses_or_says_so(rule):
    """A file of the rule's own that no longer holds what the rule looks for (a fork that
    renamed or moved it): refused, naming it; a capture-contract model file without a
    capture is said in a note line instead (``sites.release_notes``)."""
    if rule.files is None:
        return  # the import rule: follows what the others wrote, in any file
    file = sorted(rule.files)[0]
    source = "def renamed_by_the_fork(server_args):\n    return server_args\n"
    if rule.needles_required:
        with pytest.raises(RewriteError) as raised:
            rewrite_source(file, source, (rule,))
        assert raised.value.file == file
        if rule.needles:
            assert rule.needles[0] in raised.value.reason
    else:
        assert file in sites.MAY_BE_ABSENT
        facts = json.loads(sites.release_facts(lambda f: source))
        assert file in facts["not_capturing"]
        assert any(n.startswith(f"{file}: no class captures") for n in sites.release_notes(json.dumps(facts)))
