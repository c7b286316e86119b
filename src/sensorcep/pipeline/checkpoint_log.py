"""What a query's checkpoint says it has done: Spark's offset log (``offsets/<batch>``: the batch's watermark and the
end offsets of each source) and commit log (``commits/<batch>``: the batch is done).

Read as files: local paths and Unity Catalog volumes (``/Volumes/...``, a FUSE mount on Databricks); a file system
the driver cannot open (``dbfs:/``, ``s3://``) is read through Spark. A real-time-mode checkpoint keeps the same two
logs: its ``offsets/<batch>`` is written when the long-running batch ends, with the offsets it ended at.
"""

from __future__ import annotations

import json
import os
import shutil

from pyspark.sql import SparkSession


def read_lines(spark: SparkSession | None, path: str) -> list[str]:
    """The lines of one log file."""
    try:
        with open(path) as handle:
            return handle.read().splitlines()
    except OSError:
        if spark is None:
            raise
        return [row[0] for row in spark.read.text(path).collect()]


def batches(checkpoint: str, log: str) -> list[int]:
    """The batch ids the ``log`` (``offsets`` or ``commits``) holds, in order; empty when there is none."""
    folder = os.path.join(checkpoint, log)
    try:
        return sorted(int(name) for name in os.listdir(folder) if name.isdigit())
    except OSError:
        return []


def last_committed(checkpoint: str) -> int | None:
    """The last batch the query committed (None: none yet, or no checkpoint)."""
    done = batches(checkpoint, "commits")
    return done[-1] if done else None


def watermark_ms(spark: SparkSession | None, checkpoint: str, batch_id: int) -> int:
    """The watermark the query used in ``batch_id`` (``batchWatermarkMs`` of its offset log entry)."""
    return int(json.loads(read_lines(spark, f"{checkpoint}/offsets/{batch_id}")[1]).get("batchWatermarkMs", 0))


def committed_offsets(spark: SparkSession | None, checkpoint: str) -> dict | None:
    """The end offsets of the last committed batch of a query with one Kafka source (``{topic: {partition:
    offset}}``, Spark's ``startingOffsets`` JSON), or None when it has committed nothing."""
    batch = last_committed(checkpoint)
    if batch is None:
        return None
    return json.loads(read_lines(spark, f"{checkpoint}/offsets/{batch}")[2])


def is_ahead(offsets: dict, of: dict | None) -> bool:
    """Whether ``offsets`` is past ``of`` in some partition (``of`` None: nothing read yet)."""
    if of is None:
        return True
    return any(
        offset > of.get(topic, {}).get(partition, -1)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    )


#: the checkpoint's folders Spark requires empty when it starts a query as new (``verifyNewCheckpointDirectory``)
NEW_QUERY_FOLDERS = ("offsets", "commits", "state")


def clear_unstarted(checkpoint: str, *, realtime: bool) -> list[str]:
    """Clear the leftovers of a run killed before its first commit, which Spark would refuse to start from.

    Spark starts a query as new when its offset log has no batch, and then requires ``offsets``, ``commits`` and
    ``state`` empty (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``). A run killed while writing its first offset log
    entry leaves a temporary file there; a real-time-mode run killed between the offset log entry it writes when its
    long-running batch ends and the commit leaves one Spark drops (it purges uncommitted real-time batches) and then
    refuses to start over the rest. Either way the query committed nothing: what is cleared was never done, and the
    restart reads from where a new query would. Returns the folders cleared (local checkpoints only; a commit, or a
    planned micro-batch Spark will re-run, leaves everything as it is)."""
    if batches(checkpoint, "commits") or (batches(checkpoint, "offsets") and not realtime):
        return []
    cleared = []
    for name in NEW_QUERY_FOLDERS:
        folder = os.path.join(checkpoint, name)
        if os.path.isdir(folder) and os.listdir(folder):
            shutil.rmtree(folder)
            cleared.append(folder)
    return cleared
