"""0.5.23's rules on small sources of our own, before and after, for the forms of the code the
releases 0.5.16-0.5.19 have where they differ from 0.5.20's: the server arguments read on
``server_args`` itself (before ``resolving_view``, 0.5.19), the target's capture resolved
without the target's ``model_config`` (before 0.5.20), the prefill server copying each
request's hidden states to the CPU in its loop (0.5.18), and Gemma-3's layer handing on the
whole residual stream (before 0.5.17). A form a rule does not know is refused."""

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
from sglang_eagle_sizing.families.release_0_5_23.rules.capture_contract import for_release
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_check import (
    DraftCheckRule,
    TargetCaptureCheckRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_dtype import DraftDtypeRule
from sglang_eagle_sizing.families.release_0_5_23.rules.gemma3_aux_residual import (
    Gemma3AuxResidualRule,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.standalone_disagg import (
    PrefillDraftProposalRule,
)


def rewrite(file, source, rule):
    result = rewrite_source(file, textwrap.dedent(source), (rule,))
    compile(result.new_text, file, "exec")
    return result.new_text, result.findings


def assert_idempotent(file, text, rule):
    again, findings = rewrite(file, text, rule)
    assert again == text
    assert findings and all(f.status == Finding.ROUTED for f in findings)


#: 0.5.18's ``_handle_eagle_family``: its own imports first, the arguments on ``server_args``
RELEASE_0_5_18_HOOKS = """
def _handle_eagle_family(server_args):
    from sglang.srt.arg_groups.overrides import resolved_view

    if server_args.max_running_requests is None:
        server_args.max_running_requests = 48

    model_arch = server_args.get_model_config().hf_config.architectures[0]
    if model_arch in ["DeepseekV3ForCausalLM"]:
        pass

    if server_args.speculative_num_steps is None:
        pass
"""


@pytest.mark.parametrize("rule", [DraftCheckRule, DraftDtypeRule], ids=lambda r: r.label)
def test_before_resolving_view_the_hooks_read_server_args(rule):
    text, findings = rewrite(sites.DRAFT_DTYPE[0], RELEASE_0_5_18_HOOKS, rule)
    assert [f.status for f in findings] == [Finding.UNROUTED]
    hook = text[text.index(f"def {rule.hook}(") : text.index("def _handle_eagle_family")]
    for helper in ("resolving_view", "model_config_of", "declare_resolution", "cfg."):
        assert helper not in hook
    assert "server_args.get_model_config()" in hook
    if rule is DraftDtypeRule:
        assert "    server_args.dtype = dtype\n" in hook
    assert_idempotent(sites.DRAFT_DTYPE[0], text, rule)


def test_the_drafter_is_checked_after_the_functions_own_imports():
    text, _ = rewrite(sites.DRAFT_DTYPE[0], RELEASE_0_5_18_HOOKS, DraftCheckRule)
    assert (
        "    from sglang.srt.arg_groups.overrides import resolved_view\n"
        "\n"
        f"    {DRAFT_CHECK_HOOK}(server_args)\n"
        "\n"
        "    if server_args.max_running_requests is None:\n"
    ) in text
    text, _ = rewrite(sites.DRAFT_DTYPE[0], RELEASE_0_5_18_HOOKS, DraftDtypeRule)
    assert f"        pass\n    {DRAFT_DTYPE_HOOK}(server_args)\n" in text


#: 0.5.16-0.5.19's: the EAGLE resolution takes no ``model_config``; its caller has one
RESOLVED_WITHOUT_MODEL_CONFIG = """
def resolve_spec_aux_hidden_state_config(
    *,
    server_args: ServerArgs,
    model_config: ModelConfig,
    spec_algorithm: SpeculativeAlgorithm,
) -> SpecAuxHiddenStateConfig:
    config = SpecAuxHiddenStateConfig()
    _resolve_eagle_aux_hidden_state(
        config=config,
        server_args=server_args,
        spec_algorithm=spec_algorithm,
    )
    return config


def _resolve_eagle_aux_hidden_state(
    *,
    config: SpecAuxHiddenStateConfig,
    server_args: ServerArgs,
    spec_algorithm: SpeculativeAlgorithm,
) -> None:
    draft_model_config = ModelConfig.from_server_args(server_args)
    if spec_algorithm.is_eagle3():
        config.eagle_use_aux_hidden_state = True
"""


def test_the_target_capture_check_gets_the_targets_model_config():
    file = sites.TARGET_CAPTURE[0]
    text, findings = rewrite(file, RESOLVED_WITHOUT_MODEL_CONFIG, TargetCaptureCheckRule)
    assert [f.status for f in findings] == [Finding.UNROUTED, Finding.UNROUTED]
    assert "        server_args=server_args,\n        model_config=model_config,\n" in text
    assert "    server_args: ServerArgs,\n    model_config: ModelConfig,\n" in text
    assert "        target_model_config=model_config,\n" in text
    assert_idempotent(file, text, TargetCaptureCheckRule)


def test_a_caller_without_model_config_is_refused():
    source = RESOLVED_WITHOUT_MODEL_CONFIG.replace("    model_config: ModelConfig,\n", "", 1)
    with pytest.raises(RewriteError, match="resolve_spec_aux_hidden_state_config: calls "
                       "_resolve_eagle_aux_hidden_state without a model_config"):
        rewrite(sites.TARGET_CAPTURE[0], source, TargetCaptureCheckRule)


#: 0.5.18's prefill hand-over: each request's row copied to the CPU in the loop
PREFILL_0_5_18 = """
class SchedulerDisaggregationPrefillMixin:
    def process_batch_result_disagg_prefill(self, batch, result):
        for i, req in enumerate(batch.reqs):
            if self.spec_algorithm.is_eagle() and draft_input is not None:
                req.output_topk_p = draft_input.topk_p[i]
                req.output_topk_index = draft_input.topk_index[i]
                req.hidden_states_tensor = (
                    draft_input.hidden_states[i].cpu().clone()
                )
            else:
                req.hidden_states_tensor = None
"""


def test_the_prefill_hands_over_hidden_states_only_when_made_0_5_18():
    file = sites.DISAGG_PREFILL_DRAFT[0]
    text, findings = rewrite(file, PREFILL_0_5_18, PrefillDraftProposalRule)
    assert [f.status for f in findings] == [Finding.UNROUTED]
    assert "if self.spec_algorithm.need_topk() and draft_input is not None:" in text
    assert (
        "                req.hidden_states_tensor = (\n"
        "                    draft_input.hidden_states[i].cpu().clone()\n"
        "                    if draft_input.hidden_states is not None\n"
        "                    else None\n"
        "                )\n"
    ) in text
    assert_idempotent(file, text, PrefillDraftProposalRule)
    other = PREFILL_0_5_18.replace(".cpu().clone()", ".clone()")
    with pytest.raises(RewriteError, match="the hidden states handed over are not"):
        rewrite(file, other, PrefillDraftProposalRule)


#: before 0.5.17 the layer returns the whole stream: the model binds no ``residual``
GEMMA3_WHOLE_STREAM = """
class Gemma3TextModel:
    def forward(self, hidden_states):
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states)[0]
        return hidden_states, aux_hidden_states
"""


def test_gemma3_whole_stream_has_nothing_to_fix_and_says_so():
    file = sites.GEMMA3_AUX[0]
    source = textwrap.dedent(GEMMA3_WHOLE_STREAM)
    facts = sites.release_facts(lambda f: source if f == file else _absent(f))
    assert json.loads(facts)["gemma3_residual"] is False
    with for_release(facts):
        text, findings = rewrite(file, source, Gemma3AuxResidualRule)
    assert text == source and findings == []
    assert any(n.startswith(f"{file}: Gemma-3's decoder layer hands on the whole")
               for n in sites.release_notes(facts))
    tests = sites.test_files({key: b"" for key in sites.TEST_CONCERNS}, facts)
    assert sites.UNIT_TESTS + "test_gemma3_aux_hidden_states.py" not in tests
    # 0.5.17 on: the layer returns the residual beside its branch, and the rule rewrites
    with_residual = source.replace("hidden_states = layer(hidden_states)[0]",
                                   "hidden_states, residual = layer(hidden_states)")
    facts = sites.release_facts(lambda f: with_residual if f == file else _absent(f))
    assert json.loads(facts)["gemma3_residual"] is True
    with for_release(facts):
        text, findings = rewrite(file, with_residual, Gemma3AuxResidualRule)
    assert [f.status for f in findings] == [Finding.UNROUTED]


#: MiniMax-M3 in 0.5.16-0.5.17: its forward reads per-layer flags its setter never sets
MINIMAX_M3_FLAGS = """
class MiniMaxM3Model:
    def forward(self, hidden_states):
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            hidden_states = layer(
                hidden_states,
                captured=aux if getattr(layer, "_is_layer_to_capture", False) else None,
            )


class MiniMaxM3SparseForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
"""


def test_flags_nothing_sets_are_said():
    file = "models/minimax_m3.py"
    source = textwrap.dedent(MINIMAX_M3_FLAGS)
    facts = sites.release_facts(lambda f: source if f == file else _absent(f))
    assert json.loads(facts)["flags_unset"] == ["MiniMaxM3Model"]
    assert any("flags that nothing in this release sets" in n for n in sites.release_notes(facts))
    sets = source + (
        "\n        for layer_id in self.model.layers_to_capture:\n"
        '            setattr(self.model.layers[layer_id], "_is_layer_to_capture", True)\n'
    )
    facts = sites.release_facts(lambda f: sets if f == file else _absent(f))
    assert json.loads(facts)["flags_unset"] == []
    # a forward capturing by id, not by flag (0.5.23's MiniMax-M3), has no flag to set
    by_id = source.replace(
        'aux if getattr(layer, "_is_layer_to_capture", False) else None',
        "aux if i in self.layers_to_capture else None",
    )
    facts = sites.release_facts(lambda f: by_id if f == file else _absent(f))
    assert json.loads(facts)["flags_unset"] == []


def _absent(file):
    raise OSError(file)
