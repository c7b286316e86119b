"""The end-of-demo summary: rows per table, quarantine reasons, where the notebooks are."""

from __future__ import annotations

from pathlib import Path

from sensorcep.pipeline.ingest import quarantine_reasons
from sensorcep.settings import PROJECT_ROOT, TABLES, Settings


def table_counts(spark, settings: Settings) -> dict[str, int | None]:
    from sensorcep.io import delta, tables

    counts = {}
    for name in TABLES:
        table = tables.table(settings, name)
        counts[name] = delta.read_table(spark, table).count() if delta.table_exists(table, spark) else None
    return counts


def print_summary(settings: Settings, runs_dir: Path | None = None) -> None:
    from sensorcep.io import tables
    from sensorcep.runtime import get_spark

    spark = get_spark()
    print(f"\nDelta tables (files under {settings.base_path}/tables)")
    for name, count in table_counts(spark, settings).items():
        print(f"  {str(tables.table(settings, name)):<40} {'-' if count is None else f'{count:,}':>12}")
    reasons = quarantine_reasons(spark, settings)
    if len(reasons):
        print("quarantined records by reason")
        for reason, count in zip(reasons.reason, reasons["count"], strict=False):
            print(f"  {count:>8,}  {reason}")
    runs = runs_dir or max((PROJECT_ROOT / "runs").glob("*"), default=None)
    if runs:
        print(f"executed notebooks: {runs}")
