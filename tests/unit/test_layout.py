"""The layout says what runs where: cluster code (pipeline, I/O) never imports the laptop twin (``sensorcep.local``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sensorcep

PACKAGE = Path(sensorcep.__file__).parent
CLUSTER_PACKAGES = ("pipeline", "io", "rules", "routes")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function, as absolute dotted names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[: -node.level])
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_file(name: str) -> Path | None:
    """The file of a project module (``sensorcep.x.y``), or None for a name that is not one (a function)."""
    parts = name.split(".")[1:]
    if not parts:
        return PACKAGE / "__init__.py"
    relative = Path(*parts)
    for candidate in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def reached_from(start: list[str]) -> dict[str, str]:
    """Every project module the ``start`` modules import, transitively, at the top or inside functions:
    {module: the module that imports it first}."""
    seen, todo = {m: "" for m in start}, list(start)
    while todo:
        module = todo.pop()
        path = module_file(module)
        for name in sorted(imported_modules(path)) if path else ():
            if name.startswith("sensorcep") and module_file(name) and name not in seen:
                seen[name] = module
                todo.append(name)
    return seen


def cluster_modules() -> list[str]:
    return [f"sensorcep.{sub}.{path.stem}" for sub in CLUSTER_PACKAGES for path in sorted((PACKAGE / sub).glob("*.py"))]


def test_nothing_cluster_code_imports_reaches_the_local_twin_even_transitively():
    reached = reached_from(cluster_modules())
    offenders = {m: by for m, by in reached.items() if m.startswith("sensorcep.local")}
    assert offenders == {}, "cluster code reaches laptop code (module: imported by)"
    assert "sensorcep.runtime" in reached and "sensorcep.observability.monitoring" in reached
    assert len(reached) >= 15, "the scan followed the imports"


def test_importing_every_cluster_module_loads_nothing_of_the_local_twin():
    modules = [m for m in cluster_modules() if not m.endswith("__init__")]
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.startswith('sensorcep.local')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_test_only_code_is_not_shipped():
    assert not (PACKAGE / "oracle.py").exists() and (Path(__file__).parents[1] / "support" / "oracle.py").exists()


def test_no_test_file_imports_another_test_file():
    """Shared test code lives in ``tests/support``; a test module imported by another runs its tests twice and ties
    two tiers together (found: the stateful rules tests imported the rule tests, the deploy tests the bundle tests)."""
    tests = Path(__file__).parents[1]
    offenders = {
        f"{path.relative_to(tests)} imports {name}"
        for path in tests.rglob("test_*.py")
        for name in imported_modules(path)
        if name.split(".")[0].startswith("test_")
    }
    assert not offenders, sorted(offenders)


def test_the_laptop_session_is_handed_in_through_entry_points_not_imports():
    from sensorcep import runtime
    from sensorcep.local import session

    assert runtime.laptop("session") is session.start and runtime.laptop("dbutils") is session.LocalDbutils
    assert "sensorcep.local.session" not in reached_from(["sensorcep.runtime"])


def test_the_import_scan_sees_a_lazy_import_inside_a_function(tmp_path):
    module = PACKAGE / "pipeline" / "parsing.py"
    assert "sensorcep.settings" in imported_modules(module)
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    from sensorcep.local import broker\n")
    assert "sensorcep.local.broker" in imported_modules(sneaky)


#: the packages from the bottom up: a module imports only its own layer and the ones below (no package loops)
LAYERS = (
    "sensorcep.io",
    "sensorcep.observability",
    "sensorcep.rules",
    "sensorcep.routes",
    "sensorcep.pipeline",
    "sensorcep.tuning",
    "sensorcep.incidents",
    "sensorcep.local",
)


def _layer(module: str) -> int:
    return next((i for i, prefix in enumerate(LAYERS) if module.startswith(prefix)), -1)  # -1: settings, runtime


def test_packages_import_only_downwards_so_there_is_no_package_loop():
    upward = {}
    for path in PACKAGE.rglob("*.py"):
        module = "sensorcep." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for name in imported_modules(path):
            if name.startswith("sensorcep.") and module_file(name) and _layer(name) > _layer(module):
                upward.setdefault(module, []).append(name)
    allowed = {"sensorcep.__main__"}  # the command line sits on top of everything
    assert {m: sorted(names) for m, names in upward.items() if m not in allowed} == {}
