"""The seeded fault test ("nemesis") over the always-on job, in the shape of Kafka's transaction tests and Spark's
StreamTest stress runs.

A fleet producer writes sequence-numbered events whose Kafka timestamps and event times a real fleet gets wrong
(gateways whose clocks lag or run an hour ahead, one partition that lags, events re-sent minutes later, late events,
device clocks an hour ahead, malformed records, anomalies). Between its chunks the nemesis does one seeded action to
the always-on job, which runs in a process of its own (``tests/support/nemesis_driver.py``), each triggered by the job's
progress, not by time:

* ``commit``:   kill -9 of Spark inside a Delta write: before or after the K-th append or MERGE of a table (bronze,
                quarantine, duplicates, samples, late events, device status, the anomalies MERGE, escalations);
* ``delivery``: kill -9 of Spark right after the notifier's K-th message reached its receiver (a real HTTP server on
                loopback, in this process), before the pass that sent it recorded it: the replay sends it again, with
                the same notification id;
* ``sink``:     kill -9 of Spark while the real-time alert query writes to the alerts topic;
* ``moment``:   kill -9 of Spark at a seeded moment after its first write;
* ``broker``:   kill -9 of the Kafka broker while the producer produces and the job runs; the broker restarts from
                its logs (a job run that fails on it is restarted, as Databricks restarts a continuous job);
* ``stop_alerts``: a stop and restart of the real-time alert query;
* ``second_writer``: a second run of the job while the first runs: it must fail at once, naming the first;
* ``reset``:    an operator's reset of a downstream query's checkpoint (deleted while the job is down): the next run
                must refuse to start it, naming what it would write again; the statements it names are run (as the
                operator would, to rebuild from bronze), and the next run rebuilds the query's tables;
* ``task``:     kill -9 of one task alone (the real-time ``alerts`` task, which has a cluster of its own on Databricks)
                while another process runs the job's other tasks: they must go on writing, and the task, started again,
                goes on where its checkpoint left off (``make nightly``'s chain).

Then the run alive at the end (else a fresh one) drains everything with no fault, and :func:`judge` checks exact
equality against what the producer got acknowledged and against the oracle. ``tests/fault/test_nemesis.py`` runs it
in the suite; for release checks::

    make nemesis SEED=7 KILLS=60          # or: .venv/bin/python tests/support/nemesis.py --seed 7 --kills 60
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the support package
from sensorcep.local import broker  # noqa: E402
from sensorcep.pipeline import alerts  # noqa: E402
from sensorcep.pipeline.streaming import checkpoint_id  # noqa: E402
from sensorcep.settings import Settings, parse_duration  # noqa: E402
from support import delta_batches  # noqa: E402
from support.nemesis_driver import DRAIN_FLAG, IN_TABLE, IN_WRITE, RESTART_FAILED  # noqa: E402
from support.oracle import (  # noqa: E402
    device_status_changes,
    ew_baseline,
    reference_samples,
    stateful_rule_alerts,
)
from support.receiver import LoopbackReceiver  # noqa: E402
from support.streams import delta_frame, oracle_rows, sample_tuples, topic_end_offsets, topic_records  # noqa: E402

DRIVER = Path(__file__).with_name("nemesis_driver.py")
START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
DEVICES = [f"gw{g}-dev{d:02d}" for g in range(4) for d in range(5)]
#: the Kafka timestamp of a gateway's records, relative to the event time: gateway 1 lags 2 minutes, gateway 2 runs an
#: hour ahead (its records carry a Kafka timestamp an hour after their event time); partition 1 lags 90 s more
GATEWAY_CLOCK = {0: timedelta(0), 1: -timedelta(minutes=2), 2: timedelta(hours=1), 3: timedelta(seconds=5)}
PARTITION_LAG = {0: timedelta(0), 1: -timedelta(seconds=90)}
#: the kill points inside the job's process, by kind: (query, table) for the Delta writes (the queries' appends and
#: MERGEs), the query for its checkpoint's offset log, commit log and state store, the table for its Delta checkpoint
WRITES = [
    ("ingest", "bronze_events"),
    ("ingest", "quarantine_events"),
    ("ingest", "duplicate_events"),
    ("sampling", "sensor_samples"),
    ("sampling", "late_events"),
    ("device_activity", "device_status"),
    ("device_activity", "late_events"),
    ("anomalies", "anomalies"),
    ("alert_lifecycle", "alert_events"),
    ("alert_lifecycle", "alert_escalations"),
    ("stateful_rules", "device_baselines"),  # the fleet runs stateful rules (Nemesis.stateful)
]
CHECKPOINTED = ["ingest", "sampling", "device_activity", "stateful_rules", "anomalies", "alert_lifecycle"]
STATEFUL = ["sampling", "device_activity", "stateful_rules", "alert_lifecycle"]
POINT_KINDS = ("before", "after", "offset_log", "commit_log", "state_commit", "delta_checkpoint", *IN_WRITE, "delivery")
#: what the suite's run visits besides the Delta write of every table before and after its commit
#: (:func:`suite_points`): inside the write of an offset and a commit log entry, of a Delta commit file and of a
#: Delta checkpoint, as a state store version lands, and as the notifier's message has reached its receiver, each on a
#: seeded target at its first non-empty commit of the run (a run costs 10-20 s on 2 cores). The points as a file
#: lands (``offset_log``, ``commit_log``, ``delta_checkpoint``) and K up to 12 are the nightly chain's
SUITE = {
    "state_commit": ["alert_lifecycle"],
    "in_delta_commit": ["bronze_events", "sensor_samples"],
    "in_delta_checkpoint": ["bronze_events"],
    "in_offset_log": ["ingest"],
    "in_commit_log": ["ingest", "sampling"],
    "delivery": ["notifier"],
}
#: the stateful rules the fleet runs under faults (the suite's run and the nightly chain), one of each kind that keeps
#: per-device state in event time, tuned to the fleet (20 devices, about two events a minute each, sensor_freq 0-100,
#: 7% negative)
STATEFUL_RULES = [
    {"id": "surge", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 2.0},
    {"id": "repeat_negative", "kind": "count", "field": "sensor_freq", "op": "<", "value": 0.0, "at_least": 2,
     "within": "5 minutes"},
    {"id": "quiet", "kind": "absence", "within": "2 minutes"},
    {"id": "high_then_low", "kind": "sequence", "first": {"field": "sensor_freq", "op": ">", "value": 95.0},
     "then": {"field": "sensor_freq", "op": "<", "value": 5.0}, "within": "2 minutes"},
    {"id": "odd", "kind": "baseline", "field": "sensor_freq", "k": 2.0, "span": 10, "min_events": 5},
]  # fmt: skip
KILLS = ("point", "sink", "moment", "broker", "task")
#: who the fleet's incidents reach: one webhook on loopback, a group per device (a message per device's incidents),
#: told at the pass that reads them (the fleet's event times are past every ``group_wait``) and, when an incident
#: joins a group already told, at the next pass (``group_interval`` under the 2-s trigger); no repeats in a run
ROUTES = """
receivers:
  - name: oncall
    webhook: {{url: "{url}/oncall", hmac_secret: hook-hmac}}
route:
  receiver: oncall
  group_by: [device_id]
  group_wait: 1 second
  group_interval: 1 second
  repeat_interval: 24 hours
"""
#: the routes' secret scope; locally a secret is the environment variable ``<SCOPE>_<NAME>`` (the driver's)
ROUTES_SCOPE, ROUTES_SECRET_ENV = "nemesis", {"NEMESIS_HOOK_HMAC": "nemesis-hmac-key"}
#: the downstream query a ``reset`` action resets: it appends from bronze's start and keeps late events of its own
RESET = "sampling"
#: the task a ``task`` action kills alone: the one Databricks runs on a cluster of its own
ALONE = "alerts"
#: the tasks a query's new input comes from, besides its own: sampling_state reads bronze (ingest writes it),
#: alert_records the alerts topic (the alerts task writes it)
UPSTREAM = {"ingest": (), "sampling_state": ("ingest",), "alerts": (), "alert_records": ("alerts",)}
#: the queries whose output a query reads (a point's run starts them with it): the bronze readers read what ingest
#: writes, the alert readers what the alert query sends, the notifier the lifecycle's ``alert_events``
FEEDERS = {
    "sampling": ("ingest",),
    "device_activity": ("ingest",),
    "stateful_rules": ("ingest",),
    "anomalies": ("alerts",),
    "alert_lifecycle": ("alerts",),
    "notifier": ("alerts", "alert_lifecycle"),
}
#: how long a run may take to reach its kill point (or what another action waits for); a point not reached fails the
#: test. Alone on 2 cores a point's run reaches it in 7-18 s (its queries only); ``make extended`` runs the fault test
#: beside the suite's other worker, which can double that
POINT_WAIT_S = 480
#: runs not killed at a point that may end by themselves (exit 1) in one fault run before it fails: one, as a
#: point's run that fails by itself is started again once (seen in 2026-11's CI runs: the job left while its
#: real-time alert query was started again, ``stop_alerts``; each run's transcript is kept, :attr:`Driver.transcript`)
RUN_FAILURES_ALLOWED = 1


@dataclass(frozen=True)
class Action:
    kind: str
    arg: str = ""

    def __str__(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


def _point(kind: str, target, k: int) -> str:
    return f"{kind}:{':'.join(target)}:{k}" if isinstance(target, tuple) else f"{kind}:{target}:{k}"


def killed_query(point: str) -> str:
    """The query a point kills in a write of its own: the query it names, or the one that writes the table it names
    (a table several queries write, ``late_events``: its first writer, as :data:`WRITES` lists them)."""
    kind, name = point.split(":")[:2]
    by_table = kind == "delta_checkpoint" or kind in IN_TABLE
    return next(q for q, table in WRITES if table == name) if by_table else name


def queries_for(point: str) -> list[str]:
    """The queries a run needs to reach ``point``: the query it kills (:func:`killed_query`) and the queries that feed
    it (:data:`FEEDERS`), in pipeline order."""
    from sensorcep.pipeline import registry

    query = killed_query(point)
    needed = {query, *FEEDERS.get(query, ())}
    return [q for q in registry.registry() if q in needed]


def _renamed_before_the_kill(point: str, lines: list[str]) -> str:
    """For a point inside a file's write (:data:`IN_WRITE`): why the kill did not land inside it (the temporary file
    the run named was gone, renamed into place, when the run was dead), or "" when it left the write half done."""
    if point.split(":")[0] not in IN_WRITE:
        return ""
    temporary = Path(next(line.split(" ", 1)[1] for line in lines if line.startswith("inside ")))
    final = temporary.with_name(temporary.name[1:].rsplit(".", 2)[0])  # .<name>.<uuid>.tmp -> <name>
    if temporary.exists() and not final.exists():
        return ""
    return f"the kill came after {temporary.name} was renamed to {final.name}"


def suite_points(rng: random.Random, every_table: bool = False) -> list[str]:
    """The kill points of the suite's run, each at K = 1. ``make nightly`` (``every_table``): every table's append or
    MERGE, before and after its commit (a table several queries write, ``late_events``: by one of them, seeded), and
    :data:`SUITE`. ``make extended``: every kind once (:func:`_every_kind_once`)."""
    if not every_table:
        return _every_kind_once(rng)
    writers: dict[str, list[str]] = {}
    for query, table in WRITES:
        writers.setdefault(table, []).append(query)
    sides = ("before", "after")
    writes = [_point(kind, (rng.choice(queries), table), 1) for kind in sides for table, queries in writers.items()]
    return writes + [_point(kind, rng.choice(targets), 1) for kind, targets in SUITE.items()]


#: the table of each writing query that every run of it commits to: its first in :data:`WRITES`
OWN_TABLE = {query: table for query, table in reversed(WRITES)}
#: the kinds of ``make extended``'s run a seeded query takes (the others' targets are fixed: :func:`_every_kind_once`)
SEEDED_KINDS = ("before", "state_commit", "in_delta_commit", "in_offset_log", "in_commit_log")


def _every_kind_once(rng: random.Random) -> list[str]:
    """``make extended``'s points: each kind once, before and after a commit and :data:`SUITE`'s, and each writing query
    killed at a point of its own (its Delta write, its checkpoint's log or its state store): 8 runs (decision 0059).

    ``sampling`` after its ``sensor_samples`` commit (the reset follows it: :func:`suite_plan`), ``ingest`` inside a
    bronze Delta checkpoint (the table that commits often enough to write one in a run), the notifier as it delivers;
    the other four writing queries take four of :data:`SEEDED_KINDS`, seeded (a state store only a stateful query's, a
    Delta commit file only a table every run of its writer commits to), and the fifth kind its :data:`SUITE` target
    (``before``: one of ingest's tables)."""
    points = [
        _point("after", (RESET, OWN_TABLE[RESET]), 1),
        _point("in_delta_checkpoint", OWN_TABLE["ingest"], 1),
        _point("delivery", "notifier", 1),
    ]
    others = [query for query in CHECKPOINTED if query not in (RESET, "ingest")]
    frequent = {query for query in others if OWN_TABLE[query] not in ("device_status", "device_baselines")}
    while True:
        order = rng.sample(SEEDED_KINDS, len(SEEDED_KINDS))  # the last one keeps its SUITE target
        kinds = dict(zip(order[: len(others)], others, strict=True))
        if kinds.get("state_commit") in {*STATEFUL, None} and kinds.get("in_delta_commit") in {*frequent, None}:
            break
    for kind in SEEDED_KINDS:
        query = kinds.get(kind)
        if kind == "before":
            query = query or "ingest"
            points.append(_point(kind, (query, rng.choice([t for q, t in WRITES if q == query])), 1))
        elif kind == "in_delta_commit":
            points.append(_point(kind, OWN_TABLE[query] if query else rng.choice(SUITE[kind]), 1))
        else:
            points.append(_point(kind, query or rng.choice(SUITE[kind]), 1))
    return points


def suite_plan(seed: int, every_table: bool = False) -> list[Action]:
    """The suite's run: every point of :func:`suite_points` once, the Kafka sink and the broker killed once, one reset
    of a downstream checkpoint, one stop of the real-time query and one second writer, in a seeded order."""
    rng = random.Random(seed)
    actions = [Action("point", point) for point in suite_points(rng, every_table)]
    rng.shuffle(actions)
    # right after the query's first commit of its output: its tables hold rows, which the refusal must name
    wrote = next(i for i, a in enumerate(actions) if a.arg == _point("after", (RESET, "sensor_samples"), 1))
    actions.insert(wrote + 1, Action("reset", RESET))
    # the sink kill ends a run; the next holds the actions that do not end it, and then drains
    return actions + [Action("sink"), Action("stop_alerts", "1"), Action("second_writer"), Action("broker")]


def plan(seed: int, kills: int) -> list[Action]:
    """The nightly chain: ``kills`` kill actions (each kind at least once, kill points the most, drawn from every
    point with K up to 12) and one stop of the real-time query and one second writer, in a seeded order."""
    rng = random.Random(seed)
    kinds = list(KILLS) + rng.choices(KILLS, weights=[6, 1, 1, 2, 1], k=max(0, kills - len(KILLS)))
    actions = []
    for kind in kinds[:kills]:
        if kind == "point":
            where = rng.choice(POINT_KINDS)
            targets = {"before": WRITES, "after": WRITES, "state_commit": STATEFUL, "delivery": ["notifier"]}.get(
                where, CHECKPOINTED
            )
            if where == "delta_checkpoint" or where in IN_TABLE:  # tables that commit often enough to reach K
                targets = sorted({t for _, t in WRITES} - {"alert_escalations", "device_status", "device_baselines"})
            once = where in ("delta_checkpoint", "in_delta_checkpoint")  # the next checkpoint: a run makes one or two
            actions.append(Action(kind, _point(where, rng.choice(targets), 1 if once else rng.randint(1, 12))))
        elif kind == "moment":
            actions.append(Action(kind, f"{rng.uniform(0.0, 4.0):.1f}"))
        elif kind == "task":
            actions.append(Action(kind, ALONE))
        else:
            actions.append(Action(kind))
    rng.shuffle(actions)
    for extra in (Action("stop_alerts", "1"), Action("second_writer"), Action("reset", RESET)):
        actions.insert(rng.randrange(1, len(actions) + 1), extra)
    return actions


# ---------------------------------------------------------------------------------------------------- the fleet
@dataclass
class Record:
    seq: int
    kind: str  # ok | anomaly | late | ahead (event time an hour ahead of its clock) | resent | malformed
    partition: int
    key: bytes
    value: bytes
    timestamp_ms: int
    device_id: str = ""
    sensor_freq: float = 0.0
    event_time: datetime | None = None


@dataclass
class Fleet:
    """Chunks of sequence-numbered records, one minute of event time each, with a real fleet's faults."""

    seed: int
    per_chunk: int = 40
    seq: int = 0
    chunks: int = 0
    sent: list[Record] = field(default_factory=list)
    used: set = field(default_factory=set)  # (device, event time): a new event never collides with an earlier one
    #: the acks the next chunk sends (value, Kafka timestamp), drawn with the chunk (:meth:`_acks`)
    acks: list[tuple[bytes, int]] = field(default_factory=list)
    _anomalies: list[Record] = field(default_factory=list)  # the previous chunk's, acked in the next one

    def chunk(self) -> list[Record]:
        """The next minute of event time."""
        rng = random.Random(self.seed * 1_000 + self.chunks)
        base = START + timedelta(minutes=self.chunks)
        self.chunks += 1
        records = []
        for _ in range(self.per_chunk):
            self.seq += 1
            roll = rng.random()
            if roll < 0.04 and len(self.sent) > 4 * self.per_chunk:  # re-sent minutes (chunks) after the first copy
                first = rng.choice(self.sent[: max(1, len(self.sent) - 2 * self.per_chunk)])
                records.append(self._record("resent", first.device_id, first.sensor_freq, first.event_time, rng, base))
                continue
            device = rng.choice(DEVICES)
            event_time = base + timedelta(milliseconds=rng.randrange(60_000))
            if roll >= 0.07 and roll < 0.11:
                event_time = base - timedelta(milliseconds=rng.randrange(90_000, 400_000))
            while (device, event_time) in self.used:
                event_time += timedelta(milliseconds=1)
            self.used.add((device, event_time))
            freq = round(rng.uniform(0.0, 100.0), 3) if rng.random() > 0.03 else 0.0
            kind = "ok"
            if roll < 0.07:
                kind, freq = "anomaly", -round(rng.uniform(0.1, 50.0), 3)
            elif roll < 0.11:
                kind = "late"
            elif roll < 0.12:
                kind = "ahead"  # the device's clock: local time labelled Z, an hour ahead of the Kafka timestamp
            elif roll < 0.14:
                kind = "malformed"
            records.append(self._record(kind, device, freq, event_time, rng, base))
        self.sent += [r for r in records if r.kind in ("ok", "anomaly", "late")]
        anomalies = [r for r in records if r.kind == "anomaly"]
        self.acks += self._acks(self._anomalies, anomalies, base)
        self._anomalies = anomalies
        return records

    def _acks(self, earlier: list[Record], now: list[Record], base: datetime) -> list[tuple[bytes, int]]:
        """Acks as on-call people send them (drawn apart from the events, so a seed's events stay as they were): for
        some of the previous chunk's anomalies an ack (5 s to 3 minutes after the alert: before and after its
        ``ack_timeout``) or a snooze (until 1 to 4 minutes later); an ack of an alert that never comes; an ack a few
        seconds before its alert. Each is stamped at its ``ack_time`` (the person's clock)."""
        rng = random.Random(self.seed * 1_000 + self.chunks + 500_000)
        acks = []

        def ack(device: str, alert_id: str, at: datetime, action: str = "ack", until: datetime | None = None) -> None:
            body = {"alert_id": alert_id, "device_id": device, "rule_id": PACKAGED_RULE, "ack_time": _iso(at),
                    "acked_by": f"oncall-{rng.randrange(3)}", "action": action,
                    "until": until and _iso(until)}  # fmt: skip
            acks.append((json.dumps(body).encode(), int(at.timestamp() * 1000)))

        for record in earlier:
            roll, at = rng.random(), record.event_time + timedelta(seconds=rng.uniform(5, 180))
            if roll < 0.3:
                ack(record.device_id, _alert_id(record), at)
            elif roll < 0.4:
                ack(record.device_id, _alert_id(record), at, "snooze", at + timedelta(seconds=rng.uniform(60, 240)))
        if rng.random() < 0.5:  # an ack of an alert that never comes: ignored (no open incident) or it closes one
            ack(rng.choice(DEVICES), f"no-such-alert-{self.chunks}", base + timedelta(seconds=rng.uniform(0, 60)))
        if now and rng.random() < 0.5:  # an ack that comes before its alert, in event time
            record = rng.choice(now)
            ack(record.device_id, _alert_id(record), record.event_time - timedelta(seconds=rng.uniform(1, 20)))
        return acks

    def _record(
        self, kind: str, device: str, freq: float, event_time: datetime, rng: random.Random, now: datetime
    ) -> Record:
        """A record as its gateway sends it ``now``: its Kafka timestamp is the gateway's clock (a re-sent copy's is
        the time it is sent again); an ``ahead`` device labels its local time Z: an hour ahead of that clock."""
        gateway, number = int(device[2]), int(device[-2:])
        partition = number % 2
        sent_at = now if kind == "resent" else event_time
        clock = sent_at + GATEWAY_CLOCK[gateway] + PARTITION_LAG[partition]
        shown = clock + timedelta(hours=1) if kind == "ahead" else event_time
        body = {"seq": self.seq, "device_id": device, "sensor_freq": freq, "event_time": _iso(shown)}
        value = json.dumps(body).encode()
        if kind == "malformed":
            value = rng.choice([value[: len(value) // 2], b"\xff\xfe" + value, json.dumps({"seq": self.seq}).encode()])
        return Record(
            self.seq, kind, partition, device.encode(), value, int(clock.timestamp() * 1000), device, freq, event_time
        )


#: the packaged rule (``sensor_freq < 0``): the fleet's anomalies fire it, and its acks name it
PACKAGED_RULE = "negative_frequency"


def _alert_id(record: Record) -> str:
    return alerts.alert_id(record.device_id, _us(record.event_time), PACKAGED_RULE)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FleetProducer(threading.Thread):
    """The fleet, producing a chunk every ``every_s`` seconds with an idempotent producer that retries for 3 minutes
    (through broker kills); ``acknowledged[(partition, offset)]`` = the record, for every record Kafka acknowledged."""

    def __init__(self, fleet: Fleet, bootstrap: str, topic: str, acks_topic: str, every_s: float = 2.0):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.fleet, self.topic, self.acks_topic, self.every_s = fleet, topic, acks_topic, every_s
        self.acknowledged: dict[tuple[int, int], Record] = {}
        self.stopping = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "delivery.timeout.ms": 180_000,
                "log_level": 0,
            }
        )

    def run(self) -> None:
        while not self.stopping.is_set():
            for record in self.fleet.chunk():
                self.producer.produce(
                    self.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    timestamp=record.timestamp_ms,
                    on_delivery=self._delivered(record),
                )
            for value, timestamp_ms in self.fleet.acks:
                self.producer.produce(self.acks_topic, value=value, timestamp=timestamp_ms)
            self.fleet.acks = []
            self.producer.poll(0)
            self.stopping.wait(self.every_s)  # the fleet's pace
            self.producer.poll(0)

    def _delivered(self, record: Record):
        def on_delivery(err, msg):
            if err is None:
                self.acknowledged[(msg.partition(), msg.offset())] = record

        return on_delivery

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
        assert self.producer.flush(200) == 0, "the producer could not deliver every record within 200 s"


# ---------------------------------------------------------------------------------------------------- the job
class Driver:
    """One run of the always-on job in its own process group; its stdout lines are read as they come."""

    def __init__(
        self,
        params: dict,
        point: str | None,
        log: Callable[[str], None],
        only: list[str] | None = None,
        queries: list[str] | None = None,
    ):
        given = {
            **params,
            **({"only": ",".join(only)} if only else {}),
            **({"queries": ",".join(queries)} if queries else {}),
        }
        args = [sys.executable, str(DRIVER), json.dumps(given)] + ([point] if point else [])
        self.point, self.log, self.lines, self.writes, self.params = point, log, [], 0, params
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **ROUTES_SECRET_ENV},
        )
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))
            if into is self.lines and line.startswith("write "):
                self.writes += 1

    @property
    def transcript(self) -> Path:
        """Where :meth:`end` keeps all the run printed (beside the run's ``base_path``): the errors a failure message
        quotes are only its lines that name an error."""
        return Path(self.params["base_path"]).parent / "runs" / f"{self.proc.pid}-{self.point or 'run'}.log"

    def wait_for(self, condition: Callable[[], bool], timeout_s: float, what: str) -> bool:
        """Until ``condition()`` or the process ends; raises after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                # what the job was doing is kept in its transcript: the Spark JVM's threads, then the run ends
                self.stderr += ["--- the Spark JVM's threads when the wait ended ---", *self.jvm_threads()]
                self.kill()
                last = "\n".join(self.lines[-15:]) or "(nothing)"
                raise AssertionError(
                    f"nemesis: {what} did not happen within {timeout_s:.0f} s ({self.point}); the run's last lines:\n"
                    f"{last}\n{self.errors()}"
                )
            time.sleep(0.05)  # polling the job's progress
        return True

    def jvm_threads(self) -> list[str]:
        """The thread dump of each Java process in the run's process tree (``jcmd Thread.print``), as lines."""
        found: list[str] = []
        jcmd = shutil.which("jcmd")
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        for child in children:
            try:
                if child.name() != "java" or jcmd is None:
                    continue
                asked = [jcmd, str(child.pid), "Thread.print"]
                found += subprocess.run(asked, capture_output=True, text=True, timeout=60).stdout.splitlines()
            except (psutil.NoSuchProcess, subprocess.TimeoutExpired):
                continue
        return found

    def kill(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.end(60)

    def end(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        for reader in self._readers:
            reader.join(10)
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        self.transcript.write_text("\n".join([*self.lines, "--- stderr ---", *self.stderr, f"--- exit {code}"]))
        return code

    def refusal(self) -> tuple[int | None, str]:
        """For a run that must be refused as it starts: its exit code (None: still running after
        :data:`POINT_WAIT_S`, then killed, so it does not run beside the next action's run) and all it printed."""
        try:
            code = self.end(POINT_WAIT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if self.proc.poll() is None:
                self.kill()
        return code, "\n".join(self.stderr + self.lines)

    def committed(self) -> str:
        """The last ``committed <query> <table> <k>`` count of every query and table this run wrote."""
        last = {}
        for line in self.lines:
            if line.startswith("committed "):
                _, query, table, k = line.split()
                last[f"{query}/{table}"] = k
        return ", ".join(f"{key} {k}" for key, k in sorted(last.items())) or "nothing committed"

    def errors(self) -> str:
        """The run's error lines: the first ones (the cause) and the last ones (how it ended)."""
        text = "\n".join(line for line in self.stderr if "Error" in line or "Exception" in line or line.startswith("✘"))
        text = text if len(text) <= 6000 else f"{text[:3000]}\n...\n{text[-3000:]}"
        return f"{text}\n(all it printed: {self.transcript})"


@dataclass
class Nemesis:
    """Runs ``actions`` (:func:`suite_plan` or :func:`plan`) against the always-on job; ``reached`` and ``missed``
    list the kill points that were and were not reached."""

    seed: int
    actions: list[Action]
    workdir: Path
    bootstrap: str
    log: Callable[[str], None] = print
    #: records per minute of event time (a chunk, produced every 2 s): the suite's run needs every path exercised, not
    #: volume (each record is work for every run and for the drain); the nightly chain keeps the full 40
    per_chunk: int = 40
    #: a point's run starts every task of the job (the nightly chain), or only the queries that reach the point
    #: (:func:`queries_for`; the suite: a fresh JVM starting every query costs about 70 core-s on 2 cores, a point's
    #: query and its feeders 12-22; decisions 0025 and 0038); so does the sink kill's (the alert query alone: the
    #: query whose Kafka sink it kills); every other action's run starts the whole job
    whole_job: bool = True
    #: the fleet also runs :data:`STATEFUL_RULES` (the suite's run and the nightly chain), so the stateful rules query
    #: runs under faults and the verdict judges its alerts and ``device_baselines``; off: the packaged rule only
    stateful: bool = True
    #: after the last action the run alive (or a fresh one) drains everything and exits, which the verdict needs; off:
    #: that run is killed instead (``benchmarks/fault_points.py`` times the actions only)
    drain: bool = True
    outcomes: list[tuple[str, str]] = field(default_factory=list)
    reached: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    #: the id of the message each delivery kill came right after: its replay must send it again
    resent_after_kill: list[str] = field(default_factory=list)
    #: the runs not killed at a point that ended by themselves (:meth:`_failed_by_itself`)
    run_failures: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.settings = Settings(
            kafka_bootstrap_servers=self.bootstrap,
            base_path=str(self.workdir / "data"),
            schema=f"nemesis_{self.seed}",
            events_topic=f"nemesis-events-{self.seed}",
            alerts_topic=f"nemesis-alerts-{self.seed}",
            acks_topic=f"nemesis-acks-{self.seed}",
            trigger="2 seconds",
            alerts_trigger="realtime:5 seconds",
            ack_timeout="2 minutes",
            device_timeout="3 minutes",
            max_offsets_per_trigger=2_000,
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.receiver = LoopbackReceiver()  # listening now (its port is in the routes); serving from :meth:`run`
        routes_file = self.workdir / "routes.yaml"
        routes_file.write_text(ROUTES.format(url=self.receiver.url))
        self.settings = self.settings.replace(routes_file=str(routes_file), routes_secret_scope=ROUTES_SCOPE)
        if self.stateful:
            rules_file = self.workdir / "rules.yaml"
            rules_file.write_text(yaml.safe_dump({"rules": [*packaged_rules(), *STATEFUL_RULES]}))
            self.settings = self.settings.replace(rules_file=str(rules_file))
        self.params = {
            name: str(getattr(self.settings, name))
            for name in (
                "kafka_bootstrap_servers",
                "base_path",
                "schema",
                "events_topic",
                "alerts_topic",
                "acks_topic",
                "trigger",
                "records_trigger",  # empty: every query at trigger, as the drain's timing assumes
                "alerts_trigger",
                "ack_timeout",
                "device_timeout",
                "max_offsets_per_trigger",
                "rules_file",
                "routes_file",
                "routes_secret_scope",
            )
        }
        self.fleet = Fleet(self.seed, per_chunk=self.per_chunk)
        self.driver: Driver | None = None
        self.broker_killed = False
        self.broker_dir = self.workdir / "broker"

    # ---------------------------------------------------------------------------------------- actions
    def run(self) -> list[tuple[str, str]]:
        broker.up(self.bootstrap, self.broker_dir)
        broker.create_topics(self.bootstrap, [self.settings.events_topic, self.settings.alerts_topic], partitions=2)
        broker.create_topics(self.bootstrap, [self.settings.acks_topic], partitions=1)
        self.producer = FleetProducer(self.fleet, self.bootstrap, self.settings.events_topic, self.settings.acks_topic)
        self.producer.start()
        self.receiver.__enter__()
        started = time.monotonic()
        for index, action in enumerate(self.actions):
            outcome = getattr(self, f"_{action.kind}")(action)
            self.outcomes.append((str(action), outcome))
            self.log(f"{index + 1:>3} {time.monotonic() - started:6.0f} s  {str(action):40} {outcome}")
        self.producer.stop()
        self.acknowledged = self.producer.acknowledged
        if not self.drain:
            if self.driver is not None:
                self.driver.kill()
                self.driver = None
            self.receiver.__exit__(None, None, None)
            return self.outcomes
        (Path(self.settings.base_path).parent / DRAIN_FLAG).touch()  # every run from now on drains and exits 0
        if self.driver is not None and self.driver.proc.poll() is not None:  # the last run failed on the broker
            self.outcomes.append(("final stop", f"exit {self.driver.end(10)}"))
            self.driver = None
        draining = "the last run" if self.driver is not None else "a fresh run"
        if self.driver is None:
            self.driver = Driver(self.params, "drain", self.log)
        code = self.driver.end(900)
        assert code == 0, f"the final run failed (exit {code}):\n{self.driver.errors()}"
        self.outcomes.append(("drain", f"{draining} drained everything and stopped: exit 0"))
        self.receiver.__exit__(None, None, None)  # every run has ended: nothing sends any more
        self.log(f"    {time.monotonic() - started:6.0f} s  {draining} drained: exit 0")
        return self.outcomes

    def _running(
        self, point: str | None = None, only: list[str] | None = None, queries: list[str] | None = None
    ) -> Driver:
        """The job running (``point`` armed: a fresh run, of the ``only`` tasks or the ``queries`` if given); a run
        that is not wanted any more is killed first."""
        if self.driver is not None and (point is not None or self.driver.proc.poll() is not None):
            self._end_run()
        if self.driver is None:
            self.driver = Driver(self.params, point, self.log, only, queries)
        return self.driver

    def _end_run(self) -> None:
        ended = self.driver.proc.poll() is not None  # by itself, before this kill
        code = self.driver.kill()
        if ended and code == 1 and not self.broker_killed:
            self._failed_by_itself()
        else:  # a run may fail on the broker's outage after the broker action returned: the job would start again
            self._expect_exit(code, allowed=(-signal.SIGKILL, 1) if self.broker_killed else (-signal.SIGKILL,))
        self.driver, self.broker_killed = None, False

    def _failed_by_itself(self) -> None:
        """A run not killed at a point ended by itself (exit 1) before the nemesis ended it: Databricks would start the
        always-on job's task again (``ON_FAILURE``), and so does the next action. The verdict still judges every
        table; more than :data:`RUN_FAILURES_ALLOWED` such runs fail the test, naming each."""
        said = [line for line in self.driver.stderr if "Error" in line or "Exception" in line]
        last = (said or ["no error line"])[-1][:160]
        self.run_failures.append(f"{self.driver.point or 'a run'}: exit 1, {last} ({self.driver.transcript})")
        self.log(f"    the run of {self.driver.point or 'the job'} failed by itself: {self.run_failures[-1]}")
        assert len(self.run_failures) <= RUN_FAILURES_ALLOWED, "runs failed by themselves:\n" + "\n".join(
            self.run_failures
        )

    def _expect_exit(self, code: int, allowed: tuple[int, ...]) -> None:
        assert code in allowed, f"the job exited {code} ({self.driver.point}):\n{self.driver.errors()}"

    def _point(self, action: Action, attempt: int = 1) -> str:
        """A fresh run with the point armed; it must die there within :data:`POINT_WAIT_S` (else: ``missed``). A run
        that fails by itself first is started again once, as the always-on job's task retry (``ON_FAILURE``) does (a
        query whose Python worker started late is restarted inside the run: ``always_on.WORKER_START_RETRIES``)."""
        driver = self._running(action.arg, queries=None if self.whole_job else queries_for(action.arg))
        try:
            code = driver.end(POINT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._end_run()
            self.missed.append(action.arg)
            return f"NOT REACHED in {POINT_WAIT_S} s ({driver.writes} writes; {driver.committed()})"
        if code == 1 and attempt == 1:
            self.driver = None
            failed = (driver.errors().splitlines() or ["?"])[-1][:120]
            return f"the run failed by itself ({failed}); retried: " + self._point(action, attempt=attempt + 1)
        self._expect_exit(code, allowed=(-signal.SIGKILL,))
        assert f"reached {action.arg}" in driver.lines, f"the run died before {action.arg}:\n{driver.errors()}"
        self.driver = None
        late = _renamed_before_the_kill(action.arg, driver.lines)
        if late and attempt == 1:
            return f"{late}; again: " + self._point(action, attempt=attempt + 1)
        if late:
            self.missed.append(action.arg)
            return f"NOT REACHED: {late}"
        self.reached.append(action.arg)
        if action.arg.startswith("delivery:"):  # the driver printed each delivered message's id, the last one killed it
            self.resent_after_kill.append(
                next(x.split()[1] for x in reversed(driver.lines) if x.startswith("delivered "))
            )
        took = f"{driver.writes} writes, {time.monotonic() - driver.started:.0f} s into the run"
        return f"killed at the point ({took}{'' if self.whole_job else ', ' + '+'.join(queries_for(action.arg))})"

    def _moment(self, action: Action) -> str:
        driver = self._running()
        first = driver.writes
        driver.wait_for(lambda: driver.writes > first, POINT_WAIT_S, "a Delta write")
        time.sleep(float(action.arg))  # the seeded moment after progress
        self._end_run()
        return f"killed {action.arg} s after a write"

    def _sink(self, _action: Action) -> str:
        driver = self._running(only=None if self.whole_job else [ALONE])
        topic = self.settings.alerts_topic
        before = sum(topic_end_offsets(self.bootstrap, topic).values())

        def written() -> bool:
            return sum(topic_end_offsets(self.bootstrap, topic).values()) > before

        driver.wait_for(written, POINT_WAIT_S, "an alert")
        self._end_run()
        return "killed while alerts were written"

    def _broker(self, _action: Action) -> str:
        driver = self._running()
        first = driver.writes
        driver.wait_for(lambda: driver.writes > first, POINT_WAIT_S, "a Delta write")
        broker.kill(self.broker_dir)  # kill -9 while the fleet produces and the job reads and writes
        self.broker_killed = True
        broker.up(self.bootstrap, self.broker_dir)  # recovers its logs from disk
        acked = len(self.producer.acknowledged)
        deadline = time.monotonic() + POINT_WAIT_S
        while len(self.producer.acknowledged) <= acked:  # the producer got through again
            assert time.monotonic() < deadline, "the producer did not get through after the broker came back"
            time.sleep(0.1)  # polling the producer's acknowledgements
        if driver.proc.poll() is not None:  # the job run failed on the outage: Databricks would start a new one
            self._expect_exit(driver.end(10), allowed=(1,))
            self.driver, self.broker_killed = None, False
            return f"broker killed and back; the job run failed on it ({driver.errors().splitlines()[-1:]})"
        return "broker killed and back"

    def _task(self, action: Action) -> str:
        """One task dies alone: the job runs in two processes, the task ``action.arg`` in one and the others in the
        other (the Databricks topology: the real-time alert task has a cluster of its own); kill -9 of the task's
        process while the others write; they must go on writing, and the task, started again on its checkpoint, goes
        on. Then the reverse: kill -9 of the others' process while the task sends alerts; it must go on sending, and
        the others, started again, write again. Both runs end with the action (the next one starts the whole job)."""
        assert action.arg == ALONE, f"a task action kills {ALONE!r} alone, not {action.arg!r}"
        if self.driver is not None:
            self._end_run()
        topic = self.settings.alerts_topic

        def sends_alerts(driver: Driver) -> bool:  # the alerts topic grows while ``driver`` runs
            before = sum(topic_end_offsets(self.bootstrap, topic).values())
            return driver.wait_for(
                lambda: sum(topic_end_offsets(self.bootstrap, topic).values()) > before, POINT_WAIT_S, "an alert"
            )

        rest = Driver(self.params, None, self.log, [task for task in UPSTREAM if task != action.arg])
        alone = Driver(self.params, None, self.log, [action.arg])
        try:
            assert sends_alerts(alone), f"the {action.arg} task failed:\n{alone.errors()}"
            rest.wait_for(lambda: rest.writes > 0, POINT_WAIT_S, "a Delta write of the other tasks")
            code = alone.kill()
            assert code == -signal.SIGKILL, f"the {action.arg} task exited {code} before its kill:\n{alone.errors()}"
            before = rest.writes
            assert rest.wait_for(lambda: rest.writes > before, POINT_WAIT_S, "a write after the task died"), (
                f"the other tasks stopped when {action.arg} died (exit {rest.proc.poll()}):\n{rest.errors()}"
            )
            went_on = rest.writes - before
            alone = Driver(self.params, None, self.log, [action.arg])
            assert sends_alerts(alone), f"the restarted {action.arg} task failed:\n{alone.errors()}"
            code = rest.kill()  # the reverse: the others die, the task goes on
            assert code == -signal.SIGKILL, f"the other tasks exited {code} before their kill:\n{rest.errors()}"
            assert sends_alerts(alone), f"{action.arg} stopped when the other tasks died:\n{alone.errors()}"
            rest = Driver(self.params, None, self.log, [task for task in UPSTREAM if task != action.arg])
            assert rest.wait_for(lambda: rest.writes > 0, POINT_WAIT_S, "a write of the restarted tasks"), (
                f"the restarted tasks failed:\n{rest.errors()}"
            )
        finally:
            codes = [alone.kill(), rest.kill()]
        assert codes == [-signal.SIGKILL] * 2, f"a run ended by itself (exits {codes}):\n{rest.errors()}"
        return (
            f"{action.arg} killed alone; the other tasks went on ({went_on} writes); restarted, it sent alerts again; "
            "then the others killed alone: it went on sending, and they wrote again once restarted"
        )

    def _stop_alerts(self, action: Action) -> str:
        driver = self._running(f"stop_alerts:{action.arg}")
        said = ("restarted alerts", RESTART_FAILED)
        driver.wait_for(
            lambda: any(line.startswith(said) for line in driver.lines), POINT_WAIT_S, "the alert query's restart"
        )
        failed = [line for line in driver.lines if line.startswith(RESTART_FAILED)]
        assert not failed, f"nemesis: {failed[0]}\n{driver.errors()}"
        return "real-time alert query stopped and started again"

    def _reset(self, action: Action) -> str:
        """The job down, the query's checkpoint deleted (an operator's reset). If its tables hold rows it wrote (or
        ``late_events`` rows of its own), a run of its task must refuse to start it (``streaming.CheckpointResetError``)
        naming exactly the statements that remove them; they are run here, as an operator rebuilding from bronze would,
        and the next run rebuilds the query's tables. If it wrote nothing yet, the reset is a fresh start."""
        from sensorcep.io import tables
        from sensorcep.io.lake import Tables
        from sensorcep.pipeline import registry
        from sensorcep.runtime import get_spark

        if self.driver is not None:
            self._end_run()
        spark, name = get_spark(), self.settings.query_name(action.arg)
        tables.register_all(spark, self.settings)  # the tables by name in this session, as in an operator's notebook
        lake, declared = Tables(spark, self.settings), registry.query(action.arg)
        held = [t for t in declared.rewritten_from_start if lake.exists(t) and not lake.read(t).isEmpty()]
        if lake.exists("late_events") and not lake.read("late_events").where(f"query = '{name}'").isEmpty():
            held.append("late_events")
        shutil.rmtree(self.settings.checkpoint_path(action.arg), ignore_errors=True)
        if not held:
            return f"reset {action.arg} before it wrote anything: a fresh start, nothing to refuse"
        code, said = Driver(self.params, None, self.log, queries=[action.arg]).refusal()  # refused as it starts
        named = re.search(r"CheckpointResetError: .* remove them first \((.*?)\); or run", said)
        assert code == 1 and named, f"a reset {action.arg} checkpoint was not refused (exit {code}):\n{said[-2000:]}"
        statements = named.group(1).split("; ")
        wanted = [lake[t].sql_name for t in held]
        assert len(statements) == len(wanted) and all(t in s for t, s in zip(wanted, statements, strict=True)), (
            f"the refusal names {statements}, not a removal for each of {held}"
        )
        for statement in statements:
            spark.sql(statement)
        return f"reset refused naming {len(statements)} removals ({', '.join(held)}); ran them: {action.arg} rebuilds"

    def _second_writer(self, _action: Action) -> str:
        driver = self._running()
        driver.wait_for(lambda: driver.writes > 0, POINT_WAIT_S, "a Delta write")
        code, said = Driver(self.params, None, self.log).refusal()
        first = "running" if driver.proc.poll() is None else f"exited {driver.proc.poll()}:\n{driver.errors()}"
        assert code == 1 and f"is already running: process {driver.proc.pid} " in said, (
            f"a second run of the job did not fail naming the first (exit {code}; the first {first}):\n{said[-4000:]}"
        )
        return "refused: " + next(line for line in said.splitlines() if "already running" in line)[:90]


# ---------------------------------------------------------------------------------------------------- the verdict
#: an alert_events row as the lifecycle decides it (event_id, pages, actor, detail and batch_id aside)
TRANSITION_COLUMNS = ["incident_id", "rule_id", "device_id", "transition", "at", "cause_id", "state", "alerts"]
ANOMALY_COLUMNS = ["alert_id", "rule_id", "device_id", "event_time"]
RECORD = ["topic", "partition", "offset"]
#: the tables the verdict judges, and the columns it reads of each
JUDGED = {
    "bronze_events": [*RECORD, "device_id", "sensor_freq", "event_time", "_metadata.file_name"],
    "quarantine_events": RECORD,
    "duplicate_events": RECORD,
    "late_events": ["query", "device_id", "event_time", "watermark", "late_by_s", "batch_id"],
    "sensor_samples": ["window_start", "window_end", "device_id", "sensor_freq", "event_time", "roles", "is_anomalous"],
    "anomalies": ANOMALY_COLUMNS,
    "alert_escalations": ["alert_id"],
    "alert_events": ["event_id", *TRANSITION_COLUMNS, "batch_id"],
    "device_status": ["device_id", "status_event", "status", "changed_at", "first_seen", "last_seen", "event_count"],
    "device_baselines": ["device_id", "rule_id", "rule_version", "events", "mean", "spread", "as_of", "batch_id"],
    "stream_progress": ["query_name", "query_id", "batch_id", "rows_dropped_by_watermark"],
    "notifications": ["notification_id", "receiver", "incident_ids", "status", "reason"],
}


@dataclass(frozen=True)
class Drained:
    """What the verdict judges, read once: the judged columns of every table (empty where the run never created it)
    and every record of the events, alerts and acks topics. The verifier's own test plants its bugs in a copy
    (:meth:`with_table`), so each planted bug costs a judgement, not a Delta write, a read of everything and a
    restore."""

    tables: dict[str, pd.DataFrame]
    events: list[tuple]
    alerts: list[tuple]
    acks: list[tuple]
    #: every POST the routes' receiver got: (path, headers, body)
    received: list[tuple] = field(default_factory=list)

    @classmethod
    def read(cls, settings: Settings, received: list[tuple] = ()) -> Drained:
        from sensorcep.io import delta
        from sensorcep.runtime import get_spark

        spark, bootstrap = get_spark(), settings.kafka_bootstrap_servers
        tables = {}
        for table, columns in JUDGED.items():
            path = settings.table_path(table)
            found = delta.table_exists(path, spark)
            tables[table] = delta_frame(path, columns) if found else pd.DataFrame(columns=columns)
        topics = (settings.events_topic, settings.alerts_topic, settings.acks_topic)
        events, alerts, acks = (topic_records(bootstrap, t) for t in topics)
        return cls(tables, events, alerts, acks, list(received))

    def frame(self, table: str) -> pd.DataFrame:
        return self.tables[table].copy()

    def with_table(self, table: str, frame: pd.DataFrame) -> Drained:
        return dataclasses.replace(self, tables={**self.tables, table: frame})


def judge(settings: Settings, drained: Drained, acknowledged: dict) -> dict[str, int]:
    """Exact checks over the drained tables and topics (what :class:`Drained` read); raises AssertionError naming the
    first difference. Returns counts."""
    in_topic = {(p, o) for p, o, _, _ in drained.events}
    assert set(acknowledged) <= in_topic, "an acknowledged record is not in the topic"
    where: dict[tuple, str] = {}
    for table in ("bronze_events", "quarantine_events", "duplicate_events"):
        frame = drained.frame(table)
        for p, o in zip(frame.partition, frame.offset, strict=True):
            assert (p, o) not in where, f"record {(p, o)} is in {where.get((p, o))} and in {table}"
            where[(p, o)] = table
    assert set(where) == in_topic, (
        f"ingest's tables hold {len(set(where) - in_topic)} records the topic has not and miss "
        f"{len(in_topic - set(where))} of its {len(in_topic)} records"
    )
    expected_table = {
        "ok": "bronze_events",
        "anomaly": "bronze_events",
        "late": "bronze_events",
        "resent": "duplicate_events",
        "ahead": "quarantine_events",
        "malformed": "quarantine_events",
    }
    wrong = {c: (r.kind, where[c]) for c, r in acknowledged.items() if where[c] != expected_table[r.kind]}
    assert not wrong, f"{len(wrong)} records in the wrong table, e.g. {list(wrong.items())[:3]}"

    bronze = drained.frame("bronze_events")
    late = drained.frame("late_events")
    for query, rows in late.groupby("query"):
        assert not rows.duplicated(["device_id", "event_time"]).any(), f"{query}: a late event recorded twice"
        assert (rows.late_by_s >= 0).all(), f"{query}: a late event after the watermark it missed"
    _judge_late_watermarks(settings, late)
    sampling_late = late[late["query"] == settings.query_name("sampling")]
    key = ["device_id", "event_time"]
    took = bronze.merge(sampling_late[key], on=key, how="left", indicator=True)
    took = took[took._merge == "left_only"].drop(columns="_merge")
    assert len(sampling_late.merge(bronze[key], on=key)) == len(sampling_late), "a late event is not in bronze"
    batch = pd.DataFrame(
        {
            "device_id": took.device_id,
            "sensor_freq": took.sensor_freq.astype("float64"),
            "event_time_us": took.event_time.map(lambda t: pd.Timestamp(t).value // 1000),
        }
    )
    want = oracle_rows(
        reference_samples([batch], settings.window_seconds, settings.slide_seconds, settings.watermark_seconds)
    )
    got = sample_tuples(drained.frame("sensor_samples"))
    assert len(got) == len(set(got)), "a sample row twice"
    assert got == want, f"sensor_samples differs from the oracle: {len(set(got) ^ set(want))} rows differ"

    anomalous = bronze[bronze.sensor_freq < 0]
    expected_ids = {
        alerts.alert_id(d, pd.Timestamp(t).value // 1000, PACKAGED_RULE)
        for d, t in zip(anomalous.device_id, anomalous.event_time, strict=True)
    }
    stateful = _judge_stateful_rules(settings, drained, bronze, late)
    expected_ids |= stateful
    anomalies = drained.frame("anomalies")
    assert not anomalies.alert_id.duplicated().any(), "anomalies: an alert_id twice"
    assert set(anomalies.alert_id) == expected_ids, "anomalies differ from the anomalous events in bronze"
    sent_for: dict[str, tuple] = {}  # a replayed alert is the same alert: its id names one event of one rule
    for _, _, _, value in drained.alerts:
        alert = json.loads(value)
        event = (alert.get("device_id"), alert.get("rule_id"), alert.get("event_time"))
        assert sent_for.setdefault(alert["alert_id"], event) == event, (
            f"alert {alert['alert_id']} was sent for two events: {sent_for[alert['alert_id']]} and {event}"
        )
    alerted = set(sent_for)
    assert expected_ids <= alerted, f"{len(expected_ids - alerted)} anomalies never reached the alerts topic"
    escalations = drained.frame("alert_escalations")
    assert not escalations.alert_id.duplicated().any(), "alert_escalations: an alert_id twice"
    assert set(escalations.alert_id) <= expected_ids, "an escalation of no anomaly"
    events = drained.frame("alert_events")
    assert not events.event_id.duplicated().any(), "alert_events: a transition recorded twice"
    escalated = events[events.transition == "escalated"]
    assert not escalated.incident_id.duplicated().any(), "alert_events: an incident escalated twice"
    lost, extra = (
        set(escalated.incident_id) - set(escalations.alert_id),
        set(escalations.alert_id) - set(escalated.incident_id),
    )
    assert not lost, f"alert_escalations lost {len(lost)} escalation(s) alert_events recorded, e.g. {sorted(lost)[:3]}"
    assert not extra, f"alert_escalations holds {len(extra)} escalation(s) alert_events never recorded"
    acks = [json.loads(v) for _, _, _, v in drained.acks]
    transitions = _judge_lifecycle(settings, drained.frame("anomalies"), late, events, acks)
    status_changes = _judge_device_status(settings, drained.frame("device_status"), bronze, late)
    told = _judge_notifications(events, drained.frame("notifications"), drained.received)

    progress = drained.frame("stream_progress")
    # the batches of the queries' current checkpoints (a reset one starts its batch ids again under a new id)
    current = {settings.query_name(q): checkpoint_id(settings, q) for q in LATE_WRITERS}
    progress = progress[[current.get(q, i) == i for q, i in zip(progress.query_name, progress.query_id, strict=True)]]
    dropped = progress[pd.to_numeric(progress.rows_dropped_by_watermark).fillna(0) > 0]
    first_late = late.groupby("query").batch_id.min().to_dict() if len(late) else {}
    held = set(zip(late["query"], late.batch_id, strict=True)) if len(late) else set()
    at_least_once = {
        settings.query_name("alert_lifecycle")
    }  # its input, the alerts topic, repeats alerts: held earlier
    unheld = [
        (q, b)
        for q, b in zip(dropped.query_name, dropped.batch_id, strict=True)
        if (q, b) not in held and not (q in at_least_once and first_late.get(q, b + 1) <= b)
    ]
    assert not unheld, f"stream_progress says rows were dropped that late_events does not hold: {unheld[:5]}"
    return {
        "records": len(in_topic),
        "acknowledged": len(acknowledged),
        "bronze": int((pd.Series(where) == "bronze_events").sum()),
        "quarantine": int((pd.Series(where) == "quarantine_events").sum()),
        "duplicates": int((pd.Series(where) == "duplicate_events").sum()),
        "late": len(late),
        "samples": len(got),
        "anomalies": len(expected_ids),
        "escalations": len(escalations),
        "status_changes": status_changes,
        "stateful_alerts": len(stateful),
        "acks": len(acks),
        **{transition: transitions.get(transition, 0) for transition in ("acked", "snoozed", "ignored")},
        **told,
    }


def _judge_notifications(events: pd.DataFrame, ledger: pd.DataFrame, received: list[tuple]) -> dict[str, int]:
    """The notifier under faults: each notification once in the ledger; the receiver got exactly the messages the
    ledger says were delivered (a message sent again after a kill carries the id, and the body, it was first sent
    with); every incident that paged and is still open was told. An incident that closed may have closed before the
    pass that would have told it (a pass reads what the lifecycle appended since the last: how many transitions it
    reads together depends on the runs), so a closed one may be untold, never told twice."""
    twice = ledger.notification_id[ledger.notification_id.duplicated()]
    assert twice.empty, f"notifications: a message recorded twice, e.g. {twice.iloc[0] if len(twice) else ''}"
    bodies: dict[str, set[bytes]] = {}
    for _, headers, body in received:
        bodies.setdefault(headers["Idempotency-Key"], set()).add(body)
    changed = sorted(key for key, seen in bodies.items() if len(seen) > 1)
    assert not changed, f"a message sent again with another body under its id: {changed[:3]}"
    delivered = set(ledger.notification_id[ledger.status == "delivered"])
    unrecorded, unsent = set(bodies) - delivered, delivered - set(bodies)
    assert not unrecorded, (
        f"the receiver got {len(unrecorded)} message(s) the ledger does not hold: {sorted(unrecorded)[:3]}"
    )
    assert not unsent, (
        f"the ledger says {len(unsent)} message(s) were delivered that never arrived: {sorted(unsent)[:3]}"
    )
    paged = set(events.incident_id[events.transition.isin(["opened", "escalated"])].dropna())
    closed = set(events.incident_id[events.transition.isin(["acked", "resolved"])].dropna())
    told = {i for ids in ledger.incident_ids[ledger.status.isin(["delivered", "suppressed"])] for i in ids}
    untold = paged - closed - told
    assert not untold, f"{len(untold)} open incident(s) nobody was told of: {sorted(untold)[:3]}"
    assert told <= paged, f"a message about an incident that never paged: {sorted(told - paged)[:3]}"
    return {"notifications": len(delivered), "resent": len(received) - len(bodies), "incidents_told": len(told)}


def _us(t) -> int:
    return pd.Timestamp(t).value // 1000


def _judge_lifecycle(
    settings: Settings, anomalies: pd.DataFrame, late: pd.DataFrame, events: pd.DataFrame, acks: list[dict]
) -> dict[str, int]:
    """``alert_events`` exactly as the lifecycle decides over the alerts it took and the fleet's ``acks`` (each a
    usable ack: the fleet sends no bad one), up to the watermark it last applied (its checkpoint's offset log), less
    the alerts and acks too late for it (its ``late_events``): the transitions do not depend on the micro-batches
    (alert_lifecycle's docstring), so the kills must not change one. Every alert up to that watermark was taken or is
    in ``late_events``. Returns how many transitions of each kind it judged."""
    from sensorcep.pipeline import alert_lifecycle, checkpoint_log, checkpoint_settings
    from sensorcep.rules import catalog, lifecycle
    from sensorcep.runtime import get_spark

    checkpoint = settings.checkpoint_path("alert_lifecycle")
    # the last batch that ran: the last committed one, or a later one the final stop cut short after its Delta write
    # (its commit is missing: a restart would replay it, and the idempotent write would add nothing)
    last = max([checkpoint_log.last_committed(checkpoint) or 0, *events.batch_id.astype(int)])
    mark_us = checkpoint_log.watermark_ms(None, checkpoint, last) * 1000
    # the settings the query ran with, as its checkpoint recorded them (the always-on job's tasks take only the
    # parameters the bundle declares for them: the fault run's ack_timeout is not one of them)
    with open(f"{checkpoint}/{checkpoint_settings.RECORD}") as handle:
        ack_timeout = json.load(handle)["settings"]["ack_timeout"].replace(" s", " seconds")
    ran = settings.replace(ack_timeout=ack_timeout)
    by_rule = alert_lifecycle.policies(catalog.rules_in_force(get_spark(), ran), ran)
    alerts = anomalies.assign(at_us=anomalies.event_time.map(_us))
    released = alerts[alerts.at_us <= mark_us]
    taken = set(events.cause_id[events.transition.isin(["opened", "repeated"])])
    own_late = late[late["query"] == settings.query_name("alert_lifecycle")]
    late_keys = set(zip(own_late.device_id, own_late.event_time.map(_us), strict=True))
    lost = [
        a.alert_id for a in released.itertuples() if a.alert_id not in taken and (a.device_id, a.at_us) not in late_keys
    ]
    assert not lost, f"alert_lifecycle lost {len(lost)} alert(s): neither taken nor in late_events, e.g. {lost[:3]}"
    inputs: dict[tuple[str, str], list] = {}
    for a in released[released.alert_id.isin(taken)].itertuples():
        inputs.setdefault((a.rule_id, a.device_id), []).append(
            lifecycle.Input(at_us=int(a.at_us), kind="alert", alert_id=a.alert_id)
        )
    for ack in acks:
        at_us = _us(ack["ack_time"])
        if at_us <= mark_us and (ack["device_id"], at_us) not in late_keys:
            until_us = _us(ack["until"]) if ack.get("until") else None
            inputs.setdefault((ack["rule_id"], ack["device_id"]), []).append(
                lifecycle.Input(at_us, "ack", ack["alert_id"], ack.get("action") or "ack", until_us, ack["acked_by"])
            )
    want = []
    for (rule, device), given in inputs.items():
        steps, _ = lifecycle.advance(None, given, mark_us, by_rule.get(rule, by_rule[""]))
        want += [(s.incident_id, rule, device, s.transition, s.at_us, s.cause_id, s.state, s.alerts) for s in steps]
    got = [
        (r.incident_id, r.rule_id, r.device_id, r.transition, _us(r.at), r.cause_id, r.state, int(r.alerts))
        for r in events[TRANSITION_COLUMNS].itertuples(index=False)
    ]
    differ = sorted(set(got) ^ set(want), key=str)
    assert sorted(got, key=str) == sorted(want, key=str), (
        f"alert_events differ from the lifecycle over the alerts it took and the acks: {len(got)} rows, {len(want)} "
        f"expected, e.g. {differ[:3]}"
    )
    return events.transition.value_counts().to_dict()


def _judge_stateful_rules(settings: Settings, drained: Drained, bronze: pd.DataFrame, late: pd.DataFrame) -> set[str]:
    """The stateful rules' alerts on the alerts topic are exactly what the rules fire (``support.oracle``) over the
    events the query took (bronze less its own ``late_events``), up to the watermark it last applied (its checkpoint's
    offset log); ``device_baselines`` holds no row twice, and each device's last row is its baseline over those events
    (:func:`judge_baselines`). Returns their alert ids (none when the fleet runs only the packaged rule)."""
    from sensorcep.pipeline import checkpoint_log

    if not settings.rules_file:
        return set()
    rules = [r for r in yaml.safe_load(Path(settings.rules_file).read_text())["rules"] if r["id"] in STATEFUL_IDS]
    baselines = drained.frame("device_baselines")
    doubled = baselines[baselines.duplicated(keep=False)]
    assert doubled.empty, f"device_baselines: {len(doubled)} rows twice, e.g. {doubled.values[:2].tolist()}"
    checkpoint = settings.checkpoint_path("stateful_rules")
    last = checkpoint_log.last_committed(checkpoint)
    assert last is not None, "the stateful rules query never committed a batch"
    mark_ms = checkpoint_log.watermark_ms(None, checkpoint, last)
    own_late = late[late["query"] == settings.query_name("stateful_rules")]
    key = ["device_id", "event_time"]
    took = bronze.merge(own_late[key], on=key, how="left", indicator=True)
    took = took[took._merge == "left_only"]
    events = pd.DataFrame(
        {
            "device_id": took.device_id,
            "sensor_freq": took.sensor_freq.astype("float64"),
            "event_time_us": took.event_time.map(_us),
        }
    )
    judge_baselines(rules, events, baselines, mark_ms)
    want = stateful_rule_alerts(events, rules, mark_ms)
    sent = [json.loads(v) for _, _, _, v in drained.alerts]
    got = {(a["alert_id"], a["rule_id"]) for a in sent if a["rule_id"] in STATEFUL_IDS}
    assert got == want, (
        f"the stateful rules' alerts differ from the oracle over the events the query took: {len(got - want)} sent "
        f"that should not be, {len(want - got)} never sent, e.g. {sorted(got ^ want)[:3]}"
    )
    assert want, "the stateful rules fired nothing: the fleet does not exercise them"
    return {alert_id for alert_id, _ in want}


def judge_baselines(rules: list[dict], events: pd.DataFrame, baselines: pd.DataFrame, mark_ms: int) -> int:
    """Each device's last ``device_baselines`` row (its highest batch) per baseline rule is the device's baseline over
    ``events`` (device_id, sensor_freq, event_time_us) up to the watermark ``mark_ms``: as many events, the last one's
    time, and the exponentially weighted mean and spread that pandas computes from them (:func:`support.oracle.
    ew_baseline`, not the rules' own recursion); and no device without such events has a row. Returns the rows
    judged."""
    final = events[events.event_time_us <= mark_ms * 1000].sort_values("event_time_us")
    judged = 0
    for rule in (r for r in rules if r["kind"] == "baseline"):
        rows = baselines[baselines.rule_id == rule["id"]].sort_values("batch_id")
        last = rows.groupby("device_id").tail(1).set_index("device_id")
        took = {device: group for device, group in final.groupby("device_id")}
        assert set(last.index) <= set(took), f"device_baselines: {rule['id']} rows for devices with no event"
        for device, group in took.items():
            values = group.sensor_freq.astype("float64").tolist()
            assert device in last.index, f"device_baselines: no {rule['id']} row for {device} ({len(values)} events)"
            row = last.loc[device]
            mean, spread = ew_baseline(values, rule["span"])
            got = (int(row["events"]), _us(row["as_of"]), float(row["mean"]), float(row["spread"]))
            want = (len(values), int(group.event_time_us.iloc[-1]), mean, spread)
            close = all(abs(g - w) <= 1e-6 * (1 + abs(w)) for g, w in zip(got[2:], want[2:], strict=True))
            assert got[:2] == want[:2] and close, (
                f"device_baselines: {device}'s last {rule['id']} row says (events, as_of µs, mean, spread) {got}, its "
                f"events give {want}"
            )
            judged += 1
    return judged


STATEFUL_IDS = {r["id"] for r in STATEFUL_RULES}


def without_one_stateful_alert(drained: Drained) -> Drained:
    """The drained topics with one stateful rule's alert gone (every copy of it): an alert the query never sent."""
    sent = [(record, json.loads(record[3])) for record in drained.alerts]
    gone = min(alert["alert_id"] for _, alert in sent if alert["rule_id"] in STATEFUL_IDS)
    return dataclasses.replace(drained, alerts=[record for record, alert in sent if alert["alert_id"] != gone])


def with_an_alert_id_reused(drained: Drained) -> Drained:
    """The drained topics with one more alert of the packaged rule: an id already sent, for another event time (an alert
    id computed from something a replay changes)."""
    record = next(r for r in drained.alerts if json.loads(r[3])["rule_id"] == PACKAGED_RULE)
    alert = json.loads(record[3])
    alert["event_time"] = pd.Timestamp(alert["event_time"]) + pd.Timedelta(seconds=1)
    alert["event_time"] = alert["event_time"].isoformat()
    return dataclasses.replace(drained, alerts=[*drained.alerts, (*record[:3], json.dumps(alert))])


def packaged_rules() -> list[dict]:
    """The packaged rule set, as YAML rules (the fleet's anomalies fire its ``negative_frequency``)."""
    from sensorcep.rules.model import DEFAULT_RULES, RuleError
    from sensorcep.yaml_files import read_yaml

    document, _ = read_yaml(None, what="rules", package="sensorcep.rules", default=DEFAULT_RULES, error=RuleError)
    return document["rules"]


#: the queries that keep their late input rows in ``late_events``
LATE_WRITERS = ("sampling", "device_activity", "alert_lifecycle", "stateful_rules")


def _judge_late_watermarks(settings: Settings, late: pd.DataFrame) -> int:
    """Every ``late_events`` row was late for the watermark Spark itself used: the one its query's checkpoint holds for
    the batch before the row's (``offsets/<batch - 1>``, Spark's late-row filter), which the row must also name. A
    row whose log entry Spark has purged (it keeps the last 100) is not judged. Returns how many rows were judged."""
    from sensorcep.pipeline import checkpoint_log

    judged = 0
    for query in LATE_WRITERS:
        rows = late[late["query"] == settings.query_name(query)]
        checkpoint = settings.checkpoint_path(query)
        for batch_id, batch in rows.groupby("batch_id"):
            entry = int(batch_id) - 1
            if entry >= 0 and entry not in checkpoint_log.batches(checkpoint, "offsets"):
                continue
            mark_us = checkpoint_log.watermark_ms(None, checkpoint, entry) * 1000 if entry >= 0 else 0
            named = {_us(t) for t in batch.watermark}
            assert named == {mark_us}, (
                f"late_events: {query}'s batch {batch_id} names the watermark(s) {sorted(named)} µs; "
                f"its checkpoint's offset log says Spark used {mark_us} µs"
            )
            on_time = batch[batch.event_time.map(_us) > mark_us]
            assert on_time.empty, (
                f"late_events: {len(on_time)} event(s) of {query}'s batch {batch_id} after the watermark Spark used "
                f"({mark_us} µs): on time, yet kept as late, e.g. {on_time[['device_id', 'event_time']].values[:3]}"
            )
            judged += len(batch)
    assert judged or late.empty, "late_events: no row could be judged against its query's offset log"
    return judged


def _judge_device_status(settings: Settings, status: pd.DataFrame, bronze: pd.DataFrame, late: pd.DataFrame) -> int:
    """``device_status`` equals device activity's contract (:func:`support.oracle.device_status_changes`) replayed over
    the micro-batches the query actually ran: which bronze rows each took (its offset log against bronze's Delta log,
    :func:`support.delta_batches.batches`), less those late for the watermark of the batch before (Spark's late-row
    filter), each batch's timers fired at its own watermark. Its rows depend on where the batches were cut (an event
    that arrives after a later one changes no status), so the oracle follows the cuts Spark recorded; a kill, a replay
    or a restart must change nothing else; and the rows the replay drops as late are the query's ``late_events`` rows
    (the cuts, read a second way). Returns the rows judged."""
    cut = delta_batches.batches(settings.checkpoint_path("device_activity"), settings.table_path("bronze_events"))
    events = bronze.assign(us=bronze.event_time.map(_us))
    replay, late_before_us, dropped = [], 0, set()
    for batch in cut:
        read = events[events.file_name.isin(batch.files)]
        took = read[read.us > late_before_us]
        dropped |= set(zip(read.device_id[read.us <= late_before_us], read.us[read.us <= late_before_us], strict=True))
        replay.append((batch.watermark_ms, {d: list(rows.us // 1000) for d, rows in took.groupby("device_id")}))
        late_before_us = batch.watermark_ms * 1000
    own = late[late["query"] == settings.query_name("device_activity")]
    kept = set(zip(own.device_id, own.event_time.map(_us), strict=True))
    assert dropped == kept, (
        f"device_status: the batches its query ran drop {len(dropped - kept)} event(s) as late that late_events does "
        f"not hold, and late_events holds {len(kept - dropped)} the batches did not drop"
    )
    timeout_ms = int(parse_duration(settings.device_timeout) * 1000)
    want = Counter(device_status_changes(replay, timeout_ms))
    ms = ["changed_at", "first_seen", "last_seen"]
    got = Counter(
        zip(status.device_id, status.status_event, status.status, *(status[c].map(_us) // 1000 for c in ms),
            status.event_count.astype(int), strict=True)
    )  # fmt: skip
    doubled = sorted(row for row, n in got.items() if n > 1)
    assert not doubled, f"device_status: a status change recorded twice: {doubled[:3]}"
    lost, extra = sorted(want - got), sorted(got - want)
    assert not lost and not extra, (
        f"device_status differs from device activity replayed over the {len(cut)} batches its query ran: "
        f"{len(lost)} change(s) missing, e.g. {lost[:2]}; {len(extra)} not in the replay, e.g. {extra[:2]}"
    )
    return sum(got.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kills", type=int, default=60, help="length of the random chain")
    parser.add_argument("--suite", action="store_true", help="make extended's plan: every kind of named point once")
    parser.add_argument("--every-table", action="store_true", help="with --suite: make nightly's, every table's writes")
    parser.add_argument("--broker", default="127.0.0.1:19095", help="host:port of the nemesis' own broker")
    parser.add_argument("--actions", help="these actions instead of a drawn plan, e.g. task:alerts,sink,broker")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="nemesis-"))
    if args.actions:
        actions = [Action(*item.split(":", 1)) for item in args.actions.split(",")]
        unknown = {a.kind for a in actions} - {*KILLS, "stop_alerts", "second_writer", "reset"}
        if unknown:
            parser.error(
                f"unknown actions {sorted(unknown)}: one of {', '.join(KILLS)}, stop_alerts, second_writer, reset"
            )
    else:
        actions = suite_plan(args.seed, args.every_table) if args.suite else plan(args.seed, args.kills)
    print(f"seed {args.seed}, plan: {', '.join(map(str, actions))}", flush=True)
    nemesis = Nemesis(args.seed, actions, workdir, args.broker)
    try:
        nemesis.run()
        drained = Drained.read(nemesis.settings, nemesis.receiver.received)
        counts = judge(nemesis.settings, drained, nemesis.acknowledged)
        print(json.dumps(counts))
        if nemesis.stateful:  # the verifier of the stateful rules: a lost alert must fail it, naming the loss
            lost_one = without_one_stateful_alert(drained)
            try:
                judge(nemesis.settings, lost_one, nemesis.acknowledged)
            except AssertionError as failed:
                assert "1 never sent" in str(failed), (
                    f"the planted loss failed the verdict for another reason: {failed}"
                )
                print("planted: a stateful rule's alert lost: the verdict failed, as it must")
            else:
                raise AssertionError("a stateful rule's alert lost, and the verdict passed")
        print(f"reached {len(nemesis.reached)} points: {', '.join(nemesis.reached)}")
        assert not nemesis.missed, f"points not reached: {', '.join(nemesis.missed)}"
        print(f"✔ {len(actions)} actions, seed {args.seed}: every record accounted for, samples equal the oracle")
    finally:
        broker.down(nemesis.broker_dir)


if __name__ == "__main__":
    main()
