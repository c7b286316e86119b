"""The fault test's verdict on ``device_baselines``, itself tested without a JVM: the rows the stateful rules query
appends batch by batch (the rules' own engine, :func:`sensorcep.rules.sequential.advance`, cut into micro-batches)
pass it, and each planted bug fails it, naming the device and what its events give instead."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from support.nemesis import STATEFUL_RULES, judge_baselines

from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import parse_rules
from sensorcep.rules.sequential import advance, baselines

RULE = next(r for r in STATEFUL_RULES if r["kind"] == "baseline")
MARK_MS = 10_000_000


def _events(seed: int = 3) -> pd.DataFrame:
    """Three devices' readings, a few seconds apart, one device also after the watermark (not yet judged)."""
    draw = random.Random(seed)
    rows = [
        {"device_id": f"dev-{d}", "sensor_freq": draw.gauss(50, 5), "event_time_us": (1_000 + 3 * i + d) * 1_000_000}
        for d in range(3)
        for i in range(12)
    ]
    rows.append({"device_id": "dev-0", "sensor_freq": 99.0, "event_time_us": (MARK_MS + 1_000) * 1_000})
    return pd.DataFrame(rows)


def _appended(events: pd.DataFrame, batches: int = 4) -> pd.DataFrame:
    """The query's ``device_baselines`` rows: after each micro-batch, the baseline of every device it moved."""
    versioned = [VersionedRule(parse_rules({"rules": [RULE]})[0], 1)]
    final = events[events.event_time_us <= MARK_MS * 1000].sort_values("event_time_us")
    memory: dict[str, dict] = {}
    rows = []
    size = -(-len(final) // batches)
    for batch_id in range(batches):  # consecutive slices in event time: what the watermark released in each batch
        for device, group in final.iloc[batch_id * size : (batch_id + 1) * size].groupby("device_id"):
            readings = [(t, v, None) for t, v in zip(group.event_time_us, group.sensor_freq, strict=True)]
            _, memory[device] = advance(versioned, device, memory.get(device, {}), readings, MARK_MS * 1000)
            for r, n, mean, spread, as_of in baselines(versioned, memory[device]):
                rows.append({"device_id": device, "rule_id": r.id, "rule_version": r.version, "events": n,
                             "mean": mean, "spread": spread, "as_of": pd.Timestamp(as_of, unit="us"),
                             "batch_id": batch_id})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_rows_the_query_appends_pass_and_every_device_is_judged():
    events = _events()
    assert judge_baselines([RULE], events, _appended(events), MARK_MS) == 3


def _mean_off(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    rows.loc[rows.batch_id.idxmax(), "mean"] += 0.5
    return rows


def _last_append_lost(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows.batch_id < rows.batch_id.max()]


def _a_device_missing(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows.device_id != "dev-2"]


@pytest.mark.parametrize(
    ("plant", "says"),
    [
        (_mean_off, r"last odd row says .* its events give"),
        (_last_append_lost, r"last odd row says \(events, as_of µs, mean, spread\) \(\d+, "),
        (_a_device_missing, r"no odd row for dev-2 \(12 events\)"),
    ],
)
def test_a_planted_bug_fails_the_verdict_naming_it(plant, says):
    events = _events()
    with pytest.raises(AssertionError, match=says):
        judge_baselines([RULE], events, plant(_appended(events)), MARK_MS)
