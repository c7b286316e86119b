"""Sustained load: a steady event rate through every query of the pipeline for N minutes, reported per minute.

    make broker-up
    .venv/bin/python benchmarks/soak.py                              # 10 minutes at 4,000 events/s
    .venv/bin/python benchmarks/soak.py --minutes 3 --rate 2000      # a shorter look

A producer process sends ``--rate`` events/s (current event times, 1,000 devices, 1% anomalies) to a fresh topic
while the ingest, sampling, device-activity, alert and anomalies-record queries run continuously in one Spark
application (their FAIR pools; ``--alerts-trigger`` for alerts, ``--trigger`` for the others). Every minute it
prints, per query: input rate vs processing rate over that minute (offsets produced / processed per second of wall
clock, so a query that cannot keep up shows a lower number), p95 batch time, state rows, and how far behind the
topic's end the query is (lag, in rows of its own source and in seconds of that source's mean rate: events for the
readers of the events topic and bronze, alerts for the alerts topic's); plus the live JVM heap, the Python workers' own
memory and the CPU cores each part uses (and of the Spark JVM's, how many its JIT compilers and its garbage collector
took: a JVM started cold still compiles Spark's code minutes into the run). At the end: whether state rows, the
live heap and the workers' memory stayed flat (windows are freed, nothing piles up in a reused worker) and every
query kept up (its median lag did not grow from the first half to the second by more than a quarter and two of
its trigger intervals). The minutes are the producer's, from its start to its stop. After the producer stops: how
long each query takes to process the whole topic, counted from the
producer's last event (a query already caught up by then drains in about 0 s; one whose source another query writes
is caught up only once its writers are), and whether the rate was held by issue 43's measure (:func:`held`). The run's
topics are deleted at the end.

Measure on a freshly started broker with nothing else running (``make broker-down``, ``rm -rf .broker``,
``make broker-up``): the machine has 2 cores; the producer and the broker take about a sixth of one.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from datetime import datetime

import psutil
from harness import (
    ANOMALY_RULE,
    ROUTES_SCOPE,
    SPARK_PARTS,
    STEADY_DEVICES,
    Arrivals,
    CpuMeter,
    argument_parser,
    kafka_consumer,
    new_kind_rule_set,
    percentile,
    progress,
    record,
    scratch_run,
    source_offsets,
    start_producer,
    stateful_rule_set,
    topic_end,
)

from sensorcep.io.lake import Tables
from sensorcep.local.simulator import write_devices_table
from sensorcep.pipeline import registry
from sensorcep.pipeline.ingest import wait_for_bronze
from sensorcep.rules import catalog
from sensorcep.rules.model import load_rules, packaged_examples, parse_rules
from sensorcep.runtime import get_spark
from sensorcep.settings import parse_duration, parse_trigger

#: the declared queries (the registry); without acks, every alert's incident escalates (the lifecycle's worst case)
STARTERS = registry.registry()


def processed_end(report: dict | None) -> int:
    """The Kafka offsets a query's last progress had read to, summed over its Kafka sources and their partitions."""
    total = 0
    for source in (report or {}).get("sources", []):
        end = source_offsets(source.get("endOffset"))
        if end and all(isinstance(parts, dict) for parts in end.values()):  # {topic: {partition: offset}}: Kafka
            total += sum(int(o) for parts in end.values() for o in parts.values())
    return total


class DeltaReaders:
    """The queries that read a Delta table as a stream (by query name: the table), and how far each has read.

    Counted in the table's rows by version (its history's ``numOutputRows``): a query has read the versions before the
    one its last offset points at. Not its input rows: a stream's filter may skip a version's files by their
    statistics (the notifier reads only the transitions it tells of, and most versions of ``alert_events`` hold none),
    and Spark keeps only the last 100 progress reports."""

    def __init__(self, spark, settings, names):
        self.spark, self.lake = spark, Tables(spark, settings)
        self.tables = {settings.query_name(n): "bronze_events" for n in names if STARTERS[n].reads_bronze}
        if "notifier" in names:
            self.tables[settings.query_name("notifier")] = "alert_events"

    def __contains__(self, query_name: str) -> bool:
        return query_name in self.tables

    def snapshot(self) -> dict[str, dict[int, int]]:
        """Each table read, now: the rows each of its versions added."""
        return {table: self.rows_by_version(table) for table in set(self.tables.values())}

    def rows_by_version(self, table: str) -> dict[int, int]:
        history = self.spark.sql(f"DESCRIBE HISTORY {self.lake[table].sql_name}")
        return {
            row.version: int((row.operationMetrics or {}).get("numOutputRows", 0))
            for row in history.select("version", "operationMetrics").collect()
        }

    def ends(self, snapshot: dict[str, dict[int, int]]) -> dict[str, int]:
        """Each reader's table's rows in ``snapshot``."""
        return {name: sum(snapshot[table].values()) for name, table in self.tables.items()}

    def read(self, query, snapshot: dict[str, dict[int, int]]) -> int:
        """The rows of the versions in ``snapshot`` the query has read past."""
        report = json.loads(query.lastProgress.json) if query.lastProgress else {}
        to = max(
            (
                int(source_offsets(s.get("endOffset")).get("reservoirVersion", 0))
                for s in report.get("sources", [])
                if s["description"].startswith("DeltaSource")
            ),
            default=0,
        )
        return sum(n for version, n in snapshot[self.tables[query.name]].items() if version < to)


def minute_row(
    query,
    since: datetime,
    end_offset: int,
    processed_before: int,
    rate: float,
    minute: int,
    rows_read: int | None = None,
    seconds: float = 60.0,
) -> dict:
    """One query's minute: rates from offsets (exact; ``rows_read``: the rows a query reading a Delta table has read,
    whose ``end_offset`` is then the table's row count), batch times and state from its progress events. ``rate``: the
    rows per second the query's own source has grown by since the run began (events for the events topic's readers,
    alerts for the alerts topic's, rows for a table's): its lag in seconds is its lag in rows over that rate.
    ``seconds``: how long the minute was (the first two are shorter or longer while the queries start)."""
    batches = progress(query)
    recent = progress(query, since, ended=True)  # a batch longer than the minute is counted in the minute it ends
    durations = [p["batchDuration"] for p in recent if p["numInputRows"] > 0]
    last = batches[-1] if batches else None
    state = sum(o.get("numRowsTotal", 0) for o in (last or {}).get("stateOperators", [])) if last else 0
    processed = processed_end(last) if rows_read is None else rows_read
    lag = max(0, end_offset - processed)
    return {
        "minute": minute,
        "query": query.name,
        "batches": len(recent),
        "processed_end": processed,
        "processed_per_s": (processed - processed_before) / seconds,
        "batch_p95_ms": percentile(durations, 95) if durations else 0,
        "state_rows": state,
        "lag_events": lag,
        "lag_s": lag / rate if rate > 0 else 0.0,  # no row yet, no lag
    }


#: the real-time alert query's batch length in a soak: its lag is seen once per batch
REALTIME_REPORT_EVERY = "30 seconds"


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=4_000, help="events per second")
    parser.add_argument("--trigger", default="10 seconds", help="the micro-batch queries' trigger (`trigger`)")
    parser.add_argument(
        "--records-trigger",
        default="",
        help="the table-only queries' trigger (`records_trigger`: sampling, device activity, anomalies), when longer "
        "than --trigger; empty: --trigger (the bundle deploys `1 minute`, docs/triggers.md)",
    )
    parser.add_argument(
        "--alerts-trigger",
        default="0 seconds",
        help="alerts trigger; `realtime` runs as `realtime:30 seconds` here (a real-time batch reports its progress, "
        "and so its lag, once, at its end: 5 minutes by default)",
    )
    parser.add_argument("--drain-timeout", type=int, default=600, help="seconds to wait for every query to catch up")
    parser.add_argument(
        "--suffix",
        default="",
        help="added to the results' name (--suffix _2000: benchmarks/results/soak_2000.json), so soaks at two rates "
        "are kept side by side, for cost_model.py --soaks",
    )
    parser.add_argument(
        "--queries", default=",".join(STARTERS), help="comma-separated subset, to see what one query costs on its own"
    )
    parser.add_argument(
        "--rules",
        choices=("packaged", "examples", "v1", "v2", "all"),
        default="packaged",
        help="the rules in force beside the packaged one: none (the stateful rules query does not run), the packaged "
        "rule set's examples (examples: one rule of each kind, the group rule and a site-scoped threshold included, "
        "with extra_fields=voltage, a devices table and routes to a webhook receiver on loopback), one rule of "
        "each stateful kind of rules v1 (rate, count, absence, sequence, baseline), or rules v2's 20 (windowed "
        "aggregates, patterns, an any: count; stateful_rules.py's --set v2), or every kind (all: both, and a group "
        "rule over the packaged one, with a devices table and routes to a webhook receiver on loopback, so every "
        "query of the registry runs)",
    )
    args = parser.parse_args()
    unknown = set(args.queries.split(",")) - set(STARTERS)
    if unknown:
        parser.error(f"unknown --queries {sorted(unknown)}; choose from {', '.join(STARTERS)}")

    if args.alerts_trigger.strip() == "realtime":
        args.alerts_trigger = f"realtime:{REALTIME_REPORT_EVERY}"
    with scratch_run(
        "soak",
        ("events", "alerts", "acks"),  # acks: none are sent
        start_broker=False,
        trigger=args.trigger,
        records_trigger=args.records_trigger,
        alerts_trigger=args.alerts_trigger,
        max_offsets_per_trigger=0,
    ) as settings:
        figures, rows = soak(args, settings)
    record(f"soak{args.suffix}", figures, rows)


#: ``--rules all``'s group rule: three devices of one site with a negative frequency within 10 minutes
GROUP_RULE = {"id": "site_negative", "kind": "group", "rule": ANOMALY_RULE, "by": "site", "at_least": 3,
              "within": "10 minutes"}  # fmt: skip


def every_query(spark, settings):
    """What the group rules and the notifier need to run: the steady fleet's devices table (site, sensor type) and
    routes to a webhook receiver on loopback. Returns the settings with the routes, and the receiver."""
    write_devices_table(settings, STEADY_DEVICES, seed=1)
    receiver = Arrivals()
    routes = receiver.routes(settings.base_path, "rule_id, site", "10 seconds")  # a message per rule and site
    return settings.replace(routes_file=routes, routes_secret_scope=ROUTES_SCOPE), receiver


def soak(args, settings) -> tuple[dict, list[dict]]:
    """Run it and print each minute and the verdict; returns the figures (the verdict, the mean CPU cores per part,
    the drain times) and the minutes' rows."""
    spark = get_spark()
    jvm = spark.sparkContext._jvm
    extra = {
        "packaged": list,
        "v1": lambda: stateful_rule_set(1),
        "v2": new_kind_rule_set,
        "examples": packaged_examples,
        "all": lambda: stateful_rule_set(1) + new_kind_rule_set() + parse_rules({"rules": [GROUP_RULE]}),
    }[args.rules]()
    receiver = None
    if args.rules in ("examples", "all"):  # the group rule groups by site, and the notifier tells a receiver
        settings, receiver = every_query(spark, settings)
    if args.rules == "examples":  # the brownout example reads voltage (the producer sends none: it is never met)
        settings = settings.replace(extra_fields="voltage")
    catalog.apply_rules(spark, settings, [*load_rules(), *extra])
    offsets = kafka_consumer(settings.kafka_bootstrap_servers)
    producer, out = start_producer(settings, args.rate, args.minutes * 60)
    # the minutes are the producer's: counted from its start (to a spawned process's start-up, a second or two), so the
    # last one ends as it stops sending; the queries start inside minute 1 (bronze's readers once ingest has created
    # bronze), which the verdict leaves out with minute 2 as warm-up
    started = time.monotonic()
    queries = []
    for name in args.queries.split(","):  # in pipeline order: a bronze reader starts once ingest has created bronze
        if STARTERS[name].reads_bronze:
            wait_for_bronze(spark, settings)
        started_query = STARTERS[name].start(spark, settings, wait=False)
        if started_query is None:
            print(f"{name}: not started (nothing to do: no rule of its kinds in force)", flush=True)
            continue
        queries.append(started_query)
    readers = DeltaReaders(spark, settings, args.queries.split(","))
    cpu = CpuMeter(producer.pid)
    print(
        f"soak: {args.rate:,} events/s for {args.minutes} min; trigger {args.trigger}, "
        f"records {args.records_trigger or args.trigger}, alerts {args.alerts_trigger}; "
        f"rules {args.rules} ({len(extra)} beside the packaged); "
        f"topic {settings.events_topic}",
        flush=True,
    )
    print(
        f"{'min':>3} {'query':16} {'batches':>7} {'in/s':>7} {'processed/s':>11} {'p95 ms':>7} {'state rows':>10} "
        f"{'lag events':>10} {'lag s':>6} {'live heap MB':>12}"
    )
    rows, heaps, worker_memory, cores, threads = [], [], [], [], []
    compiled = codegen_compilations(jvm)
    produced_before, read_before, done = 0, started, {}
    for minute in range(1, args.minutes + 1):
        since = datetime.now().astimezone()
        time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
        end = topic_end(offsets, settings.events_topic)
        now = time.monotonic()
        seconds = now - read_before  # a minute, but for the first two: the queries start inside minute 1
        ends = {name: topic_end(offsets, topic) for name, topic in source_topics(settings).items()}
        tables = readers.snapshot()
        ends.update(readers.ends(tables))
        used = live_heap_mb(jvm)
        compiled, compiled_before = codegen_compilations(jvm), compiled
        heaps.append(used)
        workers = workers_mb(cpu)
        worker_memory.append(workers)
        for query in queries:
            if query.exception() is not None:
                raise SystemExit(f"query {query.name} failed: {query.exception()}")
            source_end = ends.get(query.name, end)
            row = minute_row(
                query, since, source_end, done.get(query.name, 0), source_end / (now - started), minute,
                rows_read=readers.read(query, tables) if query.name in readers else None, seconds=seconds,
            )  # fmt: skip
            done[query.name] = row["processed_end"]
            row["input_per_s"] = (end - produced_before) / seconds
            row["live_heap_mb"] = used
            row["python_workers_mb"] = workers
            row["codegen_compilations"] = compiled - compiled_before
            rows.append(row)
            print(
                f"{minute:>3} {row['query']:16} {row['batches']:>7} {row['input_per_s']:>7,.0f} "
                f"{row['processed_per_s']:>11,.0f} {row['batch_p95_ms']:>7,.0f} {row['state_rows']:>10,} "
                f"{row['lag_events']:>10,} {row['lag_s']:>6.1f} {used:>12,.0f}",
                flush=True,
            )
        produced_before, read_before = end, now
        cores.append(cpu.read_cores())
        threads.append(cpu.spark_jvm_thread_cores())
        for row in rows[-len(queries) :]:  # the minute's rows: what the Spark JVM's JIT and collector took of it
            row.update({f"spark_{kind.split()[0].lower()}_cores": used for kind, used in threads[-1].items()})
        print(
            f"    cpu cores: {cpu_line(cores[-1])} (of the Spark JVM: "
            + ", ".join(f"{kind} {used:.2f}" for kind, used in threads[-1].items())
            + f"); Spark's code generation compiled {compiled - compiled_before:,} classes",
            flush=True,
        )
    out.get(timeout=120)  # the producer hands back its send log once it has sent its last event, before it can exit
    stopped = time.monotonic()  # the drain is counted from here
    producer.join(timeout=60)

    def source_end(name: str, tables: dict[str, dict[int, int]]) -> int:
        if name in readers:
            return readers.ends(tables)[name]
        return topic_end(offsets, source_topics(settings).get(name, settings.events_topic))

    running = {q.name for q in queries}
    upstream = {  # of each running query, the running queries that write what it reads
        q.name: [settings.query_name(u) for u in UPSTREAM.get(q.name.removesuffix(settings.query_suffix), ())]
        for q in queries
    }
    upstream = {name: [u for u in writers if u in running] for name, writers in upstream.items()}
    drained, caught_up = drain(queries, source_end, args.trigger, readers, stopped, args.drain_timeout, upstream)
    figures = {"rate (events/s)": args.rate, "minutes": args.minutes, "trigger": args.trigger}
    if args.records_trigger:
        figures["records trigger"] = args.records_trigger
    figures["alerts trigger"] = args.alerts_trigger
    figures["rules"] = args.rules
    if receiver is not None:
        figures["incidents the receiver was told of"] = len(receiver.at)
    figures.update(verdict(rows, heaps, live_heap_mb(jvm), args, report_intervals(settings)))
    figures.update(workers_verdict(worker_memory, args))
    mean = {group: statistics.mean(c[group] for c in cores) for group in cores[0]}
    steady = cores[2:] or cores  # minutes 1-2 are warm-up, as for the verdict
    figures[f"steady cpu, minutes 3-{args.minutes}: Spark (cores)"] = statistics.mean(
        sum(c[part] for part in SPARK_PARTS) for c in steady
    )
    for kind in threads[0]:  # the JIT still compiling Spark's code minutes into a run is a cold JVM's (decision 0048)
        figures[f"steady cpu, minutes 3-{args.minutes}: of the Spark JVM, {kind} (cores)"] = statistics.mean(
            t[kind] for t in (threads[2:] or threads)
        )
        figures[f"cpu, last minute: of the Spark JVM, {kind} (cores)"] = threads[-1][kind]
    print(f"  mean cpu cores over the run: {cpu_line(mean)}")
    print(drained)
    figures.update({f"mean cpu: {group} (cores)": used for group, used in mean.items()})
    figures.update({f"drain: {q.name} (s)": caught_up.get(q.name) for q in queries})  # None: did not catch up
    figures.update(held(figures, caught_up, upstream, args.trigger, report_intervals(settings)))
    for query in queries:  # stopped between batches: nothing is cancelled mid-write
        query.stop()
    offsets.close()
    return figures, rows


#: what each query reads, by the queries that write it: a query can catch up only after they have (bronze: ingest;
#: the alerts topic: the alert query, the stateful rules and the group rules; ``alert_events``: the lifecycle)
UPSTREAM = {
    "device_activity": ("ingest",),
    "sampling": ("ingest",),
    "stateful_rules": ("ingest",),
    "anomalies": ("alerts", "stateful_rules", "group_rules"),
    "alert_lifecycle": ("alerts", "stateful_rules", "group_rules"),
    "group_rules": ("alerts", "stateful_rules"),
    "notifier": ("alert_lifecycle",),
}


def report_intervals(settings) -> dict[str, int]:
    """Each query's interval between progress reports in ms: its trigger's, and for a real-time query its checkpoint
    interval (it reports progress only then, so a drain can be seen no sooner)."""
    intervals = registry.trigger_intervals(settings)
    for name, query in STARTERS.items():
        realtime = parse_trigger(query.trigger(settings)).get("realTime")
        if realtime:
            intervals[settings.query_name(name)] = int(parse_duration(realtime) * 1000)
    return intervals


def held(
    figures: dict,
    caught_up: dict[str, float],
    upstream: dict[str, list[str]],
    trigger: str,
    intervals_ms: dict[str, int],
) -> dict:
    """Issue 43's measure of a rate held, from the verdict's figures and the drain: every query kept up with state
    rows flat, the live heap and the Python workers' memory flat, and every query caught up within two of its trigger
    intervals (at least ``trigger``) of the queries it reads from catching up (``upstream``; the producer's last event
    for the events topic's readers): its next batch starts within one interval and, a query keeping up, takes at most
    one. Prints what was missed; returns each query's drain beyond its sources and the verdict."""
    found, missed = {}, []
    for key, value in figures.items():  # the verdict's yes/no figures: "<query>: kept up", "live JVM heap flat", ...
        if value is False and key.endswith(("kept up", "flat")):
            missed.append(f"not {key}")
    for name, seconds in caught_up.items():
        beyond = seconds - max((caught_up.get(u, seconds) for u in upstream.get(name, ())), default=0.0)
        allowed = 2 * max(parse_duration(trigger), intervals_ms.get(name, 0) / 1000)
        found[f"drain beyond its sources: {name} (s)"] = beyond
        if beyond > allowed:
            missed.append(f"{name} caught up {beyond:.0f} s after its sources (allowed {allowed:.0f} s)")
    for key, value in figures.items():
        if key.startswith("drain: ") and value is None:
            missed.append(f"{key.removeprefix('drain: ').removesuffix(' (s)')} did not catch up")
    found["held (issue 43's measure)"] = not missed
    print(f"  held: {'yes' if not missed else 'no: ' + '; '.join(missed)}")
    return found


def cpu_line(cores: dict[str, float]) -> str:
    return (
        " | ".join(f"{group} {used:.2f}" for group, used in cores.items())
        + f" | total {sum(cores.values()):.2f} of {os.cpu_count()}"
    )


def source_topics(settings) -> dict[str, str]:
    """Queries that read another topic than the events topic (their lag is measured against it; the lifecycle's acks
    topic is empty here)."""
    return {settings.query_name(n): settings.alerts_topic for n in ("anomalies", "alert_lifecycle", "group_rules")}


def drain(
    queries,
    produced_of,
    trigger: str,
    readers: DeltaReaders,
    stopped: float,
    timeout_s: float = 600,
    upstream: dict[str, list[str]] | None = None,
) -> tuple[str, dict[str, float]]:
    """After the producer stops (``stopped``, on the monotonic clock): how long each query takes to process the whole
    of its topic (its final lag, in time). ``produced_of(name, tables)`` is the end of that query's source now (the
    alerts topic still grows until the alert query has caught up; ``tables``: a snapshot of the tables the Delta
    readers read, taken only while one of them is still behind: a snapshot under load takes seconds, which would be
    counted as the other queries' drain). A query is caught up only once the queries that write its source
    (``upstream``, by name) are, or have stopped: until then its source still grows. Returns the line to print and
    the seconds of each query that caught up."""
    caught_up, upstream = {}, upstream or {}
    while len(caught_up) < len(queries) and time.monotonic() - stopped < timeout_s:
        # a writer that stopped (failed) writes no more: its readers are judged without it, and it is reported missing
        stopped_writers = {q.name for q in queries if not q.isActive}
        done_writers = set(caught_up) | stopped_writers
        behind = [
            q
            for q in queries
            if q.name not in caught_up and q.lastProgress and done_writers.issuperset(upstream.get(q.name, ()))
        ]
        tables = None
        for query in sorted(behind, key=lambda q: q.name in readers):  # a topic's readers first: they need no snapshot
            if query.name in readers:
                tables = readers.snapshot() if tables is None else tables
                done = readers.read(query, tables)
            else:
                done = processed_end(json.loads(query.lastProgress.json))
            if done >= produced_of(query.name, tables or {}):
                caught_up[query.name] = time.monotonic() - stopped
        time.sleep(0.5)
    missing = [q.name for q in queries if q.name not in caught_up]
    if missing:
        return f"  drain: {', '.join(missing)} did NOT process all of their topic within {timeout_s:.0f} s", caught_up
    times = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in caught_up.items())
    return (
        f"  drain: every query processed all of its topic; caught up after the producer stopped: {times} "
        f"(trigger {trigger})"
    ), caught_up


def codegen_compilations(jvm) -> int:
    """How many classes Spark's code generation has compiled in this JVM so far (its generated code is cached by its
    text: a plan whose literals change every micro-batch is compiled again every micro-batch, and its classes are
    new to the JIT)."""
    return int(jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())


def live_heap_mb(jvm, readings: int = 3) -> float:
    """JVM heap in use right after a full GC, the lowest of a few readings a second apart: a micro-batch in flight
    during one GC holds its data (hundreds of MB), which is work, not a leak."""
    runtime, used = jvm.java.lang.Runtime.getRuntime(), []
    for i in range(readings):
        if i:
            time.sleep(1)
        jvm.java.lang.System.gc()
        used.append((runtime.totalMemory() - runtime.freeMemory()) / 2**20)
    return min(used)


def workers_mb(cpu: CpuMeter) -> float:
    """The memory of the Spark JVM's Python workers, each process's own pages (USS: not those a forked worker still
    shares with its daemon), in MB."""
    total = 0
    for process in cpu.parts()["python workers"]:
        try:
            total += process.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / 2**20


def workers_verdict(memory: list[float], args) -> dict:
    """The Python workers' memory, second half vs first (as :func:`verdict` judges the heap): it must not grow."""
    half = max(3, (args.minutes + 2) // 2)
    early, late = memory[2:half], memory[half:]
    if not early or not late:
        return {}
    flat = statistics.median(late) <= 1.5 * max(early)
    print(
        f"  python workers' memory: max {max(early):,.0f} MB in minutes 3-{half}, then median "
        f"{statistics.median(late):,.0f} MB (max {max(late):,.0f}): {'flat' if flat else 'GROWING'}"
    )
    return {
        f"python workers max, minutes 3-{half} (MB)": max(early),
        f"python workers median, minutes {half + 1}-{args.minutes} (MB)": statistics.median(late),
        "python workers' memory flat": flat,
    }


def verdict(rows: list[dict], heaps: list[float], idle_heap: float, args, intervals_ms: dict[str, int]) -> dict:
    """Second half vs first half of the run (minutes 1-2 are warm-up): state rows, live heap and lag must not grow.
    Prints the verdict and returns it as figures.

    Lag is the honest "kept up" measure: a query whose lag keeps growing processes less than arrives. The lag is
    sampled at each minute's end, and the median sample of each half is compared: one minute's sample can fall in a
    burst (a reader of the alerts topic sees its writers' batches in bursts), the next just after the query caught up,
    and the median moves with neither alone. It may grow by a quarter and by two of the query's progress intervals
    (``intervals_ms``, by query name; at least ``--trigger``), the bound :func:`held` puts on its drain: between its
    batches a query is up to an interval behind, and a batch of a query that keeps up takes up to one more. A query
    that falls behind only near the end still shows in its drain.
    """
    print("\nverdict (minutes 3..h vs h+1..end):")
    half = max(3, (args.minutes + 2) // 2)
    figures: dict = {}
    for query in dict.fromkeys(r["query"] for r in rows):
        mine = [r for r in rows if r["query"] == query]
        early, late = [r for r in mine if 2 < r["minute"] <= half], [r for r in mine if r["minute"] > half]
        if not early or not late:
            print(f"  {query:16} run too short to judge (need at least {half + 1} minutes)")
            continue
        state_early, state_late = max(r["state_rows"] for r in early), max(r["state_rows"] for r in late)
        lag_early = statistics.mean(r["lag_s"] for r in early)
        lag_late = statistics.mean(r["lag_s"] for r in late)
        median_early = statistics.median(r["lag_s"] for r in early)
        median_late = statistics.median(r["lag_s"] for r in late)
        flat = state_late <= 1.5 * max(state_early, 1)
        slack = 2 * max(parse_duration(args.trigger), intervals_ms.get(query, 0) / 1000)
        kept_up = median_late <= 1.25 * median_early + slack
        print(
            f"  {query:16} state rows {'flat' if flat else 'GROWING'} (max {state_early:,} then {state_late:,}); "
            f"mean lag {lag_early:.1f} s then {lag_late:.1f} s, median {median_early:.1f} s then {median_late:.1f} s: "
            f"{'kept up' if kept_up else 'FELL BEHIND'}"
        )
        figures[f"{query}: max state rows, minutes 3-{half}"] = state_early
        figures[f"{query}: max state rows, minutes {half + 1}-{args.minutes}"] = state_late
        figures[f"{query}: state rows flat"] = flat
        figures[f"{query}: mean lag, minutes 3-{half} (s)"] = lag_early
        figures[f"{query}: mean lag, minutes {half + 1}-{args.minutes} (s)"] = lag_late
        figures[f"{query}: median lag, minutes 3-{half} (s)"] = median_early
        figures[f"{query}: median lag, minutes {half + 1}-{args.minutes} (s)"] = median_late
        figures[f"{query}: kept up"] = kept_up
    early_heap, late_heap = heaps[2:half], heaps[half:]
    if early_heap and late_heap:
        bound = 1.5 * max(early_heap)
        flat = statistics.median(late_heap) <= bound and idle_heap <= bound
        print(
            f"  live JVM heap: max {max(early_heap):,.0f} MB in minutes 3-{half}, then median "
            f"{statistics.median(late_heap):,.0f} MB (max {max(late_heap):,.0f}); {idle_heap:,.0f} MB once drained "
            f"(queries idle): {'flat' if flat else 'GROWING'}"
        )
        figures[f"live JVM heap max, minutes 3-{half} (MB)"] = max(early_heap)
        figures[f"live JVM heap median, minutes {half + 1}-{args.minutes} (MB)"] = statistics.median(late_heap)
        figures[f"live JVM heap max, minutes {half + 1}-{args.minutes} (MB)"] = max(late_heap)
        figures["live JVM heap once drained (MB)"] = idle_heap
        figures["live JVM heap flat"] = flat
    return figures


if __name__ == "__main__":
    main()
