"""The shape of relayd's code, read from its own files: at most 20 modules at the top of
`relayd/`, the rest in wings (sub-packages, one idea each), and every import between two
wings or top-level modules pointing down the order docs/architecture.md gives ("The
wings": the wings, and the top-level modules that stand over some of them; the rest of
the top, the shared core, imports no wing). And the
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
# The one module of the shared core that imports a wing's module: the default prompt pattern
# (relayd/arrival/paneinput.py imports nothing of relay but the programs wing).
CORE_INTO_A_WING = {("config", "relayd.arrival.paneinput")}


def wings() -> list[str]:
    return sorted(p.parent.name for p in RELAYD.glob("*/__init__.py"))


def documented_order() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## The wings\n") :]
    section = section[: section.index("\n## ")]
    return re.findall(r"^\| \d+ \| `relayd/(\w+)/` \|", section, re.M)


def standing_over_wings() -> dict[str, str]:
    """Each top-level module that stands over wings -> the wing or module it sits just above."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## The wings\n") :]
    section = section[: section.index("\n## ")]
    return dict(re.findall(r"^\| `relayd/(\w+)\.py` \| `relayd/(\w+)(?:/|\.py)` \|$", section, re.M))


def heights() -> dict[str, int]:
    """Every wing and every top-level module standing over wings, lowest first: the wings
    in their order, each such module put just above the one it names."""
    placed = documented_order()
    waiting = standing_over_wings()
    while waiting:
        ready = [module for module, under in waiting.items() if under in placed]
        assert ready, f"these stand on nothing documented: {waiting}"
        for module in ready:
            placed.insert(placed.index(waiting.pop(module)) + 1, module)
    return {unit: i for i, unit in enumerate(placed)}


def top_modules() -> list[str]:
    return sorted(p.stem for p in RELAYD.glob("*.py") if p.name != "__init__.py")


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


def test_the_modules_standing_over_wings_are_top_level_modules_each_above_another() -> None:
    over = standing_over_wings()
    assert over and set(over) <= set(top_modules()), over
    assert len(set(over.values())) == len(over), "two modules just above one: say which stands higher"
    assert set(over.values()) <= set(wings()) | set(top_modules()), over


def units_of_relayd() -> list[tuple[str, Path]]:
    """(wing or top-level module, file) for every file of relayd but its own __init__.py."""
    tops = [(module, RELAYD / f"{module}.py") for module in top_modules()]
    return tops + [(wing, path) for wing in wings() for path in sorted((RELAYD / wing).rglob("*.py"))]


def test_every_import_between_wings_and_top_level_modules_points_down() -> None:
    height = heights()
    upward = []
    for unit, path in units_of_relayd():
        for name in imported(path):
            parts = name.split(".")
            if len(parts) < 2 or parts[1] in (unit, "__init__"):
                continue  # relayd's package file, or its own wing
            target = parts[1]
            if unit not in height:  # the shared core: below every wing and what stands over wings
                if target in height and (unit, name) not in CORE_INTO_A_WING:
                    upward.append(f"{path.relative_to(ROOT)} (the shared core) imports {name}")
            elif target in height and height[target] > height[unit] and not ((unit, target) in UP_TO_A_PACKAGE and len(parts) == 2):
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


# What a store operation meets through its `Store` (how writes become durable, relayd's recent
# message ids, the agents of other hosts) is given to the constructor, never assigned later:
# otherwise it would depend on which process set which field (relayd.store).
STORE_COLLABORATORS = {"sync", "recent_ids", "remote"}


def assigned_attributes(path: Path) -> list[tuple[int, ast.Attribute]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        found += [(node.lineno, target) for target in targets if isinstance(target, ast.Attribute)]
    return found


def test_relays_code_assigns_nothing_of_a_built_store_and_tests_none_of_its_collaborators() -> None:
    code = [path for package in PACKAGES + ("benchmarks",) for path in sorted((ROOT / package).rglob("*.py")) if path != RELAYD / "store.py"]
    assigned = [
        f"{path.relative_to(ROOT)}:{line} {ast.unparse(target)}"
        for path in code + python_files_of_the_tests() + sorted(SUPPORT.glob("*.py"))
        for line, target in assigned_attributes(path)
        if "store" in ast.unparse(target.value).lower().rsplit(".", 1)[-1]
        # relay's own code assigns nothing of a built Store (what a handle works out once is kept
        # in its `remembered`, by the one function that knows it); a test may stand in for a method
        and (path in code or target.attr in STORE_COLLABORATORS)
    ]
    assert assigned == [], "give these to Store(...) instead: " + ", ".join(assigned)
