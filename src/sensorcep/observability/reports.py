"""Reading recorded progress back: a query's recent batches, ``stream_progress`` as pandas, per-query summaries and
plots, and Spark's state data sources."""

from __future__ import annotations

import os

import pandas as pd

from sensorcep import runtime
from sensorcep.io.lake import Tables
from sensorcep.observability.plots import plot_query_progress
from sensorcep.observability.progress import PROGRESS_SCHEMA, progress_dict, progress_row
from sensorcep.settings import Settings


def progress_frame(
    query,
    columns=(
        "batch_id",
        "num_input_rows",
        "batch_duration_ms",
        "watermark",
        "state_rows_total",
        "rows_dropped_by_watermark",
    ),
):
    """A query's recent progress as a small pandas table (one row per micro-batch)."""

    rows = [progress_row(progress_dict(p)) for p in query.recentProgress]
    return pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(columns=list(columns))


def read_progress(spark, settings: Settings):
    """Delta ``stream_progress`` as a pandas frame (empty, with the columns, when nothing was recorded yet)."""

    lake = Tables(spark, settings)
    if not lake.exists("stream_progress"):
        return PROGRESS_SCHEMA.empty_table().to_pandas()
    frame = lake.read("stream_progress").toPandas()
    return frame.sort_values(["query_name", "timestamp", "batch_id"]).reset_index(drop=True) if len(frame) else frame


def progress_summary(progress: pd.DataFrame) -> pd.DataFrame:
    """``stream_progress`` -> one row per query: runs, batches, input rows and the p95 batch duration."""
    return progress.groupby("query_name").agg(
        runs=("run_id", "nunique"),
        batches=("batch_id", "count"),
        rows=("num_input_rows", "sum"),
        p95_batch_ms=("batch_duration_ms", lambda durations: durations.quantile(0.95)),
    )


def save_progress_plots(progress: pd.DataFrame, intervals: dict[str, int], settings: Settings) -> list[str]:
    """One progress figure per query (rates, batch time vs trigger, state, watermark lag), saved as PNG."""

    return [
        save_figure(plot_query_progress(progress, query, intervals.get(query, 0)), f"progress_{query}", settings)
        for query in sorted(progress.query_name.unique())
    ]


def save_figure(fig, name: str, settings: Settings) -> str:
    """Save a plot as PNG: next to the executed notebook in the local runner's run folder (``SENSORCEP_RUN_DIR``),
    else under ``<base_path>/plots`` (on Databricks the deployment's volume: the bundle's own folder is replaced at
    every deploy and is not the place for data)."""

    folder = os.environ.get("SENSORCEP_RUN_DIR") or f"{settings.base_path.rstrip('/')}/plots"
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.png")
    fig.savefig(path, dpi=90, bbox_inches="tight")
    return path


# ------------------------------------------------------------------------------ operator state (data sources)
def state_metadata(spark, settings: Settings, query: str):
    """The stateful operators of a query's checkpoint (Spark's ``state-metadata`` source)."""
    runtime.require(runtime.STATE_READER, spark)
    return spark.read.format("state-metadata").load(settings.checkpoint_path(query))


def state_variable(spark, settings: Settings, query: str, state_var: str, operator_id: int = 0):
    """The rows of one transformWithState state variable (``statestore`` source; list elements one per row)."""
    runtime.require(runtime.STATE_READER, spark)
    return (
        spark.read.format("statestore")
        .option("operatorId", operator_id)
        .option("stateVarName", state_var)
        .load(settings.checkpoint_path(query))
    )
