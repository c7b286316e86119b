"""Health rules over ``stream_progress`` rows: is a streaming query keeping up, and is its state bounded?

Every rule takes the progress table as a pandas frame (any number of queries and runs, one row per
micro-batch as written by :mod:`sensorcep.observability.monitoring`), judges each run (``query_name`` + ``run_id``,
batches in ``batch_id`` order) on its own, and returns one :class:`Verdict` per run: a plain sentence
with the numbers, plus the rows that prove it, so a notebook can show both the table and the evidence.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pandas as pd

from sensorcep.settings import parse_duration, parse_trigger

HEALTH_COLUMNS = ["query_name", "run_id", "rule", "healthy", "summary"]


@dataclass(frozen=True)
class Verdict:
    """One rule's judgement of one run of one query."""

    rule: str
    query_name: str | None
    run_id: str | None
    healthy: bool
    summary: str
    #: the rows that prove an unhealthy verdict; for a healthy one, the rows looked at (may be empty)
    evidence: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False, repr=False)


# ----------------------------------------------------------------------------------- helpers
def trigger_interval_ms(trigger: str) -> int:
    """Trigger parameter -> its interval in ms; 0 for triggers that run as fast as they can
    ("availableNow", "once", "0 seconds"), where batches cannot be late."""
    kwargs = parse_trigger(trigger)
    if "processingTime" not in kwargs:
        return 0
    return int(round(parse_duration(kwargs["processingTime"], "trigger") * 1000))


def _runs(progress: pd.DataFrame | None) -> Iterator[tuple[str | None, str | None, pd.DataFrame]]:
    """(query_name, run_id, that run's rows in batch order) for every run in the frame."""
    if progress is None or progress.empty:
        return
    for (query, run), rows in progress.groupby(["query_name", "run_id"], sort=True, dropna=False):
        yield (
            None if pd.isna(query) else query,
            None if pd.isna(run) else run,
            rows.sort_values("batch_id", kind="stable").reset_index(drop=True),
        )


def _streaks(flags: pd.Series, at_least: int) -> list[tuple[int, int]]:
    """Positions (first, last) of every run of consecutive True values at least ``at_least`` long."""
    found, start = [], None
    for pos, flag in enumerate(list(flags) + [False]):
        if flag and start is None:
            start = pos
        elif not flag and start is not None:
            if pos - start >= at_least:
                found.append((start, pos - 1))
            start = None
    return found


def _longest(flags: pd.Series) -> int:
    return max((last - first + 1 for first, last in _streaks(flags, 1)), default=0)


def _from_streaks(rows: pd.DataFrame, streaks: list[tuple[int, int]]) -> pd.DataFrame:
    return pd.concat([rows.iloc[first : last + 1] for first, last in streaks]).reset_index(drop=True)


def _batches(rows: pd.DataFrame) -> str:
    first, last = int(rows.batch_id.iloc[0]), int(rows.batch_id.iloc[-1])
    return f"batch {first}" if first == last else f"batches {first}-{last}"


def _more(streaks: list) -> str:
    return f"; {len(streaks) - 1} more such stretch(es)" if len(streaks) > 1 else ""


def _when(ts) -> str:
    return f"{pd.Timestamp(ts):%Y-%m-%d %H:%M:%S}"


def _has_input(rows: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(rows.num_input_rows, errors="coerce").fillna(0) > 0


# ----------------------------------------------------------------------------------- rules
def falling_behind(progress: pd.DataFrame, consecutive: int = 3) -> list[Verdict]:
    """Unhealthy when the processing rate stays below the input rate for ``consecutive`` batches in a
    row: the backlog grows and latency with it.

    Only batches with input count. A batch whose rates are unknown (NaN/None, e.g. a zero-length
    interval) is skipped: it neither extends nor breaks a stretch. A batch without input breaks it,
    since an empty batch means the query had caught up.
    """
    verdicts = []
    for query, run, rows in _runs(progress):
        processed = pd.to_numeric(rows.processed_rows_per_second, errors="coerce")
        incoming = pd.to_numeric(rows.input_rows_per_second, errors="coerce")
        has_input = _has_input(rows)
        keep = ~has_input | (processed.notna() & incoming.notna())
        rows, processed, incoming, has_input = rows[keep], processed[keep], incoming[keep], has_input[keep]
        behind = has_input & (processed < incoming)
        streaks = _streaks(behind, consecutive)
        looked = rows[has_input].reset_index(drop=True)
        if not streaks:
            summary = (
                f"processing kept up with input over {len(looked)} batches with input (longest stretch "
                f"below the input rate: {_longest(behind)} batches; limit {consecutive})"
            )
            verdicts.append(Verdict("falling_behind", query, run, True, summary, looked))
            continue
        first, last = max(streaks, key=lambda s: s[1] - s[0])
        worst = (processed / incoming).iloc[first : last + 1].idxmin()
        summary = (
            f"processing rate below input rate for {last - first + 1} consecutive batches "
            f"({_batches(rows.iloc[first : last + 1])}; worst {processed[worst]:,.0f} vs "
            f"{incoming[worst]:,.0f} rows/s){_more(streaks)}"
        )
        verdicts.append(Verdict("falling_behind", query, run, False, summary, _from_streaks(rows, streaks)))
    return verdicts


def slow_batches(
    progress: pd.DataFrame, trigger_interval_ms: Mapping[str, float] | float | None, share: float = 0.2
) -> list[Verdict]:
    """Unhealthy when more than ``share`` of the batches with input took longer than the trigger
    interval: the query cannot hold its schedule and every late batch delays the next one.

    ``trigger_interval_ms`` is one number for every query or ``{query_name: ms}``; an interval of 0 or
    none at all (availableNow, "0 seconds": as fast as possible) means the rule does not apply.
    """
    verdicts = []
    for query, run, rows in _runs(progress):
        interval = trigger_interval_ms.get(query) if isinstance(trigger_interval_ms, Mapping) else trigger_interval_ms
        duration = pd.to_numeric(rows.batch_duration_ms, errors="coerce")
        looked = rows[_has_input(rows) & duration.notna()].reset_index(drop=True)
        if not interval or pd.isna(interval):
            summary = (
                "does not apply: no trigger interval, the query runs batches as fast as possible "
                "(availableNow / 0 seconds)"
            )
            verdicts.append(Verdict("slow_batches", query, run, True, summary, looked.iloc[0:0]))
            continue
        slow = looked[pd.to_numeric(looked.batch_duration_ms) > interval].reset_index(drop=True)
        if not len(looked):
            summary = f"no batches with input to compare with the {interval:,.0f} ms trigger interval"
            verdicts.append(Verdict("slow_batches", query, run, True, summary, looked))
            continue
        ratio = len(slow) / len(looked)
        summary = (
            f"{len(slow)} of {len(looked)} batches with input ({ratio:.0%}) took longer than the "
            f"{interval:,.0f} ms trigger interval"
        )
        if ratio > share:
            summary += f" (worst {slow.batch_duration_ms.max():,.0f} ms; allowed {share:.0%})"
            verdicts.append(Verdict("slow_batches", query, run, False, summary, slow))
        else:
            summary += f" (allowed {share:.0%})"
            verdicts.append(Verdict("slow_batches", query, run, True, summary, looked))
    return verdicts


def state_growth(progress: pd.DataFrame, min_batches: int = 6) -> list[Verdict]:
    """Unhealthy when state grows without bound: over the second half of the run ``state_rows_total``
    never decreases and ends above twice the first half's maximum. A query whose windows close shows
    decreases as the watermark frees them; one that never frees state eventually runs out of memory.

    The evidence is the second half of the batches with state (the growth itself).
    """
    verdicts = []
    for query, run, rows in _runs(progress):
        rows = rows[pd.to_numeric(rows.state_rows_total, errors="coerce").notna()].reset_index(drop=True)
        if len(rows) < min_batches:
            summary = f"not enough batches with state to judge growth ({len(rows)}, need {min_batches})"
            verdicts.append(Verdict("state_growth", query, run, True, summary, rows))
            continue
        state = pd.to_numeric(rows.state_rows_total)
        half = len(rows) // 2
        first_max, second = state.iloc[:half].max(), state.iloc[half:]
        decreases = int((second.diff() < 0).sum())
        last = state.iloc[-1]
        growth = (
            f"{last / first_max:.1f}x the first-half maximum of {first_max:,.0f}"
            if first_max
            else "up from a first-half maximum of 0"
        )
        if decreases == 0 and last > 2 * first_max:
            evidence = rows.iloc[half:].reset_index(drop=True)
            summary = (
                f"state grew without ever decreasing over the second half ({_batches(evidence)}) "
                f"to {last:,.0f} rows, {growth}"
            )
            verdicts.append(Verdict("state_growth", query, run, False, summary, evidence))
        else:
            summary = (
                f"state stayed bounded: {last:,.0f} rows at the end vs a first-half maximum of "
                f"{first_max:,.0f}, {decreases} decrease(s) in the second half"
            )
            verdicts.append(Verdict("state_growth", query, run, True, summary, rows))
    return verdicts


def watermark_stalled(progress: pd.DataFrame, consecutive: int = 3) -> list[Verdict]:
    """Unhealthy when the watermark stays put for ``consecutive`` batches with input while the data's
    event time keeps moving past it: data keeps arriving but windows never close (typically one input
    whose event time is stuck holding the global watermark back).

    A stalled batch has input, a watermark no later than the previous batch with input, and an
    ``event_time_max`` later than the watermark and than every earlier batch's. A query without a
    watermark (stateless) is not judged.
    """
    verdicts = []
    for query, run, rows in _runs(progress):
        rows = rows[_has_input(rows)].reset_index(drop=True)
        watermark = pd.to_datetime(rows.watermark, utc=True)
        event_max = pd.to_datetime(rows.event_time_max, utc=True)
        if watermark.isna().all():
            summary = "does not apply: no watermark (stateless query)" if len(rows) else "no batches with input"
            verdicts.append(Verdict("watermark_stalled", query, run, True, summary, rows.iloc[0:0]))
            continue
        stalled = (
            watermark.notna()
            & (watermark <= watermark.shift(1))
            & (event_max > watermark)
            & (event_max > event_max.cummax().ffill().shift(1))
        )
        streaks = _streaks(stalled, consecutive)
        if not streaks:
            summary = (
                f"watermark advanced from {_when(watermark.min())} to {_when(watermark.max())} over "
                f"{len(rows)} batches with input (longest stall {_longest(stalled)}, "
                f"limit {consecutive})"
            )
            verdicts.append(Verdict("watermark_stalled", query, run, True, summary, rows))
            continue
        first, last = max(streaks, key=lambda s: s[1] - s[0])
        summary = (
            f"watermark stuck at {_when(watermark[first])} for {last - first + 1} consecutive "
            f"batches with input ({_batches(rows.iloc[first : last + 1])}) while event time "
            f"reached {_when(event_max.iloc[first : last + 1].max())}{_more(streaks)}"
        )
        verdicts.append(Verdict("watermark_stalled", query, run, False, summary, _from_streaks(rows, streaks)))
    return verdicts


def late_rows(progress: pd.DataFrame, max_share: float = 0.01) -> list[Verdict]:
    """Unhealthy when more than ``max_share`` of the input rows were dropped as later than the
    watermark: the watermark delay is too short for how late the data really arrives.

    ``rows_dropped_by_watermark`` is counted at the stateful operators, so the share is approximate
    when rows are filtered or expanded before them.
    """
    verdicts = []
    for query, run, rows in _runs(progress):
        dropped_col = pd.to_numeric(rows.rows_dropped_by_watermark, errors="coerce")
        dropped = dropped_col.sum()
        total = pd.to_numeric(rows.num_input_rows, errors="coerce").sum()
        if dropped_col.isna().all():
            summary = "does not apply: no stateful operator reports rows dropped by the watermark"
            verdicts.append(Verdict("late_rows", query, run, True, summary, rows.iloc[0:0]))
            continue
        if not total:
            summary = "no input rows"
            verdicts.append(Verdict("late_rows", query, run, True, summary, rows.iloc[0:0]))
            continue
        ratio = dropped / total
        summary = (
            f"{dropped:,.0f} of {total:,.0f} input rows ({ratio:.2%}) dropped as later than the "
            f"watermark (allowed {max_share:.2%})"
        )
        if ratio > max_share:
            evidence = rows[dropped_col > 0].reset_index(drop=True)
            verdicts.append(Verdict("late_rows", query, run, False, summary, evidence))
        else:
            verdicts.append(Verdict("late_rows", query, run, True, summary, rows))
    return verdicts


# ----------------------------------------------------------------------------------- all rules
RULES = (falling_behind, slow_batches, state_growth, watermark_stalled, late_rows)


def check_health(
    progress: pd.DataFrame, trigger_interval_ms: Mapping[str, float] | float | None = None, **thresholds
) -> list[Verdict]:
    """Run every rule. ``thresholds`` are the rules' keyword parameters by name (``consecutive``,
    ``share``, ``min_batches``, ``max_share``); each goes to every rule that takes it."""
    known = {name for rule in RULES for name in inspect.signature(rule).parameters}
    unknown = sorted(set(thresholds) - (known - {"progress", "trigger_interval_ms"}))
    if unknown:
        raise TypeError(f"unknown threshold(s): {', '.join(unknown)}")
    verdicts = []
    for rule in RULES:
        params = inspect.signature(rule).parameters
        kwargs = {name: value for name, value in thresholds.items() if name in params}
        if "trigger_interval_ms" in params:
            kwargs["trigger_interval_ms"] = trigger_interval_ms
        verdicts.extend(rule(progress, **kwargs))
    return verdicts


EVIDENCE_COLUMNS = [
    "batch_id",
    "num_input_rows",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "state_rows_total",
    "watermark",
]


def unhealthy_evidence(verdicts: list[Verdict], rows: int = 10) -> pd.DataFrame:
    """The evidence of every unhealthy verdict (its first ``rows`` rows), tagged with query, rule and summary."""
    frames = [
        v.evidence.reindex(columns=EVIDENCE_COLUMNS)
        .head(rows)
        .assign(query_name=v.query_name, rule=v.rule, summary=v.summary)
        for v in verdicts
        if not v.healthy
    ]
    columns = ["query_name", "rule", "summary", *EVIDENCE_COLUMNS]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def health_line(verdicts: list[Verdict]) -> str:
    """One sentence: how many verdicts are unhealthy, and which."""
    unhealthy = [f"{v.query_name} / {v.rule}" for v in verdicts if not v.healthy]
    return f"{len(unhealthy)} unhealthy verdict(s) of {len(verdicts)}" + (
        f": {', '.join(unhealthy)}" if unhealthy else ""
    )


def health_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """Verdicts -> one row each (query_name, run_id, rule, healthy, summary), unhealthy first."""
    table = pd.DataFrame(
        [{name: getattr(v, name) for name in HEALTH_COLUMNS} for v in verdicts], columns=HEALTH_COLUMNS
    )
    return table.sort_values(["healthy", "query_name", "run_id"], kind="stable").reset_index(drop=True)
