"""The end-of-demo summary: rows per table, quarantine reasons, where the notebooks are."""
from __future__ import annotations

from pathlib import Path

from .settings import PROJECT_ROOT, TABLES, Settings


def table_counts(settings: Settings) -> dict[str, int | None]:
    from deltalake import DeltaTable

    counts = {}
    for name in TABLES:
        path = settings.table_path(name)
        counts[name] = DeltaTable(path).to_pyarrow_dataset().count_rows() if DeltaTable.is_deltatable(path) else None
    return counts


def quarantine_reasons(settings: Settings) -> dict[str, int]:
    from deltalake import DeltaTable

    path = settings.table_path("quarantine_events")
    if not DeltaTable.is_deltatable(path):
        return {}
    reasons = DeltaTable(path).to_pyarrow_table(columns=["reason"]).column("reason").to_pandas()
    return reasons.str.replace(r"^unparseable event_time .*", "unparseable event_time", regex=True).value_counts().to_dict()


def print_summary(settings: Settings, runs_dir: Path | None = None) -> None:
    print(f"\nDelta tables under {settings.base_path}/tables")
    for name, count in table_counts(settings).items():
        print(f"  {name:<20} {'-' if count is None else f'{count:,}':>12}")
    reasons = quarantine_reasons(settings)
    if reasons:
        print("quarantined records by reason")
        for reason, count in reasons.items():
            print(f"  {count:>8,}  {reason}")
    runs = runs_dir or max((PROJECT_ROOT / "runs").glob("*"), default=None)
    if runs:
        print(f"executed notebooks: {runs}")
