"""Reading the results table: the recommendation, with the measured reasons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from sensorcep.tuning.presets import Preset, TuningError, databricks_conf, presets

# ------------------------------------------------------------------------------ reading the table
#: the preset the last full local run recommended (docs/tuning.md); the bundle's prod target uses it
RECOMMENDED = "rocksdb_changelog"


@dataclass(frozen=True)
class Recommendation:
    preset: str
    reasons: list[str] = field(default_factory=list)
    spark_conf: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"Recommended: {self.preset}"] + [f"  - {r}" for r in self.reasons]
        lines += ["  Databricks job cluster spark_conf:"] + [f'      {k}: "{v}"' for k, v in self.spark_conf.items()]
        return "\n".join(lines)


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def recommend(
    table: pd.DataFrame, catalog: Mapping[str, Preset] | None = None, tolerance: float = 0.05
) -> Recommendation:
    """The sampling query's preset with the lowest p95 batch time (the trigger presets answer a different
    question: latency vs throughput), with the measured reasons, and how the stores compare on commit time.

    Presets within ``tolerance`` of the lowest p95 are a tie (run-to-run noise is larger than that here):
    the one with the fewest settings wins.
    """
    catalog = catalog if catalog is not None else presets()
    sampling = table[(table["query"] == "sampling") & (table["trigger"] == "0 seconds")].dropna(subset=["batch_p95_ms"])
    if sampling.empty:
        raise TuningError("no sampling-query result to recommend from: run a matrix with sampling configurations")
    fastest = sampling.sort_values(["batch_p95_ms", "events_per_s"], ascending=[True, False]).iloc[0]
    tied = sampling[sampling["batch_p95_ms"] <= fastest["batch_p95_ms"] * (1 + tolerance)]
    best = min(
        (row for _, row in tied.iterrows()), key=lambda row: (len(catalog[row["preset"]].conf), row["batch_p95_ms"])
    )
    reasons = []
    if best["preset"] != fastest["preset"]:
        reasons.append(
            f"{fastest['preset']} had the lowest p95 batch time ({fastest['batch_p95_ms']:,.0f} ms) but "
            f"{best['preset']} is within {tolerance:.0%} ({best['batch_p95_ms']:,.0f} ms) with fewer settings"
        )
    by = {(r["query"], r["preset"]): r for _, r in table.iterrows()}
    plain = by.get(("sampling", "rocksdb"))
    if plain is not None and best["preset"] != "rocksdb":
        reasons.append(
            f"sampling: p95 batch {best['batch_p95_ms']:,.0f} ms vs {plain['batch_p95_ms']:,.0f} ms with plain "
            f"RocksDB ({_ratio(best['batch_p95_ms'], plain['batch_p95_ms'])}), p95 commit "
            f"{best['commit_p95_ms']:,.0f} vs {plain['commit_p95_ms']:,.0f} ms, "
            f"{best['events_per_s']:,.0f} vs {plain['events_per_s']:,.0f} events/s"
        )
    else:
        reasons.append(
            f"sampling: lowest p95 batch time, {best['batch_p95_ms']:,.0f} ms at {best['events_per_s']:,.0f} events/s"
        )
    stores = [by.get(("window_counts", p)) for p in ("rocksdb_changelog", "rocksdb", "hdfs")]
    if all(s is not None for s in stores):
        changelog, rocksdb, hdfs = stores
        reasons.append(
            f"window_counts: p95 commit with changelog {changelog['commit_p95_ms']:,.0f} ms vs plain RocksDB "
            f"{rocksdb['commit_p95_ms']:,.0f} ms ({_ratio(changelog['commit_p95_ms'], rocksdb['commit_p95_ms'])})"
            f" and HDFS {hdfs['commit_p95_ms']:,.0f} ms ({_ratio(changelog['commit_p95_ms'], hdfs['commit_p95_ms'])})"
        )
    shuffle = by.get(("sampling", "shuffle_200"))
    if shuffle is not None:
        reasons.append(
            f"200 shuffle partitions: p95 batch {shuffle['batch_p95_ms']:,.0f} ms "
            f"({_ratio(shuffle['batch_p95_ms'], best['batch_p95_ms'])} of {best['preset']}): keep state "
            "partitions near the core count (fixed by the first checkpoint)"
        )
    slow = by.get(("sampling", "trigger_5s"))
    if slow is not None:
        reasons.append(
            f"5 s trigger: {slow['events_per_s']:,.0f} vs {best['events_per_s']:,.0f} events/s on a backlog; "
            "as fast as possible lowers latency and keeps up, a fixed interval only batches more per trigger"
        )
    return Recommendation(best["preset"], reasons, databricks_conf(catalog[best["preset"]]))
