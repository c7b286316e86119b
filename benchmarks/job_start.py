"""How long the always-on job takes to start: from a new process to every task's queries started, as a restart of the
job (a Databricks task retry, a fault test run, ``make up`` again) pays it.

    make broker-up
    .venv/bin/python benchmarks/job_start.py [--starts 2] [--events 2000]

A scratch run (its own topics and tables) gets ``--events`` simulated events, and a first start of the job creates
its tables and checkpoints (not timed). Then each timed start is a new Python process with a new local Spark JVM that
runs ``jobs.run_always_on`` (what ``python -m sensorcep run --job sensor_cep_streaming`` runs) and stops it as soon
as every task has started, alternately:

* as the job runs: every task started inside one read of ``alert_rules`` (``catalog.one_read``);
* the baseline, in the same run: that pass turned into a no-op in the child process, so the seed check, the
  fingerprint and the compile of each rule query read the table again, as before the pass existed.

It prints the seconds to the session and to each task's ``▶`` line, per start, and the medians of each kind. Nothing
else may run: two JVMs beside it change every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

from harness import argument_parser, produce_backlog, record, scratch_run

ONE_READ = "one read of alert_rules per pass"
BASELINE = "a read of alert_rules per call"
KINDS = (ONE_READ, BASELINE)
TOTAL = "to every task started"


def child(params: dict[str, str], kind: str) -> dict[str, float]:
    """In this (fresh) process: seconds from now to the session and to each task's start."""
    started = time.perf_counter()
    from sensorcep.local import jobs
    from sensorcep.rules import catalog
    from sensorcep.runtime import get_spark

    if kind == BASELINE:
        catalog.one_read = contextlib.nullcontext  # what every call did before the pass: its own read
    took = {}
    spark = get_spark()
    took["session"] = time.perf_counter() - started

    def out(line: str) -> None:
        if line.startswith("▶ "):
            took[line[2:].split(":")[0]] = time.perf_counter() - started

    jobs.run_always_on(params=params, until=lambda queries: True, out=out, spark=spark)
    took[TOTAL] = max(took.values())
    return took


def start(params: dict[str, str], kind: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps({"params": params, "kind": kind})],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        sys.exit(f"a start of the job failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--starts", type=int, default=2, help="timed starts of each kind (default 2)")
    parser.add_argument("--events", type=int, default=2_000, help="simulated events on the scratch topic")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one timed start, in the fresh process
    args = parser.parse_args()
    if args.child:
        given = json.loads(args.child)
        print(json.dumps(child(given["params"], given["kind"])))
        return
    with scratch_run("job-start", ("events", "alerts", "acks"), trigger="10 seconds") as settings:
        produce_backlog(settings, args.events, seed=11)
        params = {
            name: str(getattr(settings, name))
            for name in ("kafka_bootstrap_servers", "events_topic", "alerts_topic", "acks_topic", "base_path")
        } | {"schema": f"job_start_{os.getpid()}", "trigger": "10 seconds"}
        first = start(params, ONE_READ)  # fresh tables and checkpoints: created, not timed
        print(f"first start (creates the tables, not timed): {first[TOTAL]:.1f} s", flush=True)
        runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
        for number in range(1, args.starts + 1):
            for kind in KINDS:
                took = start(params, kind)
                runs[kind].append(took)
                steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in took.items())
                print(f"restart {number}/{args.starts}, {kind}: {steps}", flush=True)
    figures = {
        f"{TOTAL}: {kind} (s)": round(statistics.median(run[TOTAL] for run in runs[kind]), 1) for kind in KINDS
    } | {f"session: {kind} (s)": round(statistics.median(run["session"] for run in runs[kind]), 1) for kind in KINDS}
    print("\n".join(f"{name:70} {value:6.1f}" for name, value in figures.items()))
    record(
        "job_start",
        figures,
        table=[
            {"restart": i + 1, "kind": kind, **{step: round(s, 1) for step, s in run.items()}}
            for kind in KINDS
            for i, run in enumerate(runs[kind])
        ],
        baseline=BASELINE,
    )


if __name__ == "__main__":
    main()
