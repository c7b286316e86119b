"""A sensor fleet on a simulated clock: realistic, messy events for Kafka, deterministic per seed.

Events are produced in *arrival* order; the Kafka timestamp of each record is its simulated
arrival time, so a run replays the same way whatever the machine's speed. The mix:
jitter (event time a little off the arrival time), out-of-order arrivals, late arrivals within the
watermark and some beyond it, exact duplicates re-sent a few seconds later, anomalies
(sensor_freq < 0), a few exact zeros, and a share of malformed records of many kinds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
from confluent_kafka import Producer
from tqdm.auto import tqdm

from sensorcep.io.kafka import LIBRDKAFKA_LOG
from sensorcep.io.lake import Tables
from sensorcep.pipeline.alerts import alert_id
from sensorcep.rules.model import Rule, load_rules
from sensorcep.runtime import get_spark

MALFORMED_KINDS = (
    "invalid JSON",
    "missing field sensor_freq",
    "sensor_freq has wrong type STRING",
    "unparseable event_time",
    "device_id has wrong type BOOLEAN",
    "event_time in the future",
    "not UTF-8",
)


@dataclass(frozen=True)
class SimulationConfig:
    events: int = 100_000
    devices: int = 1_000
    seed: int = 42
    start: datetime | None = None  # None: end the simulated span at the present moment
    rate: float = 1_000.0  # events per simulated second
    jitter_s: float = 2.0
    late_share: float = 0.02  # late but inside the watermark (10-25 s)
    too_late_share: float = 0.005  # beyond the watermark (60-180 s)
    duplicate_share: float = 0.01
    anomaly_share: float = 0.01
    zero_share: float = 0.001
    malformed_share: float = 0.01

    def resolved_start(self) -> datetime:
        if self.start is not None:
            return self.start if self.start.tzinfo else self.start.replace(tzinfo=timezone.utc)
        span = timedelta(seconds=self.events / self.rate)
        return (datetime.now(timezone.utc) - span).replace(microsecond=0)


@dataclass
class Simulation:
    """What was produced: every record in order, with its kind and (for valid ones) its fields."""

    config: SimulationConfig
    records: pd.DataFrame = field(repr=False)  # key, value, timestamp_ms, kind, device_id, sensor_freq, event_time
    end: datetime = None

    @property
    def valid(self) -> pd.DataFrame:
        return self.records[self.records.kind != "malformed"]

    @property
    def distinct_valid(self) -> pd.DataFrame:
        return self.valid.drop_duplicates(["device_id", "event_time"])

    @property
    def malformed(self) -> pd.DataFrame:
        return self.records[self.records.kind == "malformed"]

    def summary(self) -> dict[str, int]:
        counts = self.records.kind.value_counts().to_dict()
        counts["total"] = len(self.records)
        return counts


def _iso(ts: np.ndarray) -> list[str]:
    return pd.to_datetime(ts, unit="us", utc=True).strftime("%Y-%m-%dT%H:%M:%S.%fZ").tolist()


def generate(config: SimulationConfig) -> Simulation:
    rng = np.random.default_rng(config.seed)
    n = config.events
    start_us = int(config.resolved_start().timestamp() * 1_000_000)
    arrival = start_us + (np.arange(n) / config.rate * 1e6).astype(np.int64)
    event_time = arrival - (rng.uniform(0, config.jitter_s, n) * 1e6).astype(np.int64)
    draw = rng.random(n)
    cut = np.cumsum([config.late_share, config.too_late_share, config.duplicate_share, config.malformed_share])
    kind = np.select(
        [draw < cut[0], draw < cut[1], draw < cut[2], draw < cut[3]],
        ["late", "too_late", "duplicate", "malformed"],
        "ontime",
    )
    late = kind == "late"
    event_time[late] = arrival[late] - (rng.uniform(10, 25, late.sum()) * 1e6).astype(np.int64)
    too_late = kind == "too_late"
    event_time[too_late] = arrival[too_late] - (rng.uniform(60, 180, too_late.sum()) * 1e6).astype(np.int64)
    event_time = event_time // 1000 * 1000  # millisecond precision, as sensors send it
    device = rng.integers(0, config.devices, n)
    freq = np.round(rng.normal(50.0, 10.0, n), 6)
    anomalous = rng.random(n) < config.anomaly_share
    freq[anomalous] = -np.round(rng.uniform(0.1, 20.0, anomalous.sum()), 6)
    freq[(rng.random(n) < config.zero_share) & ~anomalous] = 0.0

    # duplicates: an exact copy of an earlier event, re-sent 0-5 s after it
    dup = np.flatnonzero(kind == "duplicate")
    source = np.maximum(dup - rng.integers(1, max(int(5 * config.rate), 2), dup.size), 0)
    source = np.where(kind[source] == "ontime", source, dup)  # copy only plain events
    kind[dup[source == dup]] = "ontime"
    device[dup], freq[dup], event_time[dup] = device[source], freq[source], event_time[source]

    device_ids = np.char.add("dev-", np.char.zfill(device.astype(str), 5))
    times = _iso(event_time)
    values = [
        f'{{"device_id": "{d}", "sensor_freq": {f!r}, "event_time": "{t}"}}'.encode()
        for d, f, t in zip(device_ids.tolist(), freq.tolist(), times, strict=False)
    ]
    for i, idx in enumerate(np.flatnonzero(kind == "malformed")):
        values[idx] = _malformed(MALFORMED_KINDS[i % len(MALFORMED_KINDS)], device_ids[idx], freq[idx], times[idx])
    valid = kind != "malformed"
    records = pd.DataFrame(
        {
            "key": [d.encode() for d in device_ids.tolist()],
            "value": values,
            "timestamp_ms": arrival // 1000,
            "kind": kind,
            "device_id": np.where(valid, device_ids, None),
            "sensor_freq": np.where(valid, freq, np.nan),
            "event_time": pd.to_datetime(np.where(valid, event_time, 0), unit="us", utc=True).where(valid),
        }
    )
    end = (
        datetime.fromtimestamp(int(arrival[-1]) / 1e6 + 1 / config.rate, timezone.utc) if n else config.resolved_start()
    )
    return Simulation(config, records, end)


def _malformed(kind: str, device: str, freq: float, time: str) -> bytes:
    if kind == "invalid JSON":
        return f'{{"device_id": "{device}", "sensor_freq": {freq!r}, "event_time": "{time}"'.encode()
    if kind == "missing field sensor_freq":
        return json.dumps({"device_id": device, "event_time": time}).encode()
    if kind == "sensor_freq has wrong type STRING":
        return json.dumps({"device_id": device, "sensor_freq": str(freq), "event_time": time}).encode()
    if kind == "unparseable event_time":
        return json.dumps({"device_id": device, "sensor_freq": freq, "event_time": "12/04/2023 10:15"}).encode()
    if kind == "device_id has wrong type BOOLEAN":
        return json.dumps({"device_id": True, "sensor_freq": freq, "event_time": time}).encode()
    if kind == "event_time in the future":
        return json.dumps({"device_id": device, "sensor_freq": freq, "event_time": "2999-01-01T00:00:00Z"}).encode()
    return b"\xff\xfe" + device.encode() + b"\x80"


def produce(
    simulation: Simulation, bootstrap: str, topic: str, progress: bool = False, extra_config: dict | None = None
) -> int:
    """Send every record to ``topic`` in arrival order (key = device id); returns the count."""
    return produce_records(simulation.records, bootstrap, topic, progress, extra_config)


def produce_records(
    records: pd.DataFrame, bootstrap: str, topic: str, progress: bool = False, extra_config: dict | None = None
) -> int:
    """Send ``records`` (columns key, value, timestamp_ms) to ``topic`` in order."""

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
            "logger": LIBRDKAFKA_LOG,  # retry notices quiet, errors shown
            **(extra_config or {}),
        }
    )
    failures: list = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    bar = _progress(len(records), progress, f"producing to {topic}")
    for i, (key, value, ts) in enumerate(
        zip(records.key.tolist(), records.value.tolist(), records.timestamp_ms.tolist(), strict=False)
    ):
        while True:
            try:
                producer.produce(topic, value=value, key=key, timestamp=ts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 9_999:
            producer.poll(0)
            bar.update(10_000)
    remaining = producer.flush(120)
    bar.update(len(records) % 10_000)
    bar.close()
    if failures or remaining:
        raise RuntimeError(f"{len(failures)} records failed and {remaining} were not delivered: {failures[:3]}")
    return len(records)


def acknowledgements(
    simulation: Simulation,
    rules: list[Rule] | None = None,
    share: float = 0.7,
    max_delay_s: float = 1_200.0,
    seed: int | None = None,
    snooze_share: float = 0.1,
    snooze_s: float = 900.0,
) -> pd.DataFrame:
    """Acks ({alert_id, device_id, rule_id, acked_by, ack_time}) for a share of the simulated alerts, as Kafka
    records; ``snooze_share`` of them snooze the alert for ``snooze_s`` instead (``action: snooze``, ``until``).

    The alerts are those ``rules`` (default: the packaged rule set, which seeds ``alert_rules``) fire, each rule
    without a site or sensor_type scope (those need the devices table).

    Each acked alert is acknowledged ``uniform(5 s, max_delay_s)`` after its event, so with the default
    ``ack_timeout`` of 10 minutes about half of the acks come too late and those alerts escalate.
    Records are in ack-time order, Kafka timestamp = ack time.
    """

    rng = np.random.default_rng(simulation.config.seed + 7 if seed is None else seed)
    valid = simulation.distinct_valid
    fired = [
        valid[rule.fires({"sensor_freq": valid.sensor_freq.to_numpy()}, valid.device_id.to_numpy())].assign(
            rule_id=rule.id
        )
        for rule in (load_rules() if rules is None else rules)
        if rule.kind == "threshold" and rule.enabled and (rule.scope is None or rule.scope.column == "device_id")
    ]
    anomalies = pd.concat(fired, ignore_index=True) if fired else valid.iloc[:0].assign(rule_id="")
    chosen = anomalies[rng.random(len(anomalies)) < share]
    event_us = chosen.event_time.dt.tz_convert(None).astype("int64").to_numpy() // 1000
    ack_us = event_us + (rng.uniform(5.0, max_delay_s, len(chosen)) * 1e6).astype(np.int64) // 1000 * 1000
    ids = [
        alert_id(d, t, r)
        for d, t, r in zip(chosen.device_id.tolist(), event_us.tolist(), chosen.rule_id.tolist(), strict=True)
    ]
    operators = rng.choice(["ops-anna", "ops-ben", "ops-chen"], len(chosen)).tolist()
    snoozes = rng.random(len(chosen)) < snooze_share
    until = _iso(ack_us + int(snooze_s * 1e6))
    values = [
        json.dumps(
            {"alert_id": i, "device_id": d, "rule_id": r, "acked_by": o, "ack_time": t}
            | ({"action": "snooze", "until": u} if snooze else {})
        ).encode()
        for i, d, r, o, t, snooze, u in zip(
            ids, chosen.device_id, chosen.rule_id, operators, _iso(ack_us), snoozes, until, strict=True
        )
    ]
    acks = pd.DataFrame(
        {
            "key": [i.encode() for i in ids],
            "value": values,
            "timestamp_ms": ack_us // 1000,
            "alert_id": ids,
            "ack_time": pd.to_datetime(ack_us, unit="us", utc=True),
        }
    )
    return acks.sort_values("timestamp_ms", kind="mergesort").reset_index(drop=True)


def _progress(total: int, enabled: bool, desc: str):

    return tqdm(total=total, desc=desc, unit="ev", disable=not enabled or total < 50_000, mininterval=1.0)


def devices_dimension(devices: int, seed: int) -> pd.DataFrame:
    """The small ``devices`` dimension (site, sensor type) for the stream-static enrichment."""
    rng = np.random.default_rng(seed + 1)
    ids = np.char.add("dev-", np.char.zfill(np.arange(devices).astype(str), 5))
    return pd.DataFrame(
        {
            "device_id": ids,
            "site": rng.choice(["plant-north", "plant-south", "warehouse", "lab"], devices),
            "sensor_type": rng.choice(["vibration", "acoustic", "rf"], devices),
        }
    )


def write_devices_table(settings, devices: int, seed: int):
    """Write (overwrite) the devices dimension Delta table; returns it (a :class:`~sensorcep.io.tables.Table`)."""
    spark = get_spark()
    lake = Tables(spark, settings)
    lake.write(spark.createDataFrame(devices_dimension(devices, seed)), "devices", mode="overwrite")
    return lake["devices"]
