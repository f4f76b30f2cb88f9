"""The fork's tests as an older runtime takes them (``fork_tests.for_release``), before and
after on small sources of our own: each runtime idiom is read from the release's file
(``sites.RUNTIME_IDIOMS``) and each stand-in is written as that release reads it; a release
with 0.5.23's runtime gets the tests unchanged."""

from __future__ import annotations

import json
import textwrap

import pytest
from sglang_eagle_sizing.families.release_0_5_23 import sites
from sglang_eagle_sizing.families.release_0_5_23.fork_tests import for_release

PUBLISHED = textwrap.dedent(
    """\
    from sglang.srt.runtime_context import (
        SpawnRanks,
        publish,
        restore_context,
        snapshot_context,
    )


    class TestPublished(CustomTestCase):
        def published(self, server_args):
            self.addCleanup(restore_context, snapshot_context())
            publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
    """
)
GROUPS = textwrap.dedent(
    """\
    from sglang.srt.runtime_context import get_parallel


    def captured(model):
        with get_parallel().override(pp_group=LAST_RANK, tp_rank=0):
            model.capture()
    """
)
TRANSLATOR = textwrap.dedent(
    """\
    backend = SimpleNamespace(
        kv_index_translator=SimpleNamespace(
            pack_read_stream=lambda plan, **kwargs: packed.append(kwargs)
        ),
    )
    """
)
CLASS_TABLES = textwrap.dedent(
    """\
    CLASSES = {"glm5_next": ["Glm5NextForConditionalGeneration"], "qwen2": ["Qwen2ForCausalLM"]}
    ROWS = (("glm5_next", "Glm5NextForConditionalGeneration"), ("qwen2", "Qwen2ForCausalLM"))
    """
)


def rewritten(source, older=(), models=()):
    text = for_release(source.encode(), set(), set(models), set(older)).decode()
    compile(text, "test.py", "exec")
    return text


def test_publish_without_spawn_ranks():
    text = rewritten(PUBLISHED, older={"spawn_ranks"})
    assert "SpawnRanks" not in text
    assert 'publish(server_args, role="test")\n' in text
    # the import keeps its layout: one name a line, the trailing comma
    assert "    publish,\n    restore_context,\n    snapshot_context,\n)\n" in text


def test_a_context_cleared_where_it_cannot_be_saved():
    text = rewritten(PUBLISHED, older={"spawn_ranks", "snapshot_context"})
    assert "        self.addCleanup(reset_context)\n" in text
    assert "    publish,\n    reset_context,\n)\n" in text
    assert "snapshot_context" not in text and "restore_context" not in text


def test_groups_patched_where_parallel_state_holds_them():
    text = rewritten(GROUPS, older={"groups_in_context"})
    assert (
        "    with get_parallel().override(pp_group=LAST_RANK, tp_rank=0):\n"
        "        with mock.patch.multiple(parallel_state, _PP=LAST_RANK):\n"
        "            model.capture()\n"
    ) in text
    assert "from unittest import mock\n" in text
    assert "from sglang.srt.distributed import parallel_state\n" in text
    # a file with no group to patch gets no import
    assert "parallel_state" not in rewritten(PUBLISHED, older={"groups_in_context"})


def test_a_translator_that_fills_rows_itself():
    text = rewritten(TRANSLATOR, older={"packs_read_plans"})
    assert (
        "    kv_index_translator=SimpleNamespace(\n"
        "        fill_packed_read_stream=lambda **kwargs: packed.append(kwargs),\n"
        "        is_translating=False,\n"
        "    ),\n"
    ) in text


def test_rows_of_a_model_file_the_release_lacks_are_dropped():
    text = rewritten(CLASS_TABLES, models={"glm5_next"})
    assert "glm5_next" not in text and text.count("Qwen2ForCausalLM") == 2


@pytest.mark.parametrize("source", [PUBLISHED, GROUPS, TRANSLATOR], ids=["publish", "groups", "translator"])
def test_0_5_23s_runtime_takes_the_tests_unchanged(source):
    assert rewritten(source) == source


#: each idiom's file as 0.5.18 and as 0.5.23 have it (the part the fact is read from)
RUNTIME_0_5_18 = {
    "runtime_context.py": "def publish(server_args, *, role, hf_config=None):\n    pass\n",
    "distributed/parallel_state.py": "def get_tp_group():\n    return _TP\n",
    "mem_cache/kv_index_translator.py": (
        "class KVIndexTranslator:\n    def fill_packed_read_stream(self, **kw):\n        pass\n"
    ),
}
RUNTIME_0_5_23 = {
    "runtime_context.py": "class SpawnRanks:\n    pass\n\n\ndef snapshot_context():\n    pass\n",
    "distributed/parallel_state.py": "def get_tp_group():\n    return get_parallel().tp_group\n",
    "mem_cache/kv_index_translator.py": (
        "class KVIndexTranslator:\n    def pack_read_stream(self, plan, **kw):\n        pass\n"
    ),
}


@pytest.mark.parametrize("files, value", [(RUNTIME_0_5_18, False), (RUNTIME_0_5_23, True)], ids=["0.5.18", "0.5.23"])
def test_the_runtime_idioms_are_read_from_the_release(files, value):
    def read(file):
        if file in files:
            return files[file]
        raise OSError(file)

    facts = json.loads(sites.release_facts(read))
    assert {fact: facts[fact] for fact in sites.RUNTIME_IDIOMS} == dict.fromkeys(sites.RUNTIME_IDIOMS, value)
