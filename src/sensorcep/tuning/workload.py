"""The workload every configuration reads: seeded events, written once as a Delta table (one commit per
micro-batch) and read back as a stream of those batches."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sensorcep.runtime import get_spark
from sensorcep.settings import Settings
from sensorcep.tuning.presets import TuningError


@dataclass(frozen=True)
class Workload:
    """Simulated valid events: ``events`` over ``devices``, ``rate`` per event-time second, ``batch`` per trigger.

    ``shape``: ``steady`` or ``bursty`` (the rate alternates between 3x and 1/3 of ``rate`` every minute).
    Event times jitter up to 5 s (inside the watermark), 1% anomalies, 1% exact re-sends.
    """

    events: int = 20_000
    devices: int = 200
    rate: int = 500
    batch: int = 4_000
    shape: str = "steady"
    seed: int = 5

    def __post_init__(self):
        if self.shape not in ("steady", "bursty"):
            raise TuningError(f"workload shape must be 'steady' or 'bursty', not {self.shape!r}")
        if min(self.events, self.devices, self.rate, self.batch) <= 0:
            raise TuningError("workload events, devices, rate and batch must be positive")


#: workloads of the preset matrices. Each spans more event time than a window and the watermark (60 s + 30 s by
#: default), so windows close: the queries emit and their state is evicted, as in production (at 500 events/s the
#: smaller two spanned 8 s and 40 s, and measured state that only grew, with no output)
WORKLOADS = {
    "smoke": Workload(events=4_000, rate=25, batch=1_000),  # 160 s of event time
    "quick": Workload(events=20_000, rate=100, batch=2_500),  # 200 s
    "full": Workload(events=300_000, devices=1_000, rate=1_000, batch=20_000),  # 300 s
}


def workload_frame(workload: Workload) -> pd.DataFrame:
    """The workload's events in arrival order (device_id, sensor_freq, event_time)."""
    rng = np.random.default_rng(workload.seed)
    n = workload.events
    offsets_s = np.arange(n) / workload.rate
    if workload.shape == "bursty":  # minute k holds 60 * rate * (3 if k is even else 1/3) events, evenly spread
        per_minute = np.resize([workload.rate * 180, max(1, workload.rate * 20)], n // (workload.rate * 20) + 2)
        minute = np.repeat(np.arange(len(per_minute)), per_minute)[:n]
        position = np.arange(n) - np.concatenate([[0], np.cumsum(per_minute)])[minute]
        offsets_s = minute * 60 + position * 60 / per_minute[minute]
    arrival_us = 1_767_571_200_000_000 + (offsets_s * 1e6).astype(np.int64)
    event_us = (arrival_us - rng.uniform(0, 5e6, n).astype(np.int64)) // 1000 * 1000
    freq = np.round(rng.normal(50, 10, n), 6)
    freq[rng.random(n) < 0.01] *= -1
    device = np.char.add("dev-", np.char.zfill(rng.integers(0, workload.devices, n).astype(str), 5))
    dup = rng.random(n) < 0.01
    dup[0] = False
    idx = np.where(dup, np.arange(n) - 1, np.arange(n))
    return pd.DataFrame(
        {
            "device_id": device[idx],
            "sensor_freq": freq[idx],
            "event_time": pd.to_datetime(event_us[idx], unit="us", utc=True),
        }
    )


WORKLOAD_SCHEMA = "device_id string, sensor_freq double, event_time timestamp"


def write_workload(folder: Path | str, workload: Workload, batches: int | None = None) -> list[int]:
    """The workload (its first ``batches`` micro-batches) as a Delta table, one commit of one file per micro-batch;
    returns events per batch.

    Read back by :func:`workload_stream`, every configuration sees the same batches, in commit order: nothing
    depends on file modification times, which Unity Catalog volumes and other mounts do not keep reliably.
    ``folder``: a path, or a table name (:func:`workload_location`: no Delta table may live on a volume).
    """

    spark = get_spark()
    frame = workload_frame(workload)
    sizes = []
    for start in list(range(0, len(frame), workload.batch))[:batches]:
        part = frame.iloc[start : start + workload.batch]
        writer = spark.createDataFrame(part, WORKLOAD_SCHEMA).coalesce(1).write.format("delta").mode("append")
        writer.saveAsTable(str(folder)) if is_table_name(folder) else writer.save(str(folder))
        sizes.append(len(part))
    return sizes


def workload_stream(spark, source: str):
    """A workload table (path or name) as a stream of its micro-batches: one commit (one file) per trigger."""
    reader = spark.readStream.format("delta").option("maxFilesPerTrigger", 1)
    return reader.table(source) if is_table_name(source) else reader.load(source)


def workload_location(settings: Settings, work: Path, name: str, run_id: str) -> str:
    """Where the run's workload table ``name`` goes: a folder under its scratch folder, or, when that folder is on a
    Unity Catalog volume (which may not hold Delta tables), a managed table in the deployment's schema,
    ``<catalog>.<schema>.tuning_<run>_<name>``, dropped after the run."""
    if not str(work).startswith("/Volumes/"):
        return str(work / name)
    table = re.sub(r"\W", "_", f"tuning_{run_id}_{name}").lower()
    return ".".join(part for part in (settings.catalog, settings.schema, table) if part)


def is_table_name(location: Path | str) -> bool:
    return "/" not in str(location)
