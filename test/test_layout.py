"""The package's layout keeps its promises: no import circle, an engine that loads no release
family, families that import no other family, and a new family that is its folder and one line
of ``families.FAMILIES`` (the recipe in docs/design.md, followed here for a toy release)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import git, git_status, run_cli

from sglang_eagle_sizing import families

PACKAGE = Path(families.__file__).resolve().parents[1]
#: modules loaded by path in a release's environment, and SGLang code the patch inserts
NOT_IMPORTED = ("inserted_tests", "standins", "probes")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if any(part in NOT_IMPORTED for part in path.relative_to(PACKAGE).parts):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every module of the package each module imports, at its top or inside a function (a
    package imported through its submodule counts: Python runs its ``__init__``)."""
    edges = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.update(f"{node.module}.{a.name}" for a in node.names)
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        parents = {".".join(m.split(".")[:i]) for m in found for i in range(2, m.count(".") + 1)}
        edges[name] = {
            m for m in found | parents
            if m in modules and m != name and not name.startswith(m + ".")
        }
    return edges


def _circle(edges: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        for other in sorted(edges[name]):
            found = visit(other, path + [name])
            if found:
                return found
        done.add(name)
        return None

    for name in sorted(edges):
        found = visit(name, [])
        if found:
            return found
    return None


def test_no_module_imports_itself_through_others():
    assert _circle(_imports(_modules())) is None


def test_the_circle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circle(edges) == ["a", "b", "c", "a"]


def test_a_family_imports_no_other_family():
    """What two families share is the engine's (``shared.py``, ``syntax.py``), never a name of
    the other family."""
    edges = _imports(_modules())
    folders = {f.module for f in families.FAMILIES}
    for name, imported in edges.items():
        own = next((f for f in folders if name == f or name.startswith(f + ".")), None)
        if own is None:
            continue
        others = {m for m in imported if any(m.startswith(f) for f in folders - {own})}
        assert not others, (name, sorted(others))


def test_the_engine_loads_no_family_until_a_tree_asks():
    """Importing the command line, the rewrite engine, the tree and the transaction loads no
    family's rules, sites or inserted code: a family is loaded for the tree in front of it."""
    code = textwrap.dedent(
        """
        import sys
        import sglang_eagle_sizing.cli, sglang_eagle_sizing.engine, sglang_eagle_sizing.patch
        import sglang_eagle_sizing.series, sglang_eagle_sizing.syntax
        import sglang_eagle_sizing.transaction, sglang_eagle_sizing.tree
        print("\\n".join(m for m in sys.modules if m.startswith("sglang_eagle_sizing.families.")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


#: the engine: what knows no release (each family comes to it as a ``families.Family``)
ENGINE = (
    "cli", "engine", "syntax", "texts", "tree", "transaction", "patch", "series", "pr",
    "concerns", "caches", "shared_cache", "shared",
)


def test_the_engine_names_no_family():
    """The engine takes a tree's family from the registry (``FAMILIES``, ``family_of_version``,
    ...), never a family by name: a third family changes none of its modules."""
    modules = _modules()
    by_name = {"BEFORE_REFACTOR", "AFTER_REFACTOR"}
    for name in ENGINE:
        path = modules[f"sglang_eagle_sizing.{name}"]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(families.__name__):
                assert node.module == families.__name__, (name, node.module)
                assert not {a.name for a in node.names} & by_name, (name, node.lineno)


# -- a new family from the recipe ----------------------------------------------------------

TOY_FILES = {
    "__init__.py": '"""SGLang 9.9.9 (a toy release): one concern, one rule."""\n',
    "concerns.py": 'GREETING = "greeting"\nORDER = (GREETING,)\n',
    "sites.py": textwrap.dedent(
        '''
        from sglang_eagle_sizing.concerns import enabled

        from sglang_eagle_sizing.families.release_9_9_9.concerns import GREETING

        SITE_FILES = ("speculative/toy.py",)
        SITES = ()


        def test_files(files):
            return files if enabled(GREETING) else {}
        '''
    ),
    "inserted.py": 'GREET = \'\'\'\ndef greet():\n    return "hello"\n\'\'\'\n',
    "rules/__init__.py": textwrap.dedent(
        '''
        from sglang_eagle_sizing.engine import Finding, Rule
        from sglang_eagle_sizing.families.release_9_9_9.concerns import GREETING
        from sglang_eagle_sizing.families.release_9_9_9.inserted import GREET
        from sglang_eagle_sizing.syntax import statements


        class GreetRule(Rule):
            files = frozenset({"speculative/toy.py"})
            concerns = (GREETING,)

            def leave_Module(self, original_node, updated_node):
                first = original_node.body[0]
                if any(getattr(s, "name", None) and s.name.value == "greet" for s in original_node.body):
                    self.report(first, "greet", Finding.ROUTED, "<module>")
                    return updated_node
                self.report(first, "greet", Finding.UNROUTED, "<module>")
                return updated_node.with_changes(body=[*updated_node.body, *statements(GREET)])


        RULES = (GreetRule,)
        '''
    ),
    "series.py": textwrap.dedent(
        '''
        from pathlib import Path

        from sglang_eagle_sizing.families.release_9_9_9 import concerns
        from sglang_eagle_sizing.series import read_patch

        DESCRIPTIONS = Path(__file__).with_name("descriptions")
        NEEDS = {}


        def patches(gpu_test=False):
            return tuple(read_patch(DESCRIPTIONS, c) for c in concerns.ORDER)
        '''
    ),
    "descriptions/greeting.md": "# [Spec] Greet\n\n## Motivation\n\nA toy.\n",
    "inserted_tests/test/registered/unit/test_greet.py": "def test_greet():\n    pass\n",
    "smoke_cases.py": "CASES = ()\n",
    "standins/sitecustomize.py": "",
}


@pytest.fixture
def toy_family(tmp_path_factory, monkeypatch):
    """The toy release's folder written from the recipe, on the families' path, and its line
    added to ``FAMILIES``."""
    folders = tmp_path_factory.mktemp("families")
    for name, text in TOY_FILES.items():
        path = folders / "release_9_9_9" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(families, "__path__", [*families.__path__, str(folders)])
    toy = families.Family(
        "9.9.9", ("9.9.9",), "release_9_9_9", (9, 9, 9), (9, 9, 9, 999), "route the toy site"
    )
    monkeypatch.setattr(families, "FAMILIES", (*families.FAMILIES, toy))
    yield toy
    for name in [m for m in sys.modules if m.startswith(toy.module)]:
        del sys.modules[name]


@pytest.fixture
def toy_checkout(tmp_path) -> Path:
    root = tmp_path / "fork"
    srt = root / "python" / "sglang" / "srt"
    (srt / "speculative").mkdir(parents=True)
    (srt / "speculative" / "toy.py").write_text("def width():\n    return 1\n")
    (root / "python" / "sglang" / "version.py").write_text('__version__ = "9.9.9"\n')
    (root / "test").mkdir()
    (root / "test" / "README.md").write_text("the fork's tests\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "SGLang 9.9.9")
    git(root, "tag", "v9.9.9")
    return root


def test_a_family_from_the_recipe_is_applied_checked_written_as_a_series_and_reverted(
    toy_family, toy_checkout, tmp_path
):
    toy = toy_checkout / "python/sglang/srt/speculative/toy.py"
    code, out, err = run_cli("apply", str(toy_checkout))
    assert code == 0, err
    assert 'def greet():\n    return "hello"\n' in toy.read_text()
    assert (toy_checkout / "test/registered/unit/test_greet.py").is_file()
    assert run_cli("check", str(toy_checkout))[0] == 0
    code, out, err = run_cli("pr", "--series", str(tmp_path / "series"), str(toy_checkout))
    assert code == 0, err
    (patch,) = sorted((tmp_path / "series").glob("*.patch"))
    assert "Subject: [PATCH] [Spec] Greet" in patch.read_text()  # one patch: git's [PATCH]
    assert run_cli("revert", str(toy_checkout))[0] == 0
    assert git_status(toy_checkout) == []
