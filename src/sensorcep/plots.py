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
