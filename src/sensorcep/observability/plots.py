"""The project's plots (matplotlib), each a function of a small pandas frame; notebooks just call them."""

from __future__ import annotations

import pandas as pd

ROLE_STYLE = {
    "first": ("tab:blue", "o"),
    "middle": ("tab:green", "s"),
    "last": ("tab:purple", "^"),
    "anomaly": ("tab:red", "x"),
}


def plot_samples(samples: pd.DataFrame, title: str = "Sampled values over time"):
    """``sensor_samples`` rows -> sensor_freq over event time, one marker per role (anomalies in red)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only when plotting

    fig, ax = plt.subplots(figsize=(11, 4))
    for role, (color, marker) in ROLE_STYLE.items():
        chosen = samples[samples.roles.apply(lambda roles, r=role: r in list(roles))]
        if len(chosen):
            ax.scatter(
                chosen.event_time,
                chosen.sensor_freq,
                s=18,
                color=color,
                marker=marker,
                label=f"{role} ({len(chosen):,})",
            )
    ax.axhline(0, color="grey", linewidth=0.6)
    ax.set(title=title, xlabel="event time (UTC)", ylabel="sensor_freq")
    ax.legend(loc="upper right", fontsize=8)
    fig.autofmt_xdate()
    return fig


def plot_alert_latency(anomalies: pd.DataFrame, title: str = "Alert latency"):
    """``anomalies`` rows -> histogram of detected_at - kafka_timestamp (time from Kafka to the alert)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only when plotting

    seconds = (pd.to_datetime(anomalies.detected_at) - pd.to_datetime(anomalies.kafka_timestamp)).dt.total_seconds()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    if len(seconds):
        ax.hist(seconds, bins=40, color="tab:red", alpha=0.8)
        for q, style in ((0.5, "-"), (0.99, "--")):
            ax.axvline(
                seconds.quantile(q),
                color="black",
                linestyle=style,
                linewidth=0.8,
                label=f"p{int(q * 100)} = {seconds.quantile(q):,.2f} s",
            )
        ax.legend(fontsize=8)
    ax.set(title=title, xlabel="seconds from the event reaching Kafka to its alert", ylabel="alerts")
    return fig


def plot_tuning(results: pd.DataFrame, title: str = "State store configurations"):
    """``tuning_results`` rows -> throughput and p95 batch time per configuration, commit time vs state size."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only when plotting

    labels = results["query"] + " / " + results["preset"]
    colors = results["query"].map({"sampling": "tab:blue", "window_counts": "tab:orange"}).fillna("tab:grey")
    fig, axes = plt.subplots(1, 3, figsize=(16, 0.45 * len(results) + 2.5), gridspec_kw={"width_ratios": [1, 1, 1.1]})
    for ax, column, label in (
        (axes[0], "events_per_s", "events/s (higher is better)"),
        (axes[1], "batch_p95_ms", "p95 batch time, ms (lower is better)"),
    ):
        ax.barh(labels, results[column], color=colors)
        ax.invert_yaxis()
        ax.set(xlabel=label)
        for y, value in enumerate(results[column]):
            ax.text(value, y, f" {value:,.0f}", va="center", fontsize=7)
    axes[1].set_yticklabels([])
    for query, marker in (("sampling", "o"), ("window_counts", "s")):
        part = results[results["query"] == query]
        axes[2].scatter(part["state_rows_max"], part["commit_p95_ms"], marker=marker, s=40, label=query)
        for _, row in part.iterrows():
            axes[2].annotate(
                row["preset"],
                (row["state_rows_max"], row["commit_p95_ms"]),
                fontsize=7,
                xytext=(4, 2),
                textcoords="offset points",
            )
    axes[2].set(xlabel="state rows (max)", ylabel="p95 state commit time, ms", xscale="symlog")
    axes[2].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_query_progress(progress: pd.DataFrame, query: str, trigger_ms: int = 0):
    """One query's ``stream_progress`` rows -> 4 panels over time: input vs processing rate, batch duration vs
    the trigger interval, state rows and memory, watermark lag behind the newest event time and late rows."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only when plotting

    rows = progress[progress.query_name == query].sort_values("timestamp")
    time_axis = pd.to_datetime(rows.timestamp)
    fig, axes = plt.subplots(2, 2, figsize=(13, 6.5), sharex=True)
    (rates, durations), (state, lag) = axes
    rates.plot(time_axis, rows.input_rows_per_second, ".-", label="input rows/s")
    rates.plot(time_axis, rows.processed_rows_per_second, ".-", label="processed rows/s")
    rates.set(title="input vs processing rate", ylabel="rows/s")
    rates.legend(fontsize=8)
    durations.plot(time_axis, rows.batch_duration_ms / 1000, ".-", color="tab:purple", label="batch duration")
    if trigger_ms:
        durations.axhline(trigger_ms / 1000, color="tab:red", linestyle="--", label=f"trigger {trigger_ms / 1000:g} s")
    durations.set(title="batch duration vs trigger interval", ylabel="seconds")
    durations.legend(fontsize=8)
    if rows.state_rows_total.notna().any():
        state.plot(time_axis, rows.state_rows_total, ".-", color="tab:green", label="state rows")
        state.set(ylabel="state rows (keys)")
        memory = state.twinx()
        memory.plot(time_axis, rows.state_memory_bytes / 2**20, ":", color="tab:olive", label="state memory")
        memory.set(ylabel="MB")
        state.legend(handles=state.get_lines() + memory.get_lines(), fontsize=8, loc="upper left")
    else:
        state.text(0.5, 0.5, "stateless query", ha="center", va="center", transform=state.transAxes, color="grey")
    state.set(title="state rows and memory")
    if rows.watermark.notna().any():
        watermark = pd.to_datetime(rows.watermark, utc=True)
        watermark = watermark.where(watermark > pd.Timestamp("1971-01-01", tz="UTC"))  # epoch 0 = no watermark yet
        seconds = (pd.to_datetime(rows.event_time_max, utc=True) - watermark).dt.total_seconds()
        lag.plot(time_axis, seconds, ".-", color="tab:brown", label="newest event - watermark (s)")
        dropped = lag.twinx()
        dropped.bar(
            time_axis,
            rows.rows_dropped_by_watermark.fillna(0),
            width=0.00002,
            color="tab:red",
            alpha=0.5,
            label="rows dropped as too late",
        )
        dropped.set(ylabel="rows dropped")
        lag.legend(fontsize=8, loc="upper left")
        dropped.legend(fontsize=8, loc="upper right")
    else:
        lag.text(0.5, 0.5, "no watermark", ha="center", va="center", transform=lag.transAxes, color="grey")
    lag.set(title="watermark lag and late rows", ylabel="seconds")
    fig.suptitle(f"query {query}: {len(rows)} progress events")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def plot_backtest(by_rule: pd.DataFrame, title: str = "Backtest: the candidate rules against the live alerts"):
    """A backtest's ``by_rule`` (rule_id, kept, added, dropped) -> one stacked bar per rule: the alerts both rule sets
    fire (kept), the candidate adds and it drops."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only when plotting

    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * max(len(by_rule), 1)))
    left = pd.Series(0, index=by_rule.index)
    for column, color in (("kept", "tab:grey"), ("added", "tab:green"), ("dropped", "tab:red")):
        ax.barh(by_rule.rule_id, by_rule[column], left=left, color=color, label=f"{column} ({by_rule[column].sum():,})")
        left = left + by_rule[column]
    ax.set(title=title, xlabel="alerts")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def plot_lifecycle(counts: pd.DataFrame, title: str = "The alert lifecycle: transitions by rule"):
    """``alert_events`` counted by (rule_id, transition) (columns rule_id, transition, n) -> one stacked bar per rule,
    a colour per transition (the paging ones, opened and escalated, in warm colours)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only when plotting

    colors = {"opened": "tab:orange", "escalated": "tab:red", "repeated": "tab:grey", "acked": "tab:green",
              "snoozed": "tab:purple", "unsnoozed": "tab:pink", "resolved": "tab:olive",
              "ignored": "tab:brown"}  # fmt: skip
    table = counts.pivot_table(index="rule_id", columns="transition", values="n", aggfunc="sum", fill_value=0)
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.45 * max(len(table), 1)))
    left = pd.Series(0, index=table.index)
    for transition in [t for t in colors if t in table.columns]:
        ax.barh(table.index, table[transition], left=left, color=colors[transition],
                label=f"{transition} ({table[transition].sum():,})")  # fmt: skip
        left = left + table[transition]
    ax.set(title=title, xlabel="transitions")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8, ncols=2)
    fig.tight_layout()
    return fig
