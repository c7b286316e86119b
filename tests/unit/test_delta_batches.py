"""The fault test's replay of device activity, itself tested without a JVM: which files of a Delta table each
micro-batch took, read from a query's offset log and the table's log as Delta's streaming source cuts them
(``support.delta_batches``), and the device activity contract replayed over such cuts (``support.oracle``)."""

from __future__ import annotations

import json
from pathlib import Path

from support.delta_batches import batches
from support.oracle import device_status_changes


def _table(root: Path, commits: list[list[tuple[str, int]]]) -> str:
    """A table's ``_delta_log``: version 0 creates it; each later commit adds (file, modification time) files."""
    log = root / "table" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text(json.dumps({"metaData": {"id": "t"}}) + "\n")
    for version, files in enumerate(commits, start=1):
        actions = [{"commitInfo": {"operation": "WRITE"}}, {"txn": {"appId": "w", "version": version}}]
        actions += [
            {"add": {"path": f"part_date=2026-03-02/{name}", "modificationTime": mtime, "dataChange": True}}
            for name, mtime in files
        ]
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return str(root / "table")


def _query(root: Path, name: str, ends: list[tuple[int, int, bool, int]], committed: int) -> str:
    """A checkpoint whose offset log holds one entry per (version, index, in the snapshot, watermark ms) and whose
    commit log holds the first ``committed`` of them."""
    checkpoint = root / name
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    for batch_id, (version, index, snapshot, mark) in enumerate(ends):
        offset = {"sourceVersion": 1, "reservoirId": "t", "reservoirVersion": version, "index": index,
                  "isStartingVersion": snapshot}  # fmt: skip
        meta = json.dumps({"batchWatermarkMs": mark, "batchTimestampMs": 0})
        # a query whose stream reads the table twice (the late-event union) lists it twice, at the same offset
        (checkpoint / "offsets" / str(batch_id)).write_text(f"v1\n{meta}\n{json.dumps(offset)}\n{json.dumps(offset)}")
        if batch_id < committed:
            (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return str(checkpoint)


def test_each_batch_takes_the_files_after_the_last_ones_offset_up_to_its_own_and_only_committed_batches_count(tmp_path):
    table = _table(tmp_path, [[("a", 5), ("b", 4)], [("c", 9)], [("d", 1), ("e", 2)]])
    ends = [(1, 0, False, 0), (3, -1, False, 10), (3, 1, False, 20), (3, 1, False, 30), (3, 1, False, 40)]
    cut = batches(_query(tmp_path, "q", ends, committed=4), table)
    assert [(b.batch_id, sorted(b.files), b.watermark_ms) for b in cut] == [
        (0, ["a"], 0),  # version 1 up to its first data file (the commit's other actions are not indexed)
        (1, ["b", "c"], 10),  # (3, -1): everything before version 3
        (2, ["d", "e"], 20),
        (3, [], 30),  # a batch with no new data: the watermark moved on
    ], "batch 4 was planned, never committed"


def test_a_query_that_starts_on_a_table_with_data_takes_its_snapshot_in_modification_time_order_first(tmp_path):
    # log order a, b, c would cut the snapshot {a, b}, {c}; modification time order is c (4), a (5), b (9)
    table = _table(tmp_path, [[("a", 5), ("b", 9)], [("c", 4)], [("d", 1)]])
    ends = [(2, 1, True, 0), (2, 2, True, 0), (4, -1, False, 0)]
    cut = batches(_query(tmp_path, "q", ends, committed=3), table)
    # d, older than all, comes after the snapshot: the versions after it are read in log order
    assert [b.files for b in cut] == [{"c", "a"}, {"b"}, {"d"}]


def test_device_activity_follows_the_cuts_an_event_after_a_later_one_changes_no_status():
    timeout = 60_000
    # 0 s, then 100 s and 50 s: together in one batch, 50 s splits the gap (no status change)
    together = device_status_changes([(0, {"d": [0]}), (0, {"d": [100_000, 50_000]})], timeout)
    assert together == [("d", "device_first_seen", "online", 0, 0, 0, 1)]
    # 100 s in one batch, 50 s in the next: the gap 0 -> 100 s already made it offline at 60 s, online at 100 s
    apart = device_status_changes([(0, {"d": [0]}), (0, {"d": [100_000]}), (0, {"d": [50_000]})], timeout)
    assert apart == [
        ("d", "device_first_seen", "online", 0, 0, 0, 1),
        ("d", "device_offline", "offline", 60_000, 0, 100_000, 2),
        ("d", "device_online", "online", 100_000, 0, 100_000, 2),
    ]
    # a batch's timers fire once its watermark is past last + timeout (Spark fires timers before the watermark)
    quiet = device_status_changes([(0, {"d": [0]}), (60_000, {}), (60_001, {})], timeout)
    assert quiet[1:] == [("d", "device_offline", "offline", 60_000, 0, 0, 1)]
