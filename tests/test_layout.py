"""The layout says what runs where: cluster code (pipeline, I/O) never imports the laptop twin (``sensorcep.local``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sensorcep

PACKAGE = Path(sensorcep.__file__).parent
CLUSTER_PACKAGES = ("pipeline", "io")


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


def test_pipeline_and_io_never_import_the_local_twin():
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imported_modules(path) if m.startswith("sensorcep.local"))
        for sub in CLUSTER_PACKAGES
        for path in (PACKAGE / sub).glob("*.py")
    }
    assert {file: mods for file, mods in offenders.items() if mods} == {}
    assert len(offenders) >= 9, "the cluster packages were found"


def test_importing_every_cluster_module_loads_nothing_of_the_local_twin():
    modules = [
        f"sensorcep.{sub}.{path.stem}"
        for sub in CLUSTER_PACKAGES
        for path in (PACKAGE / sub).glob("*.py")
        if path.stem != "__init__"
    ]
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.startswith('sensorcep.local')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_test_only_code_is_not_shipped():
    assert not (PACKAGE / "oracle.py").exists() and (Path(__file__).parent / "oracle.py").exists()


def test_the_import_scan_sees_a_lazy_import_inside_a_function(tmp_path):
    module = PACKAGE / "pipeline" / "parsing.py"
    assert "sensorcep.settings" in imported_modules(module)
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    from sensorcep.local import broker\n")
    assert "sensorcep.local.broker" in imported_modules(sneaky)
