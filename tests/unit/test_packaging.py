"""pyproject.toml says what the package needs; requirements.txt pins exactly that; the venv holds the pins."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: what pyspark's ``connect`` extra brings (the Spark Connect client), pinned like the rest
CONNECT_CLIENT = ["grpcio", "grpcio-status", "googleapis-common-protos", "zstandard"]


def pins() -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    found = {}
    for line in filter(None, lines):
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.\-+]+)", line)
        assert match, f"requirements.txt: {line!r} is not an exact pin (name==version)"
        found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def declared() -> list[Requirement]:
    project = PYPROJECT["project"]
    return [
        Requirement(r)
        for r in project["dependencies"]
        + [r for extra in project["optional-dependencies"].values() for r in extra]
        + PYPROJECT["dependency-groups"]["dev"]
    ]


def test_every_declared_requirement_is_pinned_within_its_range():
    pinned = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} (pyproject.toml) has no pin in requirements.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"requirements.txt pins {name}=={pinned[name]}, outside pyproject.toml's {requirement}"
        )
    for name in CONNECT_CLIENT:
        assert name in pinned, f"the Spark Connect client's {name} is not pinned"


def test_nothing_is_pinned_that_nobody_declares():
    names = {canonicalize_name(r.name) for r in declared()} | set(CONNECT_CLIENT)
    assert set(pins()) - names == set()


def test_the_environment_holds_the_pins():
    assert {name: version(name) for name in pins()} == pins()


def test_the_wheel_never_replaces_the_clusters_spark():
    runtime = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert not runtime & {"pyspark", "delta-spark", "databricks-connect"}
