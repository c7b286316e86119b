"""The project's plots (matplotlib), each a function of a small pandas frame; notebooks just call them."""
from __future__ import annotations

import pandas as pd

ROLE_STYLE = {"first": ("tab:blue", "o"), "middle": ("tab:green", "s"), "last": ("tab:purple", "^"),
              "anomaly": ("tab:red", "x")}


def plot_samples(samples: pd.DataFrame, title: str = "Sampled values over time"):
    """``sensor_samples`` rows -> sensor_freq over event time, one marker per role (anomalies in red)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    for role, (color, marker) in ROLE_STYLE.items():
        chosen = samples[samples.roles.apply(lambda roles, r=role: r in list(roles))]
        if len(chosen):
            ax.scatter(chosen.event_time, chosen.sensor_freq, s=18, color=color, marker=marker,
                       label=f"{role} ({len(chosen):,})")
    ax.axhline(0, color="grey", linewidth=0.6)
    ax.set(title=title, xlabel="event time (UTC)", ylabel="sensor_freq")
    ax.legend(loc="upper right", fontsize=8)
    fig.autofmt_xdate()
    return fig


def plot_alert_latency(anomalies: pd.DataFrame, title: str = "Alert latency"):
    """``anomalies`` rows -> histogram of detected_at - kafka_timestamp (time from Kafka to the alert)."""
    import matplotlib.pyplot as plt

    seconds = (pd.to_datetime(anomalies.detected_at) - pd.to_datetime(anomalies.kafka_timestamp)).dt.total_seconds()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    if len(seconds):
        ax.hist(seconds, bins=40, color="tab:red", alpha=0.8)
        for q, style in ((0.5, "-"), (0.99, "--")):
            ax.axvline(seconds.quantile(q), color="black", linestyle=style, linewidth=0.8,
                       label=f"p{int(q * 100)} = {seconds.quantile(q):,.2f} s")
        ax.legend(fontsize=8)
    ax.set(title=title, xlabel="seconds from the event reaching Kafka to its alert", ylabel="alerts")
    return fig


def plot_tuning(results: pd.DataFrame, title: str = "State store configurations"):
    """``tuning_results`` rows -> throughput and p95 batch time per configuration, commit time vs state size."""
    import matplotlib.pyplot as plt

    labels = results["query"] + " / " + results["preset"]
    colors = results["query"].map({"sampling": "tab:blue", "window_counts": "tab:orange"}).fillna("tab:grey")
    fig, axes = plt.subplots(1, 3, figsize=(16, 0.45 * len(results) + 2.5),
                             gridspec_kw={"width_ratios": [1, 1, 1.1]})
    for ax, column, label in ((axes[0], "events_per_s", "events/s (higher is better)"),
                              (axes[1], "batch_p95_ms", "p95 batch time, ms (lower is better)")):
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
            axes[2].annotate(row["preset"], (row["state_rows_max"], row["commit_p95_ms"]), fontsize=7,
                             xytext=(4, 2), textcoords="offset points")
    axes[2].set(xlabel="state rows (max)", ylabel="p95 state commit time, ms", xscale="symlog")
    axes[2].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
