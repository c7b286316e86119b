"""What a fresh Spark JVM costs before its first useful work: the price every notebook kernel, job run and crash test
of the suite pays again (docs/decisions/0020-the-suite-is-bound-by-cold-starts.md).

    .venv/bin/python benchmarks/cold_start.py [--starts 3]

Each start is a new Python process with a new local Spark JVM (as a notebook kernel or a job run has), started
alternately with and without the class archive ``make jars`` builds (``sensorcep.local.class_archive``: the baseline,
in the same run). It times:

* the session (``runtime.get_spark()``);
* a first Spark job (``spark.range(10).collect()``);
* a first Delta read of a one-row table (the shape of ``alert_rules``), then the same read again (in the same
  process: how much of the first read is the JVM being cold).

No broker. The JVM options are the environment's (``SENSORCEP_JVM_OPTIONS``; the test suite sets the C1 compiler
only and the serial collector). Figures are medians over the starts of each kind.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import argument_parser, record

from sensorcep.local import class_archive

STEPS = ("session start", "first Spark job", "first Delta read", "the same Delta read again")
TOTAL = "to the first Delta read's rows"
BASELINE = "without the class archive"
#: each kind of start and the value of ``SENSORCEP_CLASS_ARCHIVE`` it runs with
KINDS = {"with the class archive": "on", BASELINE: "off"}


def measure(table: str) -> dict[str, float]:
    """In this (fresh) process: each step's seconds."""
    from sensorcep.runtime import get_spark

    took, started = {}, time.perf_counter()
    spark = get_spark()
    took["session start"], started = time.perf_counter() - started, time.perf_counter()
    spark.range(10).collect()
    took["first Spark job"], started = time.perf_counter() - started, time.perf_counter()
    spark.read.format("delta").load(table).collect()
    took["first Delta read"], started = time.perf_counter() - started, time.perf_counter()
    spark.read.format("delta").load(table).collect()
    took["the same Delta read again"] = time.perf_counter() - started
    return took


def make_table(folder: Path) -> str:
    """A one-row Delta table, written by a process of its own (this one never starts a JVM)."""
    table = str(folder / "one_row")
    code = (
        "from sensorcep.runtime import get_spark;"
        f"get_spark().createDataFrame([('rule', 1)], 'rule_id string, rule_version int')"
        f".write.format('delta').save({table!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=600)
    return table


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--starts", type=int, default=3, help="fresh processes of each kind to time (default 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one timed start, in the fresh process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    if not class_archive.is_current():
        sys.exit("the class archive is missing or older than this JDK and wheel: run `make jars` first")
    with tempfile.TemporaryDirectory(prefix="cold-start-") as folder:
        table = make_table(Path(folder))
        runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
        for start in range(1, args.starts + 1):
            for kind, switch in KINDS.items():
                env = {**os.environ, class_archive.SWITCH_ENV: switch}
                done = subprocess.run(
                    [sys.executable, __file__, "--child", table],
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=True,
                    env=env,
                )
                took = json.loads(done.stdout.strip().splitlines()[-1])
                took[TOTAL] = sum(took[step] for step in STEPS[:3])
                runs[kind].append(took)
                print(f"start {start}/{args.starts} {kind}: " + ", ".join(f"{s} {took[s]:.1f} s" for s in STEPS))
    options = os.environ.get("SENSORCEP_JVM_OPTIONS", "") or "the JVM's defaults"
    figures = {
        f"{step}: {kind} (s)": round(statistics.median(run[step] for run in runs[kind]), 2)
        for step in (*STEPS, TOTAL)
        for kind in KINDS
    }
    print("\n".join(f"{name:60} {value:6.2f}" for name, value in figures.items()))
    record(
        "cold_start",
        figures,
        table=[
            {"start": i + 1, "kind": kind, **{s: round(run[s], 2) for s in (*STEPS, TOTAL)}, "JVM options": options}
            for kind in KINDS
            for i, run in enumerate(runs[kind])
        ],
        baseline=BASELINE,
    )


if __name__ == "__main__":
    main()
