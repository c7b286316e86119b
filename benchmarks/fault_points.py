"""What one kill point of the fault test costs: the floor under ``tests/fault``'s share of ``make extended``.

    .venv/bin/python benchmarks/fault_points.py [--passes 2] [--points P1,P2,...] [--generated-code]

The suite's fault run (``tests/fault/test_nemesis.py``) visits each of its kill points (8 in ``make extended``, 26 in
``make nightly``: decisions 0059, 0057) in a run of the always-on job of its own: a fresh process group (Python, a Spark
JVM, Python workers) that starts the queries reaching the point (``support.nemesis.queries_for``), runs to it and is
killed there (decision 0038). This script runs the fault test's machinery (its fleet, its own broker, its job driver)
over one point per set of queries the suite's plan starts, ``--passes`` times, and measures each point's run: wall
seconds from start to kill, the machine's busy core seconds and how they split between the processes (polled every 0.2
s: a killed process's last fraction of a second is lost, and so is most of the short-lived launcher JVM: the parts add
up to a little less than the machine), and then prices the suite's whole plan at those medians, ``make extended``'s and
``make nightly``'s.

The baseline, in the same run: a bare cold start in a fresh process (a local session, a first Delta write and read of
a one-row table, no query, no broker), what any fresh run pays before its own work, so a point's ratio says how many
bare starts its run costs. The JVMs run with the suite's options (``tests/support/profiles.py``: the first JIT tier,
the serial collector, interpreted expressions); ``--generated-code`` drops the last, as ``make nightly`` does. The
first run creates the tables and topics and is not counted. Nothing else should run meanwhile (the broker of the
fault test is its own, on port 19097).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from harness import ROOT, argument_parser, record

from sensorcep.local import broker


def _tests_support() -> None:
    """The fault test's machinery, ``tests/support``, importable as the package ``support`` (as the tests import it)."""
    folder = ROOT / "tests" / "support"
    spec = importlib.util.spec_from_file_location(
        "support", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    sys.modules["support"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["support"])


_tests_support()
from support.nemesis import Action, Nemesis, queries_for, suite_plan  # noqa: E402
from support.profiles import BROKER_JVM_OPTIONS, INTERPRETED, TEST_JVM_OPTIONS  # noqa: E402

#: one point per set of queries the suite's plan starts (its first non-empty write: the shortest run to that set)
POINTS = [
    "before:ingest:bronze_events:1",
    "before:sampling:sensor_samples:1",
    "before:device_activity:device_status:1",
    "before:stateful_rules:device_baselines:1",
    "before:anomalies:anomalies:1",
    "before:alert_lifecycle:alert_events:1",
    "delivery:notifier:1",
]
#: the first run: topics and tables created, bronze written (not counted)
SETUP = "after:ingest:bronze_events:1"
BROKER = "127.0.0.1:19097"
SEED = 20261126  # the suite's
#: what a process is, by its command line: the parts a run's CPU splits into
KINDS = (
    ("launcher JVM", "org.apache.spark.launcher.Main"),
    ("Spark JVM", "org.apache.spark.deploy.SparkSubmit"),
    # the Spark JVM's process before it execs java: the spark-submit script, whose arguments carry the session's confs
    # (the Python workers' daemon module among them)
    ("Spark JVM", "bin/spark-submit"),
    ("broker JVM", "kafka.Kafka"),
    ("job's Python", "nemesis_driver.py"),
    ("Python workers", "pyspark.worker"),
    ("Python workers", "low_priority_daemon"),
    ("Python workers", "transform_with_state"),
)
PARTS = ("Spark JVM", "job's Python", "Python workers", "launcher JVM", "broker JVM", "the rest")
BASELINE = "a bare cold start"
BARE = """
import sys
from sensorcep.runtime import get_spark
spark = get_spark()
spark.createDataFrame([("d1", 1.0)], "device_id string, sensor_freq double").write.format("delta").save(sys.argv[1])
spark.read.format("delta").load(sys.argv[1]).collect()
"""


def _median(values) -> float:
    return round(statistics.median(values), 2)


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot: every core, every process, the kernel's work for them."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


def kind_of(command: list[str]) -> str:
    line = " ".join(command)
    return next((kind for kind, mark in KINDS if mark in line), "the rest")


class ProcessMeter:
    """CPU seconds per kind of process (:data:`KINDS`) while it runs, polled every 0.2 s from a thread: each process
    counted from its value at :meth:`start` (0 for one started since) to the last value seen. Not the harness'
    ``CpuMeter``, which counts this process's children and what their parents reaped: a point's run is killed with
    its whole process group, so nobody reaps it and only polling sees what it used."""

    def __init__(self):
        self.first: dict[tuple[int, float], float] = {}
        self.last: dict[tuple[int, float], tuple[float, str]] = {}
        self.running = False
        self.poller = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        for process in psutil.process_iter(["pid", "create_time", "cmdline", "cpu_times"]):
            info = process.info
            if info["cpu_times"] is None:
                continue
            key = (info["pid"], info["create_time"])
            seconds = info["cpu_times"].user + info["cpu_times"].system
            # what the process is now: a process that execs another program keeps its pid (the spark-submit script
            # becomes the Spark JVM); a killed one's command line reads empty, and keeps the kind last seen
            command = info["cmdline"] or []
            kind = kind_of(command) if command or key not in self.last else self.last[key][1]
            self.last[key] = (seconds, kind)

    def start(self) -> ProcessMeter:
        self.last.clear()
        self._poll()
        self.first = {key: seconds for key, (seconds, _) in self.last.items()}
        self.running = True
        self.poller.start()
        return self

    def _run(self) -> None:
        while self.running:
            time.sleep(0.2)  # sampling each process's CPU time: a killed one cannot be asked afterwards
            self._poll()

    def stop(self) -> dict[str, float]:
        self.running = False
        self.poller.join()
        self._poll()
        parts = dict.fromkeys(PARTS, 0.0)
        for key, (seconds, kind) in self.last.items():
            parts[kind] += seconds - self.first.get(key, 0.0)
        return parts


class TimedNemesis(Nemesis):
    """The fault test's nemesis, each point's run measured (:meth:`_point` is one run, from its start to its kill)."""

    rows: list[dict]

    def _point(self, action: Action, attempt: int = 1) -> str:
        if attempt > 1:  # a run tried again: part of the first attempt's measurement
            return super()._point(action, attempt)
        meter, busy, started = ProcessMeter().start(), busy_seconds(), time.monotonic()
        outcome = super()._point(action, attempt)
        wall, machine, parts = time.monotonic() - started, busy_seconds() - busy, meter.stop()
        self.rows.append(
            {
                "point": action.arg,
                "queries": "+".join(queries_for(action.arg)),
                "wall (s)": round(wall, 1),
                "machine (core-s)": round(machine, 1),
                **{f"{part} (core-s)": round(seconds, 1) for part, seconds in parts.items()},
                "outcome": outcome,
            }
        )
        print(f"  {action.arg:44} {wall:5.1f} s {machine:5.1f} core-s  {outcome}", flush=True)
        return outcome


def bare_start(folder: Path, n: int) -> dict:
    """:data:`BARE` in a fresh process: its wall seconds and the machine's busy core seconds."""
    busy, started = busy_seconds(), time.monotonic()
    subprocess.run([sys.executable, "-c", BARE, str(folder / f"one_row_{n}")], check=True, capture_output=True)
    return {"wall (s)": round(time.monotonic() - started, 1), "machine (core-s)": round(busy_seconds() - busy, 1)}


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--passes", type=int, default=2, help="times each point is visited (default 2)")
    parser.add_argument("--points", default=",".join(POINTS), help="the kill points, comma-separated")
    parser.add_argument("--generated-code", action="store_true", help="without the suite's interpreted mode")
    args = parser.parse_args()
    points = args.points.split(",")
    jvm = TEST_JVM_OPTIONS if args.generated_code else f"{TEST_JVM_OPTIONS} {INTERPRETED}"
    os.environ |= {"SENSORCEP_JVM_OPTIONS": jvm, "SENSORCEP_BROKER_JVM_OPTIONS": BROKER_JVM_OPTIONS}
    os.environ.setdefault("SENSORCEP_DRIVER_MEMORY", "3g")  # the suite's
    print(f"JVM options: {jvm}", flush=True)

    with tempfile.TemporaryDirectory(prefix="sensorcep-bench-fault-points-") as scratch:
        folder = Path(scratch)
        bare = [bare_start(folder, n) for n in range(2)]
        print(f"  {BASELINE}: {bare}", flush=True)
        actions = [Action("point", point) for point in [SETUP, *points * args.passes]]
        nemesis = TimedNemesis(
            SEED, actions, folder / "nemesis", BROKER, log=lambda line: None, per_chunk=20, whole_job=False, drain=False
        )
        nemesis.rows = []
        try:
            nemesis.run()
        finally:
            broker.down(nemesis.broker_dir)
        bare.append(bare_start(folder, 2))
        print(f"  {BASELINE} again: {bare[-1]}", flush=True)

    rows = nemesis.rows[1:]  # the setup run creates the tables
    if nemesis.missed:
        raise SystemExit(f"points not reached, so not measured: {', '.join(nemesis.missed)}")
    figures: dict[str, object] = {
        f"{BASELINE} (core-s)": _median(b["machine (core-s)"] for b in bare),
        f"{BASELINE}: wall (s)": _median(b["wall (s)"] for b in bare),
        "a point's run (core-s)": _median(r["machine (core-s)"] for r in rows),
        "a point's run: wall (s)": _median(r["wall (s)"] for r in rows),
    }
    for part in PARTS:
        figures[f"a point's run: {part} (core-s)"] = _median(r[f"{part} (core-s)"] for r in rows)
    by_queries: dict[str, list[dict]] = {}
    for row in rows:
        by_queries.setdefault(row["queries"], []).append(row)
    for queries, runs in by_queries.items():
        figures[f"{queries} (core-s)"] = _median(r["machine (core-s)"] for r in runs)
    # the suite's plan priced at these medians: each of its points at its set of queries' median (or the overall one)
    overall = figures["a point's run (core-s)"]
    for make, every_table in (("make extended", False), ("make nightly", True)):
        plan = [a.arg for a in suite_plan(SEED, every_table) if a.kind == "point"]
        priced = [figures.get(f"{'+'.join(queries_for(point))} (core-s)", overall) for point in plan]
        figures[f"{make}'s {len(plan)} point runs, priced (core-s)"] = round(sum(priced), 1)
    for name, value in figures.items():
        print(f"{name:60} {value}")
    record("fault_points", figures, table=rows, baseline=BASELINE)


if __name__ == "__main__":
    main()
