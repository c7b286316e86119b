"""What every benchmark shares: scratch topics and tables, the simulated and steady workloads, Kafka offsets, a query's
progress and batch statistics, a CPU meter, and one way to record the figures a run printed (:func:`record`).

Not a benchmark itself: the scripts next to it import it. Each runs as ``.venv/bin/python benchmarks/<script>.py``, so
this folder is first on ``sys.path`` and ``from harness import ...`` works; no script imports another.

What only some scripts need (the pipeline, the simulator, the rule model) is imported inside the functions that use it,
so that importing the harness (the unit tests do) stays under a second.
"""

from __future__ import annotations

import argparse
import ast
import http.server
import json
import math
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from sensorcep.local import broker
from sensorcep.settings import Settings, env_settings

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.streaming import StreamingQuery

    from sensorcep.local.simulator import Simulation

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ command line
def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """A script's argument parser: its module docstring, as written, is its ``--help``."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


# ------------------------------------------------------------------------------ scratch topics and tables
#: the settings field that names each kind of topic a run can get a scratch one of
TOPIC_FIELDS = {"events": "events_topic", "alerts": "alerts_topic", "acks": "acks_topic"}


def run_id() -> str:
    """A short id that tells one run's topics and consumer groups from any other run's."""
    return uuid.uuid4().hex[:8]


@contextmanager
def scratch_folder(name: str) -> Iterator[str]:
    """A new temporary folder for one run's tables and checkpoints, removed on exit."""
    folder = tempfile.mkdtemp(prefix=f"sensorcep-bench-{name}-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def scratch_run(
    name: str, topics: Sequence[str] = ("events",), *, start_broker: bool = True, **overrides
) -> Iterator[Settings]:
    """Settings for one run on scratch topics and tables: a new folder as ``base_path`` and a fresh topic of each kind
    in ``topics`` (``events``, ``alerts``, ``acks``; named ``bench-<name>-<kind>-<run id>``), created on the broker
    with ``settings.partitions`` partitions. On exit the topics are deleted and the folder removed, so repeated runs
    leave the broker and the disk as they found them. ``overrides`` are further settings (``env_settings``).

    ``start_broker``: start the local broker unless it is up (``broker.up``); False: it must already answer (a soak
    measures on a broker started beforehand, with nothing else running).
    """
    run = run_id()
    with scratch_folder(name) as folder:
        names = {TOPIC_FIELDS[kind]: f"bench-{name}-{kind}-{run}" for kind in topics}
        settings = env_settings(base_path=folder, **names, **overrides)
        if start_broker:
            broker.up(settings.kafka_bootstrap_servers)
        else:
            broker.wait_until_ready(settings.kafka_bootstrap_servers, timeout=10)
        with broker.scratch_topics(
            settings.kafka_bootstrap_servers, list(names.values()), partitions=settings.partitions
        ):
            yield settings


# ------------------------------------------------------------------------------ a webhook receiver
class Arrivals:
    """A webhook receiver on loopback: when each incident's first message arrived (wall clock, seconds)."""

    def __init__(self):
        self.at: dict[str, float] = {}
        arrivals = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = time.time()
                for incident in body["incidents"]:
                    arrivals.at.setdefault(incident["incident_id"], now)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def routes(self, folder: str, group_by: str, group_wait: str) -> str:
        """Write a routes file in ``folder`` that tells every incident to this receiver, a message per group of
        ``group_by`` after ``group_wait``; its path. Its secret is ``hook-hmac`` of the scope :data:`ROUTES_SCOPE`:
        locally the environment variable ``BENCH_HOOK_HMAC``, set here."""
        os.environ["BENCH_HOOK_HMAC"] = "bench"
        path = Path(folder) / "routes.yaml"
        path.write_text(
            "receivers:\n"
            f'  - name: team\n    webhook: {{url: "{self.url}/hook", hmac_secret: hook-hmac}}\n'
            f"route:\n  receiver: team\n  group_by: [{group_by}]\n  group_wait: {group_wait}\n"
        )
        return str(path)


#: the secret scope of :meth:`Arrivals.routes`
ROUTES_SCOPE = "bench"


# ------------------------------------------------------------------------------ workloads
#: the simulated backlog's first event time: historic and fixed, so a backlog is the same run after run
BACKLOG_START = datetime(2026, 1, 1, tzinfo=timezone.utc)

#: the packaged rule the steady producer's anomalies fire (``sensor_freq < 0``)
ANOMALY_RULE = "negative_frequency"


def produce_backlog(
    settings: Settings, events: int, seed: int, start: datetime = BACKLOG_START, **config
) -> Simulation:
    """``events`` simulated events from ``start`` (``sensorcep.local.simulator``; ``config``: more of its
    ``SimulationConfig``) produced to the events topic before any clock runs. Returns the simulation (its
    acknowledgements, or its ``end`` to start a later backlog from)."""
    from sensorcep.local import simulator  # pandas and pyarrow: only the scripts that produce a backlog pay for them

    simulation = simulator.generate(simulator.SimulationConfig(events=events, seed=seed, start=start, **config))
    simulator.produce(simulation, settings.kafka_bootstrap_servers, settings.events_topic, progress=True)
    return simulation


#: the steady producer's fleet: its events come from this many devices, at random
STEADY_DEVICES = 1_000


def produce_steady(bootstrap: str, topic: str, rate: int, seconds: float, out, warmup: float = 0.0) -> None:
    """``rate`` events/s for ``warmup + seconds``, with current event times, 1,000 devices and 1% anomalies; puts
    {alert_id: send time} of the anomalies sent after the warm-up on ``out`` (the first micro-batches of a query pay
    for JIT compilation and worker start).

    Runs in a process of its own (:func:`start_producer`), so it never competes with the Spark driver for the GIL.
    """
    from sensorcep.pipeline import alerts  # in the producer's own process; pyspark comes with it

    sent: dict = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    rng = np.random.default_rng(1)
    tick, n, started = 0.01, 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < warmup + seconds:
        due = int(elapsed * rate)
        now = datetime.now(timezone.utc)
        event_us = int(now.timestamp() * 1_000_000) // 1000 * 1000
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        for _ in range(due - n):
            device = f"dev-{rng.integers(0, STEADY_DEVICES):05d}"
            anomalous = rng.random() < 0.01
            freq = -float(rng.uniform(0.1, 20)) if anomalous else float(rng.normal(50, 10))
            producer.produce(
                topic,
                key=device.encode(),
                value=json.dumps({"device_id": device, "sensor_freq": freq, "event_time": stamp}).encode(),
            )
            if anomalous and elapsed >= warmup:
                sent.setdefault(alerts.alert_id(device, event_us, ANOMALY_RULE), time.time())
            n += 1
        producer.poll(0)
        time.sleep(tick)
    producer.flush(30)
    out.put(sent)


def start_producer(settings: Settings, rate: int, seconds: float, warmup: float = 0.0):
    """:func:`produce_steady` to the events topic, started in a process of its own; returns the process and the queue
    it puts its send log on. Read the queue before joining the process: a large send log keeps the process until it is
    read.

    Spawned, not forked: a fork of a process that runs the Spark gateway's threads is not safe. Daemonic: it ends with
    the script."""
    spawn = multiprocessing.get_context("spawn")
    sent = spawn.Queue()
    process = spawn.Process(
        target=produce_steady,
        args=(settings.kafka_bootstrap_servers, settings.events_topic, rate, seconds, sent, warmup),
        daemon=True,
    )
    process.start()
    return process, sent


def always_on_window(
    spark, settings: Settings, trickle: int, warmup: float, seconds: float, clock: CpuMeter
) -> tuple[float, list[StreamingQuery], datetime]:
    """Every always-on task running while ``trickle`` events/s arrive: Spark's CPU seconds (:meth:`CpuMeter.read_spark`)
    over ``seconds``, measured after ``warmup`` seconds (first batches and Python workers are start-up, not idling);
    the queries, stopped; and when the window opened (for their progress reports)."""
    from sensorcep.pipeline import always_on
    from sensorcep.pipeline.streaming import stop_queries

    tasks = [always_on.start_task(spark, task, settings) for task in always_on.TASKS]
    running = [q for task in tasks for q in task.queries]
    # the producer's send log stays unread in its queue, kept referenced while it runs
    producer, _sent = start_producer(settings, trickle, warmup + seconds + 30)
    try:
        time.sleep(warmup)
        since = datetime.now(timezone.utc)
        clock.read()
        time.sleep(seconds)
        cpu = clock.read_spark()
    finally:
        stop_queries(spark, running)
        producer.terminate()
    return cpu, running, since


def stateful_rule_set(per_kind: int) -> list:
    """``per_kind`` rules of each stateful kind (rate, count, absence, sequence, baseline), unscoped, with thresholds
    that fire now and then on simulated data."""
    from sensorcep.rules.model import parse_rules  # pydantic: only the scripts with stateful rules pay for it

    rules = []
    for i in range(per_kind):
        rules += [
            {"id": f"rate_{i}", "kind": "rate", "field": "sensor_freq", "op": ">", "value": 100.0 + i},
            {"id": f"count_{i}", "kind": "count", "field": "sensor_freq", "op": "<", "value": 0.0, "at_least": 2,
             "within": f"{60 + i} seconds"},
            {"id": f"absence_{i}", "kind": "absence", "within": f"{30 + i} seconds"},
            {"id": f"sequence_{i}", "kind": "sequence", "first": {"field": "sensor_freq", "op": ">", "value": 90.0},
             "then": {"field": "sensor_freq", "op": "<", "value": 0.0}, "within": f"{120 + i} seconds"},
            {"id": f"baseline_{i}", "kind": "baseline", "field": "sensor_freq", "k": 4.0 + i, "span": 50},
        ]  # fmt: skip
    return parse_rules({"rules": rules})


def new_kind_rule_set(per_kind: int = 4) -> list:
    """``per_kind`` rules of each of rules v2's shapes (5 x 4 = 20 by default), unscoped: a sliding average and a
    spread over windows (aggregate), spike / no recovery / spike and a repeating step (pattern), and a count of an
    ``any:`` condition."""
    from sensorcep.rules.model import parse_rules

    spike, low = {"field": "sensor_freq", "op": ">", "value": 90.0}, {"field": "sensor_freq", "op": "<", "value": 10.0}
    rules = []
    for i in range(per_kind):
        rules += [
            {"id": f"avg_{i}", "kind": "aggregate", "function": "avg", "field": "sensor_freq",
             "window": f"{5 + i} minutes", "slide": "1 minute", "op": ">", "value": 60.0},
            {"id": f"spread_{i}", "kind": "aggregate", "function": "stddev", "field": "sensor_freq",
             "window": f"{60 + 30 * i} seconds", "op": ">", "value": 40.0},
            {"id": f"spikes_{i}", "kind": "pattern", "within": f"{2 + i} minutes",
             "steps": [{"when": spike}, {"when": low, "not": True}, {"when": spike}]},
            {"id": f"lows_then_spike_{i}", "kind": "pattern", "within": f"{60 + i} seconds",
             "steps": [{"when": low, "times": {"min": 2}}, {"when": spike}]},
            {"id": f"odd_{i}", "kind": "count", "when": {"any": [low, {"not": {"field": "sensor_freq", "op": "<",
             "value": 99.0 - i}}]}, "at_least": 3, "within": "1 minute"},
        ]  # fmt: skip
    return parse_rules({"rules": rules})


def read_bronze(spark, settings: Settings, files: int = 0, fields: list[str] | None = None):
    """``bronze_events`` as the queries that read it take it (:func:`sensorcep.pipeline.ingest.bronze_event_stream`,
    with the extra ``fields``), ``files`` files a micro-batch (Delta's ``maxFilesPerTrigger``; 0: the source's
    default)."""
    from sensorcep.pipeline import ingest

    if not files:
        return ingest.bronze_event_stream(spark, settings, fields)
    table = ingest.Tables(spark, settings)["bronze_events"]
    reader = spark.readStream.format("delta").option("maxFilesPerTrigger", files)
    stream = reader.table(table.identifier) if table.identifier else reader.load(table.location)
    return stream.select(*ingest.EVENT_FIELDS, *(fields or []))


def empty_rewritten(spark, settings: Settings, query: str) -> None:
    """Empty the tables ``query`` (its name in the registry) rewrites from its input's start, so that another run of it
    may start on a new checkpoint of its own (the query refuses one while they hold rows)."""
    from sensorcep.io.lake import Tables
    from sensorcep.pipeline import registry

    lake = Tables(spark, settings)
    for table in registry.query(query).rewritten_from_start:
        if lake.exists(table):
            spark.sql(f"DELETE FROM {lake[table].sql_name}")


# ------------------------------------------------------------------------------ Kafka offsets
def kafka_consumer(bootstrap: str, config: Mapping[str, object] | None = None) -> Consumer:
    """A confluent-kafka consumer in a group of its own that commits nothing: it reads where it is assigned, and can
    ask for a topic's end offsets. ``config``: more of librdkafka's settings."""
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{run_id()}", "enable.auto.commit": False, **(config or {})}
    )


def read_from_start(consumer: Consumer, topic: str) -> None:
    """Assign every partition of ``topic`` to ``consumer``, from its first offset."""
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])


def topic_end(consumer: Consumer, topic: str) -> int:
    """The end offsets of ``topic`` summed over its partitions: every record produced to it so far."""
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    return sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in partitions
    )


def source_offsets(value) -> dict:
    """A source progress' offsets (a Kafka source's are {topic: {partition: offset}}), whichever form the progress
    gives them in: a dict, JSON text, or a Python repr (``None`` for a query's first batch: the earliest offsets)."""
    if not value:
        return {}
    if isinstance(value, dict):
        return value
    try:
        offsets = json.loads(value)
    except json.JSONDecodeError:
        offsets = ast.literal_eval(value)
    return offsets or {}


# ------------------------------------------------------------------------------ progress and batch statistics
def progress(query: StreamingQuery, since: datetime | None = None, ended: bool = False) -> list[dict]:
    """A query's recent progress reports (Spark keeps the last 100) as plain dicts, from their JSON; ``since``: only
    those that started at or after that moment (an aware datetime); ``ended``: those that ended at or after it (a
    minute's batches: one that started in the minute before and ran past its end is reported, and counted, once it
    ends)."""
    reports = [json.loads(p.json) for p in query.recentProgress]
    if since is None:
        return reports

    def moment(p: dict) -> datetime:
        started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        return started + timedelta(milliseconds=p.get("batchDuration", 0)) if ended else started

    return [p for p in reports if moment(p) >= since]


def input_batches(query: StreamingQuery | None) -> list[dict]:
    """A query's micro-batches that read input (its progress reports with input rows); none for no query."""
    return [p for p in progress(query) if p["numInputRows"]] if query is not None else []


def run_to_end(run: Callable[[], StreamingQuery | None]) -> tuple[float, StreamingQuery | None, list[dict]]:
    """Time ``run``, which runs a query to its end (``availableNow``) and returns it, or None when it started none:
    the wall-clock seconds, the query, and its micro-batches that read input."""
    started = time.perf_counter()
    query = run()
    elapsed = time.perf_counter() - started
    return elapsed, query, input_batches(query)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100, linear between the closest values) of ``values``; NaN when there are none."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def batch_stats(durations_ms: Sequence[float]) -> dict[str, float]:
    """How long a query's micro-batches took: their count, median, p95 and longest (ms; NaN when there are none)."""
    return {
        "batches": len(durations_ms),
        "p50_ms": percentile(durations_ms, 50),
        "p95_ms": percentile(durations_ms, 95),
        "max_ms": float(max(durations_ms)) if len(durations_ms) else float("nan"),
    }


# ------------------------------------------------------------------------------ CPU
#: the parts of the setup that do Spark's work: what a query is charged with
SPARK_PARTS = ("spark JVM", "python workers", "driver")


#: HotSpot's threads of two kinds by their names (``/proc/<pid>/task/<tid>/comm``, cut at 15 characters): the JIT
#: compilers, and the garbage collector's threads (G1's, and the parallel collector's workers; the serial collector
#: runs in the VM thread, which is not counted)
JVM_THREAD_KINDS = {"JIT compilers": ("C1 CompilerThre", "C2 CompilerThre"), "GC": ("GC Thread", "G1 ")}


def jvm_thread_seconds(pid: int) -> dict[tuple[int, str], float]:
    """CPU seconds each thread of the process has used so far, for its threads of a kind in :data:`JVM_THREAD_KINDS`,
    by (thread id, kind) (Linux's /proc; elsewhere none). A thread that ended is not there: HotSpot adds and removes
    compiler threads as its queue grows, so a kind's figure is a lower bound."""
    found: dict[tuple[int, str], float] = {}
    tasks = Path(f"/proc/{pid}/task")
    for thread in tasks.iterdir() if tasks.is_dir() else ():
        try:
            name = (thread / "comm").read_text().rstrip("\n")
            kind = next((k for k, prefixes in JVM_THREAD_KINDS.items() if name.startswith(prefixes)), None)
            if kind is not None:
                fields = (thread / "stat").read_text().rsplit(")", 1)[1].split()
                found[(int(thread.name), kind)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:  # the thread ended between the listing and the reading
            continue
    return found


def _is_broker(process: psutil.Process) -> bool:
    try:
        return "kafka.Kafka" in (process.cmdline() or [])
    except psutil.Error:
        return False


class CpuMeter:
    """CPU used since the last reading, per part of the setup (psutil; the processes are found afresh at each reading):
    the Spark JVM, its Python workers (Kafka reads, the stateful processors), the driver (this process: foreachBatch
    code, Delta commits), the producer (when its pid is given) and the broker.

    Each process is counted once: its own CPU time while it runs and, once it has exited and its parent has reaped it,
    what the parent's reaped-children time grew by beyond what was already counted of it (in the parent's part). So a
    Python worker that ends between two readings is neither lost nor counted twice. A parent that ignores SIGCHLD
    (PySpark's worker daemon) has its children reaped by the kernel, which adds nothing to its reaped-children time:
    what was counted of them stays, and no more than that time grew by is taken back. The broker's JVM is never the
    Spark JVM, even when this process started it (``broker.up``). Of the Spark JVM's time, it also tells its JIT
    compilers' and its garbage collector's (:meth:`spark_jvm_thread_cores`).
    """

    def __init__(self, producer_pid: int | None = None):
        self.producer_pid = producer_pid
        # pid: (CPU seconds counted so far, its parent's pid, its reaped children's CPU seconds)
        self.counted: dict[int, tuple[float, int, float]] = {}
        # the Spark JVM's threads of a kind (:data:`JVM_THREAD_KINDS`): (tid, kind): CPU seconds counted so far; and
        # what each kind used between the last two readings
        self.threads_counted: dict[tuple[int, str], float] = {}
        self.spark_jvm_threads: dict[str, float] = {}
        self.at, self.interval = time.monotonic(), 0.0
        self.read()

    def parts(self) -> dict[str, list[psutil.Process]]:
        me = psutil.Process()
        jvms = [c for c in me.children() if c.name() == "java" and not _is_broker(c)]
        parts = {
            "spark JVM": jvms,
            "python workers": [d for j in jvms for d in j.children(recursive=True)],
            "driver": [me],
        }
        if self.producer_pid is not None:
            parts["producer"] = [p for p in psutil.process_iter() if p.pid == self.producer_pid]  # none once it ended
        parts["broker"] = [p for p in psutil.process_iter() if _is_broker(p)]
        return parts

    def read(self) -> dict[str, float]:
        """CPU seconds (user + system) per part since the last reading; the first reading: since each started."""
        now, used, counted, part_of = time.monotonic(), {}, {}, {}
        parts = self.parts()
        for part, processes in parts.items():
            used[part] = 0.0
            for process in processes:
                try:
                    with process.oneshot():
                        t, parent = process.cpu_times(), process.ppid()
                except psutil.NoSuchProcess:
                    continue
                reaped = t.children_user + t.children_system
                seconds = t.user + t.system + reaped
                used[part] += seconds - self.counted.get(process.pid, (0.0, 0, 0.0))[0]
                counted[process.pid], part_of[process.pid] = (seconds, parent, reaped), part
        gone: dict[int, float] = {}  # parent: what was counted of its children that ended since the last reading
        for pid, (seconds, parent, _) in self.counted.items():
            if pid not in counted and parent in part_of:
                gone[parent] = gone.get(parent, 0.0) + seconds
        for parent, seconds in gone.items():  # reaped: the parent's count holds them again, as far as it grew
            grew = counted[parent][2] - self.counted.get(parent, (0.0, 0, 0.0))[2]
            used[part_of[parent]] -= min(seconds, max(grew, 0.0))
        threads = {key: s for jvm in parts.get("spark JVM", ()) for key, s in jvm_thread_seconds(jvm.pid).items()}
        self.spark_jvm_threads = {kind: 0.0 for kind in JVM_THREAD_KINDS}
        for (tid, kind), seconds in threads.items():  # a thread that ended since the last reading: its time is lost
            self.spark_jvm_threads[kind] += seconds - self.threads_counted.get((tid, kind), 0.0)
        self.threads_counted = threads
        self.counted, self.interval, self.at = counted, now - self.at, now
        return used

    def read_cores(self) -> dict[str, float]:
        """CPU cores per part since the last reading: its CPU seconds over the wall-clock seconds between readings."""
        used = self.read()
        return {part: seconds / self.interval for part, seconds in used.items()}

    def spark_jvm_thread_cores(self) -> dict[str, float]:
        """Of the Spark JVM's cores between the last two readings: its JIT compilers' and its garbage collector's."""
        return {kind: seconds / self.interval for kind, seconds in self.spark_jvm_threads.items()}

    def read_spark(self) -> float:
        """CPU seconds of Spark's parts alone (:data:`SPARK_PARTS`) since the last reading."""
        used = self.read()
        return sum(used[part] for part in SPARK_PARTS)


# ------------------------------------------------------------------------------ results
#: the environment variable that sends :func:`record`'s files to another folder than benchmarks/results (tests)
RESULTS_ENV = "SENSORCEP_BENCH_RESULTS"

#: a figure's name: ``[group: ]subject (unit)``; a ratio compares figures of one group and unit
FIGURE_NAME = re.compile(r"^(?:(?P<group>.*): )?(?P<subject>.+?) \((?P<unit>[^()]+)\)$")


def results_folder() -> Path:
    """Where :func:`record` writes: ``$SENSORCEP_BENCH_RESULTS`` if set, else ``benchmarks/results``."""
    return Path(os.environ.get(RESULTS_ENV) or Path(__file__).resolve().with_name("results"))


def record(
    script: str,
    figures: Mapping[str, object],
    table: pd.DataFrame | Sequence[Mapping[str, object]] | None = None,
    baseline: str | None = None,
    folder: Path | str | None = None,
) -> tuple[Path, Path]:
    """Write what a run printed to ``<folder>/<script>.json`` and ``<folder>/<script>.md`` (``folder``: default
    :func:`results_folder`), so docs link to or include measured figures instead of pasted ones.

    ``figures``: the run's figures by name, each named ``[group: ]subject (unit)`` when it has a unit (``ingest
    (events/s)``, ``dense 10,000 rocksdb: builtin (p50 ms)``). ``table``: its rows, if it prints a table.
    ``baseline``: the subject measured in the same run that the others compare with; every figure with a baseline
    figure of the same group and unit gets ``ratios[name] = figure / baseline figure``.

    The JSON also holds the command line that produced the figures, the date and the machine (cores, memory,
    platform); the Markdown file is a table of the figures (with the ratios) under a line saying the same, then the
    rows of ``table``. Both are rewritten by every run: never edited by hand.
    """
    folder = Path(folder) if folder is not None else results_folder()
    folder.mkdir(parents=True, exist_ok=True)
    figures = {str(name): _plain(value) for name, value in figures.items()}
    rows = _plain(table.to_dict("records") if hasattr(table, "to_dict") else list(table or []))
    result = {
        "script": script,
        "command": _command(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "figures": figures,
        "baseline": baseline,
        "ratios": ratios(figures, baseline),
        "table": rows or None,
    }
    json_path, md_path = folder / f"{script}.json", folder / f"{script}.md"
    json_path.write_text(json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    md_path.write_text(_markdown(result))
    print(f"\nresults: {json_path} and {md_path.name}")
    return json_path, md_path


def ratios(figures: Mapping[str, object], baseline: str | None) -> dict[str, float | None]:
    """Each figure against the ``baseline`` figure of its group and unit (figure / baseline; None when the baseline is
    zero or missing a value). Figures without a unit, or without a baseline in their group, have none."""
    if baseline is None:
        return {}
    named = {name: FIGURE_NAME.match(name) for name in figures}
    bases = {(m["group"], m["unit"]): figures[name] for name, m in named.items() if m and m["subject"] == baseline}
    out = {}
    for name, m in named.items():
        if m and m["subject"] != baseline and (m["group"], m["unit"]) in bases:
            value, base = figures[name], bases[m["group"], m["unit"]]
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, base))
            out[name] = value / base if numbers and base else None
    return out


def _plain(value):
    """A value JSON holds as it is: numpy scalars and arrays as Python numbers and lists, NaN and infinity as null
    (valid JSON), dates as ISO text, anything else as its text."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy: a scalar's tolist() is the Python number
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _command() -> str:
    """The command line that ran this process, with the interpreter and script relative to the repository when they
    are inside it (``.venv/bin/python benchmarks/ingest.py --events 1000000``)."""

    def relative(path: str) -> str:
        absolute = Path(os.path.abspath(path))  # not resolved: a venv's python links to the system's
        return str(absolute.relative_to(ROOT)) if absolute.is_relative_to(ROOT) else path

    return shlex.join([relative(sys.executable), relative(sys.argv[0]), *sys.argv[1:]])


def _machine() -> dict[str, object]:
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _cell(value) -> str:
    """A value in a Markdown table: numbers with thousands separators and about three significant figures."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 or value.is_integer() else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", "<br>")


def _markdown(result: dict) -> str:
    machine = result["machine"]
    lines = [
        f"# {result['script']}",
        "",
        f"`{result['command']}` on {result['date']}, {machine['cores']} cores, {machine['memory_gb']} GB "
        f"({machine['platform']}). Written by the script: do not edit.",
        "",
    ]
    baseline, found = result["baseline"], result["ratios"]
    if baseline is None:
        lines += ["| figure | value |", "|---|---:|"]
        lines += [f"| {_cell(name)} | {_cell(value)} |" for name, value in result["figures"].items()]
    else:
        lines += [f"| figure | value | / {_cell(baseline)} |", "|---|---:|---:|"]
        for name, value in result["figures"].items():
            ratio = f"{found[name]:.3g}x" if found.get(name) is not None else ""
            lines.append(f"| {_cell(name)} | {_cell(value)} | {ratio} |")
    if result["table"]:
        columns = list(dict.fromkeys(column for row in result["table"] for column in row))
        lines += ["", "| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in result["table"]]
    return "\n".join(lines) + "\n"
