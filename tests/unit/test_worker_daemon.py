"""The local Python worker daemon's import caches (``sensorcep.local.low_priority_daemon``): a worker's
``importlib.invalidate_caches()`` at each task reads a zip archive on the path again only when it changed."""

import gc
import importlib
import sys
import zipfile
import zipimport

from sensorcep.local import low_priority_daemon


def _zip(path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, source in modules.items():
            archive.writestr(f"{name.replace('.', '/')}.py", source)


def test_a_zip_on_the_path_is_read_again_only_when_it_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)  # undone
    archive = tmp_path / "libs.zip"
    before = {"zipped_first": "VALUE = 1", "zipped_pkg.__init__": "", "zipped_pkg.first": "VALUE = 0"}
    _zip(archive, before)
    monkeypatch.syspath_prepend(str(archive))
    for name in ("zipped_first", "zipped_second", "zipped_pkg", "zipped_pkg.first", "zipped_pkg.inner"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert importlib.import_module("zipped_first").VALUE == 1
    importlib.import_module("zipped_pkg.first")  # a second importer: the package's folder inside the archive
    low_priority_daemon.reread_zips_only_when_changed()

    reads = []
    read_directory = zipimport._read_directory
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: reads.append(path) or read_directory(path))
    importlib.invalidate_caches()  # what a worker does at every task: the archive is as it was, nothing is read
    assert reads == []

    # the archive changed: each of its importers reads it again
    _zip(archive, {**before, "zipped_second": "VALUE = 2", "zipped_pkg.inner": "VALUE = 3"})
    importlib.invalidate_caches()
    assert importlib.import_module("zipped_second").VALUE == 2
    assert importlib.import_module("zipped_pkg.inner").VALUE == 3
    assert reads, "the changed archive's directory was read again"


def test_a_workers_collection_after_a_task_collects_its_garbage_and_freezes_what_survived():
    class Cycle:
        pass

    collector = low_priority_daemon.CollectThenFreeze()
    try:
        kept, lost = Cycle(), Cycle()
        kept.me, lost.me = kept, lost  # two reference cycles: one still held, one garbage
        del lost
        assert collector.collect() >= 1, "the garbage cycle was collected"
        assert gc.is_tracked(kept) and gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects()), "what survived is frozen: the next collection skips it"
        assert collector.isenabled() == gc.isenabled()  # the rest of gc as it is
    finally:
        gc.unfreeze()
