"""The rules never reorder or drop a statement of the fork's own: each restructuring rule keeps
it in place or refuses the site naming file:line and why (docs/robustness.md, "A fork's own
statements"); a local that only fed a replaced width or dtype goes, any other stays."""

from __future__ import annotations

import textwrap

import pytest
from sglang_eagle_sizing.engine import RewriteError, rewrite_source
from sglang_eagle_sizing.families.release_0_5_11.rules.aux_flag import AuxFlagRule
from sglang_eagle_sizing.families.release_0_5_11.rules.extend_idle import ExtendIdleRule
from sglang_eagle_sizing.families.release_0_5_11.rules.idle_inputs import IdleInputRule

EAGLE = "speculative/eagle_worker.py"


def rewrite(file, source, *rules):
    return rewrite_source(file, textwrap.dedent(source), rules).new_text


def extend_site(before_idle: str = "", after_idle: str = "", after_if: str = "") -> str:
    """0.5.11's shape of the v1 extend idle input, with fork lines spliced in (8 spaces)."""
    return (
        "class EAGLEWorker:\n"
        "    def forward_draft_extend_after_decode(self, batch):\n"
        "        input_is_idle = batch.forward_mode.is_idle()\n"
        "        if not input_is_idle and batch.spec_info.verified_id.numel() == 0:\n"
        "            batch = batch.copy()\n"
        "            batch.prepare_for_idle()\n"
        + textwrap.indent(before_idle, " " * 12)
        + "            hidden_size = self.model_config.hidden_size\n"
        "            batch.spec_info = EagleDraftInput.create_idle_input(\n"
        "                device=self.device,\n"
        "                hidden_size=hidden_size,\n"
        "                dtype=self.model_config.dtype,\n"
        "            )\n"
        + textwrap.indent(after_idle, " " * 12)
        + textwrap.indent(after_if, " " * 8)
        + "        batch.spec_info.num_tokens_per_req = 4\n"
    )


def statements_of(source: str) -> list[str]:
    """Every simple statement, in source order, without whitespace."""
    import libcst as cst

    found = []

    class Lines(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node):
            code = cst.Module(body=[]).code_for_node(node.with_changes(leading_lines=[]))
            found.append("".join(code.split()))

    cst.parse_module(source).visit(Lines())
    return found


def test_a_fork_statement_after_the_extend_idle_input_is_refused_at_its_line():
    source = extend_site(after_idle="batch.spec_info.fork_flag = True\n")
    with pytest.raises(RewriteError) as raised:
        rewrite(EAGLE, source, ExtendIdleRule)
    line = source.splitlines().index("            batch.spec_info.fork_flag = True") + 1
    assert str(raised.value).startswith(f"{EAGLE}:{line}: EAGLEWorker.forward_draft_extend_after_decode: ")
    assert "would run before the idle input exists" in str(raised.value)


def test_fork_statements_before_the_idle_input_and_after_the_if_keep_their_order():
    source = extend_site(
        before_idle="# fork: note the batch\nlogger.debug('idle %s', batch)\n",
        after_if="logger.debug('extend')\n",
    )
    after = rewrite(EAGLE, source, ExtendIdleRule)
    fork = ["logger.debug('idle%s',batch)", "logger.debug('extend')"]
    order = [s for s in statements_of(after) if s in fork or s.startswith("batch.spec_info=")]
    assert order == [fork[0], order[1], fork[1]] and order[1].startswith("batch.spec_info=EagleDraftExtendInput")
    assert "# fork: note the batch" in after
    # the local that fed only hidden_size= goes
    assert "hidden_size = self.model_config.hidden_size" not in after


def test_a_comment_above_the_extend_idle_input_moves_with_it():
    source = extend_site().replace(
        "            batch.spec_info = EagleDraftInput",
        "            # fork: the idle input\n            batch.spec_info = EagleDraftInput",
    )
    after = rewrite(EAGLE, source, ExtendIdleRule)
    lines = after.splitlines()
    comment = lines.index("            # fork: the idle input")
    assert lines[comment - 1].strip() == "if batch.forward_mode.is_idle():"


def test_a_width_local_still_read_elsewhere_stays():
    source = extend_site(after_if="logger.debug('width %d', hidden_size)\n")
    after = rewrite(EAGLE, source, ExtendIdleRule)
    assert "hidden_size = self.model_config.hidden_size" in after


def test_a_decode_idle_input_sized_through_a_local_leaves_no_unused_local():
    before = """
    class EAGLEWorker:
        def _draft_preprocess_idle(self, batch):
            hidden_size = self.model_config.spec_hidden_size
            dtype = self.model_config.dtype
            logger.debug("idle")
            batch.spec_info = EagleDraftInput.create_idle_input(
                device=self.device,
                hidden_size=hidden_size,
                dtype=dtype,
                topk=self.topk,
            )
    """
    after = rewrite(EAGLE, before, IdleInputRule)
    assert "hidden_size = " not in after and "dtype = " not in after
    assert 'logger.debug("idle")' in after
    # nothing else reads them: ruff's F841 and F821 have nothing to say
    assert "hidden_size=EagleDraftInput.hidden_size_for(self)," in after


AUX = """
class EAGLEWorker:
    def __init__(self, server_args):
        super().__init__(server_args=server_args)
        self.eagle_use_aux_hidden_state = False
        if self.speculative_algorithm.is_eagle3():
            eagle_config = getattr(self.hf_config, "eagle_config", {})
            self.eagle_use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
{inside}{after}"""


@pytest.mark.parametrize(
    "inside, after, culprit",
    [
        ("            logger.info('eagle3')\n", "", "logger.info('eagle3')"),
        ("", "        self.fork_layers = eagle_config.get('layers')\n", "eagle_config = getattr"),
    ],
    ids=["fork-line-inside-the-parse", "parse-local-read-after"],
)
def test_a_fork_statement_inside_the_aux_flag_parse_is_refused_at_its_line(inside, after, culprit):
    source = AUX.replace("{inside}", inside).replace("{after}", after)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if culprit in text)
    with pytest.raises(RewriteError, match=rf"^{EAGLE}:{line}: EAGLEWorker.__init__: a statement of the fork's"):
        rewrite(EAGLE, source, AuxFlagRule)


def test_fork_lines_around_the_aux_flag_parse_keep_their_order():
    source = AUX.replace("{inside}", "").replace("{after}", "        logger.info('after parse')\n").replace(
        "        super().__init__", "        logger.info('before build')\n        super().__init__"
    )
    after = rewrite(EAGLE, source, AuxFlagRule)
    seen = statements_of(after)
    # the build now also takes the draft ModelConfig the start-up block built
    (build,) = [i for i, text in enumerate(seen) if text.startswith("super().__init__(")]
    assert seen.index("logger.info('beforebuild')") < build < seen.index("logger.info('afterparse')")
    assert "eagle_config = getattr" not in after
