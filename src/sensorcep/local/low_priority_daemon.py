"""PySpark's Python worker daemon at a lower CPU priority (local sessions only: ``spark.python.daemon.module``).

On a laptop the real-time alert query's long-running tasks (JVM threads) share the cores with the micro-batch
queries' Python workers (the sampling and device-activity processors). Workers forked by this daemon run at
``nice`` +10 (``SENSORCEP_PYTHON_WORKER_NICE``), so a sampling batch takes the CPU the alerts leave idle instead of
delaying them. On Databricks the always-on job runs the alert query on a cluster of its own instead.

A worker calls ``importlib.invalidate_caches()`` at the start of every task (``pyspark.worker_util``), and on Python
3.10 and 3.11 that re-reads the whole directory of every zip archive on the path (pyspark's ``pyspark.zip`` and py4j's:
37 ms a task here, for each task of each Python query's every micro-batch). CPython 3.12 made that re-read lazy
(python/cpython#103200, "zipimport.invalidate_caches() causes performance regression"); here, before any worker is
forked, an archive's directory is read again only when the archive changed (its size or modification time), as a
Python UDF's files added while the session runs do.

A reused worker also runs a full ``gc.collect()`` after every task (``pyspark.daemon``), which walks every object the
worker holds: pyspark's, pandas' and pyarrow's modules included (24-35 ms here, about 90,000 objects). Here that
collection is followed by ``gc.freeze()``: what survived it (the modules a task imported, caches) is not walked again,
and the next task's collection walks only what the tasks since made. Garbage is still collected after each task; what
a task left alive is freed by its reference count when it goes, as any Python object is.
"""

import gc
import importlib
import os
import zipimport

from pyspark import daemon


def reread_zips_only_when_changed() -> None:
    """``zipimporter.invalidate_caches`` re-reads an archive's directory only when the archive changed (on 3.12+,
    where the re-read is lazy, this changes nothing but a ``stat`` per archive)."""
    invalidate, seen = zipimport.zipimporter.invalidate_caches, {}

    def invalidate_caches(self) -> None:
        try:
            stat = os.stat(self.archive)
            mark = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            mark = None
        key = (self.archive, self.prefix)  # one importer per folder of an archive, each with its own listing
        if mark is None or seen.get(key) != mark:
            invalidate(self)
            seen[key] = mark

    zipimport.zipimporter.invalidate_caches = invalidate_caches
    importlib.invalidate_caches()  # read once here: the forked workers start with every archive seen


class CollectThenFreeze:
    """``pyspark.daemon``'s ``gc``: its ``collect()`` (a reused worker's, after each task) collects, then freezes what
    survived (``gc.freeze``), so the next one walks only the objects made since."""

    def collect(self, generation: int = 2) -> int:
        found = gc.collect(generation)
        gc.freeze()
        return found

    def __getattr__(self, name: str):
        return getattr(gc, name)


if __name__ == "__main__":
    os.nice(int(os.environ.get("SENSORCEP_PYTHON_WORKER_NICE", "10")))
    reread_zips_only_when_changed()
    daemon.gc = CollectThenFreeze()
    daemon.manager()
