"""What an event costs: core-seconds per million events for each query, each query's fixed cost per micro-batch, and
from both how many cores a fleet's rate needs.

    make broker-up
    .venv/bin/python benchmarks/cost_model.py                      # 2 x 300,000 events, ~20 minutes
    .venv/bin/python benchmarks/cost_model.py --events 100000 --idle-seconds 60   # a quicker look
    .venv/bin/python benchmarks/cost_model.py --soaks soak_500,soak_2000,soak_10000   # and the model against soaks

CPU is measured, not inferred from wall time: the CPU seconds (user + system, psutil) of the Spark JVM, its Python
workers and this driver process, read around each step. Nothing else may run (the broker and a trickle producer
are not counted).

1. **Each query alone.** ``--events`` simulated events (1,000 devices, 1% anomalous, acks for 70% of the alerts)
   are produced, and each query of the registry runs alone, ``availableNow``, over them, in pipeline order (the
   stateful rules with one rule of each stateful kind; the alert query in micro-batches, as the pipeline job runs
   it): a warm-up, not counted. Then ``--events`` more, later in event time, and each query runs over them again, and
   once more with nothing new: that last run's CPU (start, plan, stop) is taken off the one before, and the rest,
   divided by the events, is the query's cost per million fleet events: the per-query table, which says where an
   event's price goes. It is not the model's price: alone, over a backlog, a query pays more per event than the
   queries running together for minutes (decision 0041).
2. **Per round.** Every query then runs once for ``--settle`` seconds at ``--busy`` events/s, not counted (the windows
   run one after another in one JVM, and the first paid the job's first compilations: a trickle window cost more
   than a busier one). Then every query runs as the always-on job runs them (``--trigger`` for all, the alert query
   included) while a producer sends a trickle (``--trickle`` events/s) for ``--idle-seconds`` after ``--warmup``:
   what the pipeline burns when there is almost nothing to do is its fixed cost, per trigger round. It is split
   between the queries by their share of the batches' wall time; each query's batch time is broken down from its
   progress reports: planning, offsets (latestOffset, getBatch, WAL and offset commits), state commit, and the sink
   (``addBatch``: the foreachBatch writers, with each Delta table's log replay and commit, and the Python workers of
   the stateful processors).
3. **Per device reporting.** The same again, on fresh tables, at ``--busy`` events/s, a rate at which most of the
   1,000 devices report in every round: a round's cost grows with the devices it touches (each stateful query
   visits each device's state once per batch, the Python processors once per key), which neither a trickle (a few
   hundred events a round) nor a backlog shows.
4. **Per event.** The same again at ``--high`` events/s and a long trigger (``--high-trigger``, measured for
   ``--high-seconds`` after ``--high-warmup``): events are most of such a round's bill.
5. **The fit and the sizing.** Each window's CPU per round is ``events x per event + per round + devices reporting x
   per device``, the devices reporting being the expected distinct devices among its events from the fleet: three
   windows, three prices. cores = rate x per event + (per round + per device x devices reporting in a round) / trigger
   interval, for a few rates and triggers. ``--soaks``: soak results (``soak.py --suffix``) to hold the model against:
   the cores it predicts for each soak's rate and trigger, the Spark cores the soak measured (minutes 3 on), and
   their ratio.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace

import numpy
from harness import (
    STEADY_DEVICES,
    CpuMeter,
    always_on_window,
    argument_parser,
    produce_backlog,
    progress,
    record,
    results_folder,
    run_to_end,
    scratch_run,
    stateful_rule_set,
)

from sensorcep.local import simulator
from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline import registry
from sensorcep.rules import catalog
from sensorcep.rules.model import load_rules
from sensorcep.runtime import get_spark
from sensorcep.settings import parse_duration


def run_alone(spark, settings, name: str, clock: CpuMeter) -> tuple[float, float, int]:
    """One availableNow run of query ``name``: (CPU s of Spark's parts, wall s, input rows)."""
    clock.read()
    wall, _, batches = run_to_end(lambda: registry.query(name).start(spark, settings))
    return clock.read_spark(), wall, sum(p["numInputRows"] for p in batches)


def backlog_with_acks(settings, events: int, seed: int, **start):
    """A backlog (:func:`produce_backlog`) and acks for 70% of its alerts on the acks topic."""
    sim = produce_backlog(settings, events, seed, **start)
    simulator.produce_records(simulator.acknowledgements(sim), settings.kafka_bootstrap_servers, settings.acks_topic)
    return sim


def warm_up(spark, settings, clock: CpuMeter) -> None:
    """Each query once over the first backlog: the JIT's first compilations, and each query's checkpoint started."""
    for name in registry.registry():
        cpu, wall, rows = run_alone(spark, settings, name, clock)
        print(f"  {name:<16} {rows:>9,} input rows  {wall:6.1f} s wall  {cpu:6.1f} CPU s  (warm-up)", flush=True)


def per_event(spark, settings, events: int, clock: CpuMeter) -> dict[str, dict]:
    out = {}
    for name in registry.registry():
        cpu, wall, rows = run_alone(spark, settings, name, clock)
        idle_cpu, idle_wall, _ = run_alone(spark, settings, name, clock)
        out[name] = {
            "rows": rows,
            "cpu_s": cpu,
            "wall_s": wall,
            "run_overhead_cpu_s": idle_cpu,
            "core_s_per_million": max(cpu - idle_cpu, 0.0) / events * 1e6,
        }
        print(
            f"  {name:<16} {rows:>9,} input rows  {wall:6.1f} s wall  {cpu:6.1f} CPU s  "
            f"(a run with nothing new: {idle_cpu:4.1f} CPU s)  -> {out[name]['core_s_per_million']:6.1f} "
            "core-s per million events",
            flush=True,
        )
    return out


def devices_per_round(rate: float, interval_s: float, devices: int) -> float:
    """The expected distinct devices among ``rate`` x ``interval_s`` events, each from one of ``devices`` at random."""
    return devices * (1 - math.exp(-rate * interval_s / devices)) if devices else 0.0


@dataclass(frozen=True)
class Model:
    """Cores = rate x ``per_event`` + (``per_round`` + ``per_device`` x devices reporting in a round) / interval."""

    per_event: float  # core-s per fleet event, every query
    per_round: float  # core-s per trigger round, every query, whatever arrives
    per_device: float  # core-s per device that reported in a round
    devices: int  # the fleet

    def cores(self, rate: float, interval_s: float) -> float:
        touched = devices_per_round(rate, interval_s, self.devices)
        return rate * self.per_event + (self.per_round + self.per_device * touched) / interval_s

    @classmethod
    def fit(cls, devices: int, windows: list[tuple[float, float, float]]) -> Model:
        """From always-on windows, ``(events/s, trigger interval s, cores)`` each: a trickle (a round's fixed cost), a
        busy one reaching most devices every round (the cost per device) and a high rate at a long trigger (the cost
        per event, in a job running every query, as a soak runs them). Each window's CPU per round is ``events x per
        event + per round + devices reporting x per device``: three windows, three unknowns (a price that comes out
        negative, from noise, is 0 and the others are fitted again by least squares)."""
        rows = [[rate * interval, 1.0, devices_per_round(rate, interval, devices)] for rate, interval, _ in windows]
        spent = [cores * interval for _, interval, cores in windows]
        prices = [0.0, 0.0, 0.0]
        free = [0, 1, 2]
        while free:
            solved, *_ = numpy.linalg.lstsq(numpy.array([[row[i] for i in free] for row in rows]), spent, rcond=None)
            if (solved >= 0).all():
                for i, price in zip(free, solved, strict=True):
                    prices[i] = float(price)
                break
            free.remove(free[int(numpy.argmin(solved))])
        return cls(*prices, devices)


def breakdown(progress: list[dict]) -> dict[str, float]:
    """Median ms per batch of each part of a query's batch time."""

    def part(p: dict) -> dict[str, float]:
        d = p.get("durationMs", {})
        return {
            "batch": p.get("batchDuration", d.get("triggerExecution", 0)),
            "planning": d.get("queryPlanning", 0),
            "offsets": sum(d.get(k, 0) for k in ("latestOffset", "getBatch", "walCommit", "commitOffsets")),
            "state_commit": sum(o.get("commitTimeMs", 0) for o in p.get("stateOperators", [])),
            "sink": d.get("addBatch", 0),
        }

    parts = [part(p) for p in progress]
    return {k: statistics.median(p[k] for p in parts) for k in parts[0]} if parts else {}


def per_batch(spark, settings, clock: CpuMeter, rate: int, window: Window) -> tuple[dict[str, dict], float, float]:
    """Every query running with ``rate`` events/s sent: each query's share of the pipeline's CPU per batch and its
    batch time broken down, the cores the whole pipeline used and the events/s ingest read in the window (what the
    fit prices: a producer may send fewer than asked)."""
    cpu, running, since = always_on_window(spark, settings, rate, window.warmup, window.seconds, clock)
    per_query = {}
    for query in running:
        reports = progress(query, since)
        per_query[query.name] = {"batches": len(reports), "wall_ms": sum(p["batchDuration"] for p in reports),
                                 **breakdown(reports)}  # fmt: skip
    total_ms = sum(w["wall_ms"] for w in per_query.values()) or 1
    for w in per_query.values():
        w["core_s_per_batch"] = cpu * w["wall_ms"] / total_ms / max(w["batches"], 1)
    read = sum(p["numInputRows"] for p in progress(next(q for q in running if q.name == "ingest"), since))
    print(f"\n  the whole pipeline at {rate} events/s, trigger {window.trigger}: {cpu / window.seconds:.2f} cores "
          f"(ingest read {read / window.seconds:,.0f} events/s in the window)", flush=True)  # fmt: skip
    return per_query, cpu / window.seconds, read / window.seconds


@dataclass(frozen=True)
class Window:
    """How an always-on window runs: every query's trigger, seconds before it measures, seconds it measures."""

    trigger: str
    warmup: float
    seconds: float

    @property
    def interval_s(self) -> float:
        return parse_duration(self.trigger)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--events", type=int, default=300_000, help="events of each of step 1's two backlogs")
    parser.add_argument("--trigger", default="10 seconds", help="every query's trigger in step 2 (the soak's)")
    parser.add_argument("--trickle", type=int, default=20, help="events/s during step 2")
    parser.add_argument("--busy", type=int, default=200, help="events/s during step 3: most devices in every round")
    parser.add_argument("--devices", type=int, default=STEADY_DEVICES, help="the fleet the sizing is for (its devices)")
    parser.add_argument("--warmup", type=int, default=60, help="seconds before step 2 measures")
    parser.add_argument("--idle-seconds", type=int, default=120, help="how long step 2 measures")
    parser.add_argument("--high", type=int, default=4_000, help="events/s during step 4: the per-event price")
    parser.add_argument("--high-trigger", default="60 seconds", help="every query's trigger in step 4")
    parser.add_argument("--high-warmup", type=int, default=90, help="seconds before step 4 measures")
    parser.add_argument("--high-seconds", type=int, default=360, help="how long step 4 measures")
    parser.add_argument(
        "--settle",
        type=int,
        default=120,
        help="seconds of the always-on job at --busy events/s before step 2, not counted: the windows run one after "
        "another in one JVM, and the first would otherwise pay the job's first compilations (0: none)",
    )
    parser.add_argument("--soaks", default="", help="comma-separated soak results to compare with, e.g. soak_2000")
    args = parser.parse_args()
    soaks = {name: soak_figures(name) for name in args.soaks.split(",") if name}
    short = Window(args.trigger, args.warmup, args.idle_seconds)
    long = Window(args.high_trigger, args.high_warmup, args.high_seconds)

    with scratch_run(
        "cost",
        ("events", "alerts", "acks"),
        trigger="availableNow",
        alerts_trigger="availableNow",
        max_offsets_per_trigger=str(args.events),
    ) as settings:
        sim = backlog_with_acks(settings, args.events, seed=5)
        spark = get_spark()
        catalog.apply_rules(spark, settings, [*load_rules(), *stateful_rule_set(1)])
        clock = CpuMeter()
        print(f"\n1. each query alone: {args.events:,} events, availableNow (warm-up)", flush=True)
        warm_up(spark, settings, clock)
        backlog_with_acks(settings, args.events, seed=6, start=sim.end)
        print(f"   {args.events:,} more, measured", flush=True)
        costs = per_event(spark, settings, args.events, clock)
        if args.settle:
            print(f"\n2a. every query running, {args.busy} events/s for {args.settle} s, not counted", flush=True)
            always_on(spark, settings, args, clock, "settle", args.busy, Window(args.trigger, 0, args.settle))
        print(f"\n2. per round: every query running, trigger {args.trigger}, {args.trickle} events/s", flush=True)
        fixed, idle_cores, idle_rate = always_on(spark, settings, args, clock, "idle", args.trickle, short)
        print(f"\n3. per device: every query running, trigger {args.trigger}, {args.busy} events/s", flush=True)
        _, busy_cores, busy_rate = always_on(spark, settings, args, clock, "busy", args.busy, short)
        print(f"\n4. per event: every query running, trigger {args.high_trigger}, {args.high} events/s", flush=True)
        _, high_cores, high_rate = always_on(spark, settings, args, clock, "high", args.high, long)
        windows = [(idle_rate, short.interval_s, idle_cores), (busy_rate, short.interval_s, busy_cores),
                   (high_rate, long.interval_s, high_cores)]  # fmt: skip
        # fitted to the fleet the windows measured (the steady producer's), then priced for the one asked about
        model = replace(Model.fit(STEADY_DEVICES, windows), devices=args.devices)
        figures, table = report(costs, fixed, model, args, soaks)
        stop_session(spark)
    figures["the pipeline idling (cores)"] = idle_cores
    figures[f"the pipeline at {args.busy} events/s (cores)"] = busy_cores
    figures[f"the pipeline at {args.high} events/s, trigger {args.high_trigger} (cores)"] = high_cores
    for label, sent, read in (("trickle", args.trickle, idle_rate), ("busy", args.busy, busy_rate),
                              ("high", args.high, high_rate)):  # fmt: skip
        figures[f"{label}: ingest read in the window, of {sent:,} sent (events/s)"] = read
    figures["each query alone over a backlog, all queries, per event (core-s per million events)"] = sum(
        c["core_s_per_million"] for c in costs.values()
    )
    record("cost_model", figures, table)


def always_on(spark, settings, args, clock: CpuMeter, label: str, rate: int, window: Window):
    """:func:`per_batch` at ``rate`` on fresh topics and tables: no backlog, no watermark jump from step 1's event
    times to now."""
    with scratch_run(
        f"cost-{label}",
        ("events", "alerts", "acks"),
        schema=f"{settings.schema}_{label}",
        trigger=window.trigger,
        alerts_trigger=window.trigger,
        max_offsets_per_trigger=str(max(args.events, int(rate * window.interval_s * 2))),
    ) as scratch:
        catalog.apply_rules(spark, scratch, [*load_rules(), *stateful_rule_set(1)])
        return per_batch(spark, scratch, clock, rate, window)


#: a soak whose processes used this share of the machine's cores or more had none to spare: its heaviest queries'
#: batches stretch past the trigger and pay fewer rounds, so it used fewer cores than keeping every trigger needs
SATURATED = 0.9


def soak_figures(name: str) -> dict:
    """A soak's recorded figures (``benchmarks/results/<name>.json``, ``soak.py --suffix``), with ``cores`` (the
    machine's) and ``used`` (the cores its Spark, driver, producer and broker used); a clear stop if none."""
    path = results_folder() / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"--soaks {name}: {path} does not exist; run benchmarks/soak.py --suffix {name[4:]} first")
    result = json.loads(path.read_text())
    figures = result["figures"]
    spark = next(v for k, v in figures.items() if k.startswith("steady cpu") and k.endswith("Spark (cores)"))
    others = sum(figures.get(f"mean cpu: {part} (cores)", 0) for part in ("driver", "producer", "broker"))
    return {**figures, "cores": result["machine"]["cores"], "used": spark + others}


def report(costs: dict, fixed: dict, model: Model, args, soaks: dict) -> tuple[dict, list[dict]]:
    """Print the per-query table, the model and the sizing; returns them as figures and the table's rows."""
    print("\nquery             core-s/M events  core-s/batch  batch ms  planning  offsets  state commit  sink")
    table = []
    for name, cost in costs.items():
        f = fixed.get(name, {})
        print(
            f"{name:<17} {cost['core_s_per_million']:>15.1f}  {f.get('core_s_per_batch', 0):>12.2f}  "
            f"{f.get('batch', 0):>8,.0f}  {f.get('planning', 0):>8,.0f}  {f.get('offsets', 0):>7,.0f}  "
            f"{f.get('state_commit', 0):>12,.0f}  {f.get('sink', 0):>4,.0f}"
        )
        table.append(
            {
                "query": name,
                "input rows": cost["rows"],
                "wall s": cost["wall_s"],
                "CPU s": cost["cpu_s"],
                "run with nothing new CPU s": cost["run_overhead_cpu_s"],
                "core-s per million events": cost["core_s_per_million"],
                "batches": f.get("batches", 0),
                "core-s per batch": f.get("core_s_per_batch", 0),
                **{f"{part} ms": f.get(part, 0) for part in ("batch", "planning", "offsets", "state_commit", "sink")},
            }
        )
    print(f"\nall queries: {model.per_event * 1e6:.1f} core-s per million events + {model.per_round:.2f} core-s per "
          f"round + {model.per_device * 1e3:.2f} core-ms per device reporting in a round")  # fmt: skip
    figures = {
        "events": args.events,
        "trigger": args.trigger,
        "trickle (events/s)": args.trickle,
        "busy (events/s)": args.busy,
        "measured idling (s)": args.idle_seconds,
        "high (events/s)": args.high,
        "high trigger": args.high_trigger,
        "measured at the high rate (s)": args.high_seconds,
        "devices": args.devices,
        "all queries, per event (core-s per million events)": model.per_event * 1e6,
        "all queries, per round (core-s)": model.per_round,
        "all queries, per device reporting in a round (core-ms)": model.per_device * 1e3,
    }
    print(f"cores needed for {args.devices:,} devices = rate x per event + (per round + per device x devices "
          "reporting in a round) / trigger interval:")  # fmt: skip
    print("  events/s    trigger 10 s   trigger 60 s")
    for rate in (1_000, 4_000, 10_000, 50_000):
        need = [model.cores(rate, parse_duration(t)) for t in ("10 seconds", "60 seconds")]
        print(f"  {rate:>8,}    {need[0]:>10.2f}   {need[1]:>12.2f}")
        for trigger, cores in zip(("10 s", "60 s"), need, strict=True):
            figures[f"cores needed at {rate:,} events/s, trigger {trigger} (cores)"] = cores
    for name, soak in soaks.items():
        rate, trigger = soak["rate (events/s)"], soak["trigger"]
        measured = next(v for k, v in soak.items() if k.startswith("steady cpu") and k.endswith("Spark (cores)"))
        predicted = replace(model, devices=STEADY_DEVICES).cores(rate, parse_duration(trigger))  # the soak's fleet
        saturated = soak["used"] >= SATURATED * soak["cores"]
        print(f"  {name}: {rate:,} events/s at {trigger}: the model says {predicted:.2f} cores, the soak used "
              f"{measured:.2f} ({predicted / measured:.2f}x)"
              + (f"; saturated: the soak's processes used {soak['used']:.2f} of {soak['cores']} cores, its batches "
                 "stretched past the trigger: not a check of the model" if saturated else ""))  # fmt: skip
        figures[f"{name}, {rate:,} events/s: predicted (cores)"] = predicted
        figures[f"{name}, {rate:,} events/s: measured (cores)"] = measured
        figures[f"{name}, {rate:,} events/s: predicted / measured (x)"] = predicted / measured
        figures[f"{name}, {rate:,} events/s: saturated (the machine's cores all used)"] = saturated
    return figures, table


if __name__ == "__main__":
    main()
