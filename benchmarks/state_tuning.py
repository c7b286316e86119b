"""The 04_state_tuning study from the command line: every preset of a matrix, the table, the ratios.

    .venv/bin/python benchmarks/state_tuning.py                 # full matrix (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/state_tuning.py --preset quick  # the CI / job smoke matrix

Prints the tidy table of ``sensorcep.tuning.run_matrix`` (same code as the notebook), the p95 commit-time
ratios of RocksDB + changelog checkpointing against plain RocksDB and the HDFS store measured in the same
run, and the recommendation. ``--save`` also appends the table to Delta ``tuning_results``.
"""

from __future__ import annotations

import pandas as pd
from harness import argument_parser, record, scratch_folder

from sensorcep import runtime, tuning
from sensorcep.settings import env_settings


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--preset", default="full", choices=sorted(tuning.MATRICES))
    parser.add_argument("--save", action="store_true", help="append the table to Delta tuning_results")
    args = parser.parse_args()

    figures: dict = {"matrix": args.preset}
    with scratch_folder("tuning") as scratch:  # the study's tables and checkpoints, unless --save keeps them
        settings = env_settings() if args.save else env_settings(base_path=scratch)
        spark = runtime.get_spark()
        table = tuning.run_matrix(spark, settings, args.preset)
        if args.save:
            saved = tuning.save_results(spark, table, settings)
            print("saved to", saved)
            figures["saved to"] = str(saved)
    pd.set_option("display.width", 200)
    print()
    print(table[tuning.SUMMARY_COLUMNS].round(1).to_string(index=False))
    print("\np95 commit time ratios (same run):")
    for query in ("sampling", "window_counts"):
        rows = table[table["query"] == query].set_index("preset")
        figures.update({f"{query}: {preset} (commit p95 ms)": row["commit_p95_ms"] for preset, row in rows.iterrows()})
        if "rocksdb_changelog" not in rows.index:
            continue
        changelog = rows.loc["rocksdb_changelog", "commit_p95_ms"]
        for other in ("rocksdb", "hdfs"):
            if other in rows.index:
                print(
                    f"  {query:13} rocksdb_changelog / {other:8} = {changelog / rows.loc[other, 'commit_p95_ms']:.2f}x "
                    f"({changelog:,.0f} vs {rows.loc[other, 'commit_p95_ms']:,.0f} ms)"
                )
                figures[f"{query}: rocksdb_changelog / {other} (commit p95 x)"] = (
                    changelog / rows.loc[other, "commit_p95_ms"]
                )
    print()
    recommendation = tuning.recommend(table)
    print(recommendation)
    figures["recommended preset"] = recommendation.preset
    figures["recommendation"] = "; ".join(recommendation.reasons)
    record("state_tuning", figures, table[tuning.SUMMARY_COLUMNS], baseline="rocksdb")


if __name__ == "__main__":
    main()
