"""pyproject.toml says what the package needs; requirements.txt pins exactly that; the venv holds the pins."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10: tomllib's origin, pinned in requirements.txt
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: what pyspark's ``connect`` extra brings (the Spark Connect client), pinned like the rest
CONNECT_CLIENT = ["grpcio", "grpcio-status", "googleapis-common-protos", "zstandard"]
#: the Pythons requirements.txt pins for: 3.10 (pyproject.toml's requires-python) and 3.11+, where a pin that needs
#: 3.11 has a second line for 3.10 (``python_version < "3.11"``)
PYTHONS = ["3.10", "3.11"]


def pins(python: str | None = None) -> dict[str, str]:
    """requirements.txt's pins for Python ``python`` ("3.10"), by default this interpreter's: a line with a marker
    counts where its marker holds."""
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    found = {}
    for line in filter(None, lines):
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.\-+]+)(?:\s*;\s*(.+))?", line)
        assert match, f"requirements.txt: {line!r} is not an exact pin (name==version, an optional marker)"
        if match.group(3) and not Marker(match.group(3)).evaluate({"python_version": python} if python else None):
            continue
        name = canonicalize_name(match.group(1))
        assert name not in found, f"requirements.txt pins {name} twice for Python {python or 'here'}"
        found[name] = match.group(2)
    return found


def declared(python: str | None = None) -> list[Requirement]:
    """pyproject.toml's requirements for Python ``python``, by default this interpreter's (a marker must hold)."""
    project = PYPROJECT["project"]
    requirements = [
        Requirement(r)
        for r in project["dependencies"]
        + [r for extra in project["optional-dependencies"].values() for r in extra]
        + PYPROJECT["dependency-groups"]["dev"]
    ]
    where = {"python_version": python} if python else None
    return [r for r in requirements if r.marker is None or r.marker.evaluate(where)]


@pytest.mark.parametrize("python", PYTHONS)
def test_every_declared_requirement_is_pinned_within_its_range(python):
    pinned = pins(python)
    for requirement in declared(python):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} (pyproject.toml) has no pin in requirements.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"requirements.txt pins {name}=={pinned[name]} for Python {python}, outside pyproject.toml's {requirement}"
        )
    for name in CONNECT_CLIENT:
        assert name in pinned, f"the Spark Connect client's {name} is not pinned"


@pytest.mark.parametrize("python", PYTHONS)
def test_nothing_is_pinned_that_nobody_declares(python):
    names = {canonicalize_name(r.name) for r in declared(python)} | set(CONNECT_CLIENT)
    assert set(pins(python)) == names, "a package is pinned for the Pythons it is declared for, and only for them"


def test_the_environment_holds_the_pins():
    assert {name: version(name) for name in pins()} == pins()


def test_the_wheel_never_replaces_the_clusters_spark():
    runtime = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert not runtime & {"pyspark", "delta-spark", "databricks-connect"}
