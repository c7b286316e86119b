"""The end-of-demo summary: rows per table, quarantine reasons, where the notebooks are."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sensorcep.io.lake import Tables
from sensorcep.io.tables import table
from sensorcep.pipeline.ingest import quarantine_reasons
from sensorcep.runtime import get_spark
from sensorcep.settings import PROJECT_ROOT, TABLES, Settings


def table_counts(spark, settings: Settings) -> dict[str, int | None]:

    counts, lake = {}, Tables(spark, settings)
    for name in TABLES:
        counts[name] = lake.read(name).count() if lake.exists(name) else None
    return counts


def print_summary(settings: Settings, runs_dir: Path | None = None) -> None:

    log = Path(settings.base_path) / "logs" / "summary-spark.log"
    with jvm_console_to(log):  # the JVM's start-up warnings are not the summary
        spark = get_spark()
    print(f"\nDelta tables (files under {settings.base_path}/tables)")
    for name, count in table_counts(spark, settings).items():
        print(f"  {str(table(settings, name)):<40} {'-' if count is None else f'{count:,}':>12}")
    reasons = quarantine_reasons(spark, settings)
    if len(reasons):
        print("quarantined records by reason")
        for reason, count in zip(reasons.reason, reasons["count"], strict=False):
            print(f"  {count:>8,}  {reason}")
    runs = runs_dir or max((PROJECT_ROOT / "runs").glob("*"), default=None)
    if runs:
        print(f"executed notebooks: {runs}")


@contextlib.contextmanager
def jvm_console_to(path: Path):
    """Point this process's stderr (file descriptor 2) at ``path`` while a JVM starts: the JVM inherits it and keeps
    writing its console there (incubator modules, log4j, hostname and native-library warnings); Python's own stderr
    is restored when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
            yield path
    finally:
        os.dup2(saved, 2)
        os.close(saved)
