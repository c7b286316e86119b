"""The Python a local session starts PySpark's workers with (``PYSPARK_PYTHON``): this interpreter, with pyspark and
py4j imported from their installed packages instead of Spark's source archives.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip first on every Python worker's path: the
worker daemon (and the workers it forks), and the one-off worker that reads a ``transformWithStateInPandas``
processor's state schema each time such a query starts. Python compiles every module it imports from a zip archive
again in each process (it caches no bytecode for them): the modules a worker imports took 0.87 s of CPU that way,
against 0.35 s from the installed package, whose bytecode pip compiled once (``benchmarks/python_worker.py``,
decision 0054). With a pip-installed
pyspark both are the same release: ``SPARK_HOME`` is the package's own folder. The archives are moved to the end of
the path, not removed, so whatever only they hold still imports.

Spark runs the workers as ``<python> -m <module> [args]``; :func:`main` does the same after reordering the path.
It is the console script ``sensorcep-python-worker`` (``pyproject.toml``), which imports nothing of pyspark before.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path

#: the console script that runs :func:`main`, installed beside the interpreter by ``pip install -e .``
SCRIPT = "sensorcep-python-worker"


def is_spark_archive(entry: str) -> bool:
    """Whether a path entry is one of the source archives Spark puts on a worker's path: ``pyspark.zip`` or
    ``py4j-<version>-src.zip`` in a ``python/lib`` folder."""
    path = Path(entry)
    named = path.name == "pyspark.zip" or (path.name.startswith("py4j-") and path.name.endswith("-src.zip"))
    return named and path.parent.name == "lib" and path.parent.parent.name == "python"


def spark_archives() -> list[str]:
    """The source archives Spark puts first on a worker's path: ``$SPARK_HOME/python/lib/*.zip`` of the installed
    pyspark (found, not imported)."""
    package = Path(importlib.util.find_spec("pyspark").origin).parent
    return sorted(str(path) for path in (package / "python" / "lib").glob("*.zip"))


def archives_last(entries: list[str]) -> list[str]:
    """``entries`` with Spark's source archives moved after every other entry, each in its order."""
    return [e for e in entries if not is_spark_archive(e)] + [e for e in entries if is_spark_archive(e)]


def interpreter() -> str:
    """What a local session sets ``PYSPARK_PYTHON`` to: the console script beside this interpreter, or the
    interpreter itself when the package was installed without its scripts."""
    script = Path(sys.executable).with_name(SCRIPT)
    return str(script) if script.is_file() and os.access(script, os.X_OK) else sys.executable


def main() -> None:
    """``sensorcep-python-worker -m <module> [args]``: run ``<module>`` as ``python -m`` would, Spark's archives last
    on the path (``PYTHONPATH`` too, for any Python the worker starts); anything else runs the interpreter itself."""
    args = sys.argv[1:]
    if "PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = os.pathsep.join(archives_last(os.environ["PYTHONPATH"].split(os.pathsep)))
    if len(args) < 2 or args[0] != "-m":
        os.execv(sys.executable, [sys.executable, *args])
    sys.path[:] = archives_last(sys.path)
    sys.argv = [args[1], *args[2:]]  # as ``python -m``: the module's file replaces argv[0]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
