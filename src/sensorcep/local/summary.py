"""The end-of-demo summary: rows per table, quarantine reasons, where the run's report and notebooks are."""

from __future__ import annotations

from pathlib import Path

from sensorcep.io.lake import Tables
from sensorcep.io.tables import table
from sensorcep.local.run_report import INDEX
from sensorcep.local.session import jvm_console_to
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
        report = runs / INDEX
        print(f"the run as HTML: {report}" if report.exists() else f"executed notebooks: {runs}")
