"""The interpreter local sessions start PySpark's workers with (``sensorcep.local.python_worker``): pyspark and py4j
from their installed packages, not from the source archives Spark puts first on a worker's path."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from sensorcep.local import python_worker

ARCHIVES = python_worker.spark_archives()
PROBE = "import json, os, sys, pyspark; print(json.dumps([pyspark.__file__, sys.argv, os.environ['PYTHONPATH']]))"


def test_sparks_archives_go_last_in_their_order_and_nothing_else_moves():
    lib = "/opt/spark/python/lib"
    entries = [f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip", "/work/app", "/work/pyspark.zip", "/site"]
    assert python_worker.archives_last(entries) == [
        "/work/app",
        "/work/pyspark.zip",  # a zip of that name elsewhere is a user's own: it stays where it was
        "/site",
        f"{lib}/pyspark.zip",
        f"{lib}/py4j-0.10.9.9-src.zip",
    ]


def run_probe(python: str, tmp_path: Path) -> tuple[str, list[str], str]:
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*ARCHIVES, str(tmp_path)])}  # as Spark sets a worker's
    done = subprocess.run([python, "-m", "probe", "--a", "b"], env=env, capture_output=True, text=True, check=True)
    return tuple(json.loads(done.stdout))


def test_a_worker_module_runs_as_with_python_m_importing_the_installed_pyspark(tmp_path):
    assert len(ARCHIVES) == 2, ARCHIVES  # pyspark.zip and py4j's: what Spark puts first
    if python_worker.interpreter() == sys.executable:
        pytest.fail(f"{python_worker.SCRIPT} is not installed beside {sys.executable}: run `make venv`")
    plain = run_probe(sys.executable, tmp_path)
    assert plain[0].startswith(ARCHIVES[-1] + os.sep), "without it, a worker imports pyspark from Spark's zip"

    imported, argv, path = run_probe(python_worker.interpreter(), tmp_path)
    assert imported == pyspark.__file__, "the installed package, whose bytecode pip compiled"
    assert argv == [str(tmp_path / "probe.py"), "--a", "b"], "argv as python -m gives it"
    assert path.split(os.pathsep) == [str(tmp_path), *ARCHIVES], "a Python the worker starts gets the same order"


def test_without_the_script_the_interpreter_itself_starts_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert python_worker.interpreter() == str(tmp_path / "python")
