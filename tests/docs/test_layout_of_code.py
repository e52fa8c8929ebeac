"""The shape of relayd's code, read from its own files: at most 20 modules at the top of
`relayd/`, the rest in wings (sub-packages, one idea each), and every import from one wing
into another pointing down the order docs/architecture.md gives ("The wings"). And the
shape of its tests: what they share lives in tests/support, and no test file imports
another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.paths import PACKAGES, ROOT, SUPPORT, TESTS

RELAYD = ROOT / "relayd"
AT_THE_TOP = 20

# The one arrow allowed up: the inbox's operations import the delivery package itself (its
# __init__.py, never a module of it), which fills the inbox's hooks (relayd.inbox.hooks).
UP_TO_A_PACKAGE = {("inbox", "delivery")}
# The one wing whose __init__.py does more than say what the wing is: it fills those hooks.
INIT_WITH_CODE = {"delivery"}


def wings() -> list[str]:
    return sorted(p.parent.name for p in RELAYD.glob("*/__init__.py"))


def documented_order() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## The wings\n") :]
    section = section[: section.index("\n## ")]
    return re.findall(r"^\| \d+ \| `relayd/(\w+)/` \|", section, re.M)


def imported(path: Path) -> set[str]:
    """Every relayd module or package `path` imports, function-level imports included."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from relayd.x import y`: y is a module, or a name in x
                name = f"{base}.{alias.name}"
                found.add(name if _exists(name) else base)
    return {name for name in found if name == "relayd" or name.startswith("relayd.")}


def _exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_relayd_keeps_at_most_20_modules_at_its_top() -> None:
    top = sorted(p.name for p in RELAYD.glob("*.py"))
    assert len(top) <= AT_THE_TOP, f"{len(top)} modules at the top of relayd/, at most {AT_THE_TOP}: put the rest in a wing ({', '.join(top)})"


def test_the_architecture_orders_every_wing_once() -> None:
    order = documented_order()
    assert sorted(order) == wings() and len(set(order)) == len(order), order


def test_a_wing_imports_only_the_wings_below_it() -> None:
    rank = {wing: i for i, wing in enumerate(documented_order())}
    upward = []
    for wing in wings():
        for path in sorted((RELAYD / wing).rglob("*.py")):
            for name in imported(path):
                parts = name.split(".")
                if len(parts) < 2 or parts[1] not in rank or parts[1] == wing:
                    continue  # the shared core at the top of relayd/, or its own wing
                if rank[parts[1]] > rank[wing] and not ((wing, parts[1]) in UP_TO_A_PACKAGE and len(parts) == 2):
                    upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert upward == []


def test_a_wings_package_file_imports_nothing() -> None:
    """Python runs a package's __init__.py on every import of one of its modules: one that
    imported would load half a wing into relayctl's fast path, a hook or relay-mcp."""
    busy = []
    for wing in sorted(set(wings()) - INIT_WITH_CODE):
        body = ast.parse((RELAYD / wing / "__init__.py").read_text()).body
        if [node for node in body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]:
            busy.append(wing)
    assert busy == []


# An import inside a function hides an arrow of the import graph, so each module that has one
# says why, once: the words "deferred import" in its docstring or in a comment just above its
# first such import (nearly always start-up: what relayctl's fast path, `relayctl hook` or
# relay-mcp's start must not load). A cycle is never the reason: move the shared piece down.
def first_import_in_a_function(tree: ast.Module) -> ast.stmt | None:
    found = [
        node
        for func in ast.walk(tree)
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(func)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    return min(found, key=lambda node: node.lineno, default=None)


def test_every_module_that_imports_inside_a_function_says_why() -> None:
    silent = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            text = path.read_text()
            tree = ast.parse(text, name)
            first = first_import_in_a_function(tree)
            if first is None:
                continue
            above = "\n".join(text.splitlines()[max(0, first.lineno - 4) : first.lineno])
            if "deferred import" not in (ast.get_docstring(tree) or "") + above:
                silent.append(f"{name}:{first.lineno}")
    assert silent == [], "say why these imports are inside functions (\"deferred import\" in the module docstring or a comment above the first): " + ", ".join(silent)


# Folders under tests/ that hold no tests: npm prefixes of the agent programs and git hook
# managers (agents, tools), golden files, and the support package itself.
NOT_TESTS = {"agents", "tools", "golden", "support", "__pycache__"}


def python_files_of_the_tests() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if not NOT_TESTS & set(p.relative_to(TESTS).parts[:-1]))


def test_every_module_among_the_tests_is_a_test_file_or_a_conftest() -> None:
    """A helper beside the tests is found by one folder's tests only (pytest puts each test
    file's own folder on sys.path): shared code goes into tests/support, imported as
    `support.x` from any folder."""
    helpers = [p.relative_to(TESTS).as_posix() for p in python_files_of_the_tests() if not (p.name.startswith("test_") or p.name == "conftest.py")]
    assert helpers == [], f"move these into tests/support: {helpers}"


def test_no_test_file_imports_another_and_support_has_one_spelling() -> None:
    """A test file importing another runs (and collects) the other's module-level code and
    hides what two files share; `tests.support.x` beside `support.x` would load one helper
    twice, with two copies of its state."""
    found = []
    for path in python_files_of_the_tests() + sorted(SUPPORT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                first, _, rest = name.partition(".")
                if first.startswith("test_") or first == "conftest" or (first == "tests" and rest) or rest.split(".")[-1].startswith("test_"):
                    found.append(f"{path.relative_to(TESTS)} imports {name}")
    assert found == []


def test_every_test_file_sits_in_a_folder_under_a_name_of_its_own() -> None:
    """Tests are found by the part of relay they test (docs/architecture.md lists the
    folders). The folders are no packages, so pytest imports each test file by its bare
    name: two files of one name would collide."""
    files = [p for p in python_files_of_the_tests() if p.name.startswith("test_")]
    assert [p.name for p in files if p.parent == TESTS] == []
    names = [p.name for p in files]
    assert sorted({n for n in names if names.count(n) > 1}) == []
