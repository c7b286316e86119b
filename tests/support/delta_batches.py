"""Which rows of a Delta table each micro-batch of a streaming query took, read from what Spark and Delta keep: the
query's offset log (each batch's end offset in the table and the watermark it ran with) and the table's own log
(each data file's commit version and its place in that commit).

Delta's streaming source cuts a table as ``DeltaSourceOffset`` says: an offset is a commit version and an index into
that commit's data files (its ``add`` actions with ``dataChange``, in log order, from 0); index -1 is before the
version's first file, so ``(v + 1, -1)`` is "all of version v". A query that starts on a table that already has data
first reads the table's snapshot at one version (``isStartingVersion``: the snapshot's files sorted by modification
time and path, indexed from 0), then the versions after it. A batch took the files after the previous batch's end
offset up to its own. The fault test's verdict replays a query batch by batch over these cuts
(:func:`batches`), so it can judge a table whose rows depend on how the input was cut (``device_status``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

#: Delta's index for "before the version's first file" (``DeltaSourceOffset.BASE_INDEX_V1``, as the log writes it)
BEFORE_FIRST = -1


@dataclass(frozen=True)
class DataFile:
    name: str  # the file's name (``_metadata.file_name`` of its rows)
    version: int  # the commit that added it
    index: int  # its place among that commit's data files
    modified_ms: int
    path: str  # as the log writes it (relative to the table, URL-encoded)


@dataclass(frozen=True)
class Batch:
    batch_id: int
    watermark_ms: int  # ``batchWatermarkMs``: the watermark the batch evicts and fires timers with
    files: frozenset[str]  # names of the data files it took


def data_files(table_path: str) -> list[DataFile]:
    """Every data file the table's commits added, in commit order. The table must be append-only (no file removed,
    none rewritten by a compaction): the streaming source's cut of anything else is not what this reads."""
    found = []
    for commit in sorted((Path(table_path) / "_delta_log").glob("*.json")):
        index = -1
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            rewritten = "remove" in action or ("add" in action and not action["add"].get("dataChange", True))
            assert not rewritten, f"{commit}: the table is not append-only ({next(iter(action))}): cannot read its cuts"
            add = action.get("add")
            if add is None:
                continue
            index += 1
            name = unquote(add["path"]).rsplit("/", 1)[-1]
            found.append(DataFile(name, int(commit.stem), index, int(add["modificationTime"]), add["path"]))
    return found


def _within(file: DataFile, offset: dict, snapshot: list[DataFile]) -> bool:
    """Whether ``file`` is at or before ``offset``: a batch that ends there has taken it."""
    version, index = offset["reservoirVersion"], offset["index"]
    if offset.get("isStartingVersion"):  # inside the snapshot at ``version``: its files sorted, then nothing after
        return file.version <= version and snapshot.index(file) <= index
    return (file.version, file.index) <= (version, index)


def batches(checkpoint: str, table_path: str) -> list[Batch]:
    """Each committed batch of the query at ``checkpoint`` (its offset log, every entry kept: the fault run keeps them
    all; a batch planned but not committed when the query stopped wrote nothing that counts), the files it took of the
    table at ``table_path`` (the query's every source reads that table, at the same offsets)."""
    files = data_files(table_path)
    entries = sorted(int(p.name) for p in (Path(checkpoint) / "offsets").glob("[0-9]*"))
    assert entries == list(range(len(entries))), f"{checkpoint}: the offset log lost entries: {entries[:5]}..."
    cut: list[Batch] = []
    taken: set[str] = set()
    snapshot: list[DataFile] = []
    for batch_id in entries:
        lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
        ends = [json.loads(line) for line in lines[2:] if line.strip() not in ("", "-")]
        assert ends and all(
            (e["reservoirVersion"], e["index"]) == (ends[0]["reservoirVersion"], ends[0]["index"]) for e in ends
        ), f"{checkpoint} batch {batch_id}: sources at different offsets: {ends}"
        end = ends[0]
        if end.get("isStartingVersion") and not snapshot:
            within = [f for f in files if f.version <= end["reservoirVersion"]]
            snapshot = sorted(within, key=lambda f: (f.modified_ms, f.path))
        now = {f.name for f in files if _within(f, end, snapshot)}
        cut.append(Batch(batch_id, int(json.loads(lines[1]).get("batchWatermarkMs", 0)), frozenset(now - taken)))
        taken |= now
    committed = {int(p.name) for p in (Path(checkpoint) / "commits").glob("[0-9]*")}
    return [batch for batch in cut if batch.batch_id in committed]
