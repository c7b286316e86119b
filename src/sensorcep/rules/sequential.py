"""The stateful rule kinds (rate, count, absence, sequence, baseline, aggregate, pattern) over one device's events in
event-time order.

Plain Python, no Spark.

:func:`advance` is the whole logic of the stateful rules query's processor
(:mod:`sensorcep.pipeline.stateful_rules`): given what a device's memory holds, the events that the watermark has
made final (every event at or before it is known: later copies are dropped as late) and the watermark, it returns
the alerts they fire and the new memory. The memory is a small JSON-able dict per device:

* ``rate``: the device's previous event (time, value);
* ``count``: the times of the matching events still within ``within`` of the newest;
* ``absence``: the last event's time, and for which last event the absence alert was already sent;
* ``sequence``: the time of the latest event that met ``first`` and has not been used up;
* ``baseline``: events seen, exponentially weighted mean and variance, the last event's time;
* ``aggregate``: each open window's start, event count, sum, mean, M2 (for the spread), min and max: at most
  window / slide windows, each closed (and judged) once the watermark passes its end;
* ``pattern``: the partial matches, each [step, events taken by that step, blocked by a ``not`` event, first event's
  time, the time of the first and last event of each step taken]: one per (step, count, blocked) state (a pattern
  ending in ``not``: one per state and first event within ``within``), so at most 2 x the steps' repeat counts summed
  (:func:`pattern_runs`). A pattern's alert says those times in its ``detail`` (:func:`match_detail`).

Each rule's memory is kept under ``<rule id>:<version>``: a changed rule starts afresh, and the memory of a rule no
longer in force is dropped. Because events are released only when the watermark passes them, the result does not
depend on how the events were cut into micro-batches, nor on their arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import OPERATOR, Judged, options_of, per_object


@dataclass(frozen=True)
class Fired:
    """An alert of a stateful rule: which device, at which event time, the value (None for an absence)."""

    device_id: str
    event_time_us: int
    sensor_freq: float | None
    kafka_timestamp_us: int | None
    rule_id: str
    rule_version: int
    rule: str
    #: what the alert's events were, for people (a pattern: its steps' event times); empty for the other kinds
    detail: str = ""


def applies(versioned: VersionedRule, device_id: str, scoped: dict[tuple, list[str]]) -> bool:
    scope = versioned.rule.scope
    if scope is None:
        return True
    if scope.column == "device_id":
        return device_id == scope.value
    return device_id in scoped.get((scope.column, scope.value), ())


def _key(versioned: VersionedRule) -> str:
    return f"{versioned.id}:{versioned.version}"


def advance(
    rules: list[VersionedRule],
    device_id: str,
    memory: dict,
    events: Iterable[tuple],
    watermark_us: int,
    scoped: dict[tuple, list[str]] | None = None,
) -> tuple[list[Fired], dict]:
    """Run the final ``events`` (event_time_us, sensor_freq, kafka_timestamp_us[, the other fields the rules read,
    by name]), oldest first, through the ``rules`` that apply to ``device_id``; then the absences the watermark
    proves. Returns (alerts, memory). A rate or baseline rule skips an event that does not carry its field as a
    number (:func:`~sensorcep.rules.model.number`); a condition on such a field is not met."""
    scoped = scoped or {}
    mine = [r for r in rules if applies(r, device_id, scoped)]
    memory = {k: v for k, v in memory.items() if k in {_key(r) for r in mine}}
    fired: list[Fired] = []

    def alert(r: VersionedRule, t_us: int, value: float | None, kafka_us: int | None, detail: str = "") -> None:
        fired.append(Fired(device_id, t_us, value, kafka_us, r.id, r.version, r.rule.text, detail))

    keyed = [(r, r.rule, _key(r)) for r in mine]  # worked out once per call, not per event
    for _, rule, key in keyed:  # windows are updated in place: the caller's memory stays as it was
        if rule.kind == "aggregate" and key in memory:
            memory[key] = [list(window) for window in memory[key]]
    for t_us, value, kafka_us, *extra in sorted(events, key=lambda e: e[0]):
        event = Judged({**(extra[0] if extra else {}), "sensor_freq": value})
        for r, rule, key in keyed:
            kind = rule.kind
            if kind == "rate" or kind == "baseline":
                reading = event.number(rule.field)
                if reading is None:
                    continue
            if kind == "rate":
                previous = memory.get(key)
                if previous is not None and t_us > previous[0]:
                    change = (reading - previous[1]) / ((t_us - previous[0]) / 1e6)
                    if OPERATOR[rule.op](change, rule.value):
                        alert(r, t_us, value, kafka_us)
                memory[key] = [t_us, reading]
            elif kind == "count":
                if event.holds(rule.test):
                    recent = [t for t in memory.get(key, []) if t >= t_us - rule.within_us] + [t_us]
                    if len(recent) >= rule.at_least:
                        alert(r, t_us, value, kafka_us)
                    memory[key] = recent[-rule.at_least :]  # older ones can never count again
            elif kind == "sequence":
                first_at = memory.get(key)
                if first_at is not None and event.holds(rule.then) and t_us - first_at <= rule.within_us:
                    alert(r, t_us, value, kafka_us)
                    first_at = None  # used up
                memory[key] = t_us if event.holds(rule.first) else first_at
            elif kind == "baseline":
                n, mean, var, _ = memory.get(key, [0, 0.0, 0.0, None])
                # a constant run (spread 0) fires on any departure, unless min_spread sets a floor
                if n >= rule.min_events and abs(reading - mean) > rule.k * max(math.sqrt(var), rule.spread_floor):
                    alert(r, t_us, value, kafka_us)
                if n == 0:
                    mean, var = reading, 0.0
                else:
                    diff = reading - mean
                    mean += rule.alpha * diff
                    var = (1 - rule.alpha) * (var + diff * rule.alpha * diff)
                memory[key] = [n + 1, mean, var, t_us]
            elif kind == "aggregate":
                reading = 1.0 if rule.field is None else event.number(rule.field)
                if reading is not None:
                    memory[key] = _add_to_windows(rule, memory.get(key, []), t_us, reading)
            elif kind == "pattern":
                due = _pattern_due(rule, memory.get(key, []), t_us - 1)
                if due is not None:  # a trailing not held until within ended, before this event: the match ends there
                    alert(r, due[0], None, None, match_detail(rule, due[1]))
                    memory[key] = []
                matched, memory[key] = pattern_runs(rule, memory.get(key, []), t_us, event)
                if matched is not None:
                    alert(r, t_us, value, kafka_us, match_detail(rule, matched))
            elif kind == "absence":
                last, sent_for = memory.get(key, [None, None])
                if last is not None and t_us - last > rule.within_us and sent_for != last:
                    alert(r, last + rule.within_us, None, None)
                memory[key] = [t_us, None]
    for r in mine:
        if r.rule.kind == "pattern" and memory.get(_key(r)):
            due = _pattern_due(r.rule, memory[_key(r)], watermark_us)
            if due is not None:
                alert(r, due[0], None, None, match_detail(r.rule, due[1]))
                memory[_key(r)] = []
            else:  # a partial match whose within has passed can no longer complete
                memory[_key(r)] = [run for run in memory[_key(r)] if run[3] + r.rule.within_us >= watermark_us]
        if r.rule.kind == "aggregate" and memory.get(_key(r)):
            still_open = []
            for window in memory[_key(r)]:
                end_us = window[0] + r.rule.window_us
                if end_us > watermark_us:
                    still_open.append(window)
                elif _meets(r.rule, window, compared_with(r.rule, device_id, scoped)):
                    alert(r, end_us, None, None)
            memory[_key(r)] = still_open
        if r.rule.kind == "absence":
            last, sent_for = memory.get(_key(r), [None, None])
            if last is not None and sent_for != last and last + r.rule.within_us <= watermark_us:
                alert(r, last + r.rule.within_us, None, None)
                memory[_key(r)] = [last, last]
    return fired, memory


def _add_to_windows(rule, windows: list[list], t_us: int, reading: float) -> list[list]:
    """An event's reading added to every window of ``rule`` it falls into (created as needed), in place: each window
    is [start_us, events, sum, mean, m2, min, max], the mean and m2 by Welford's update (for stddev); the list stays
    ordered by start."""
    newest = t_us - t_us % rule.slide_us  # the latest window that holds t, aligned as Spark's window()
    oldest = newest - ((newest - (t_us - rule.window_us)) - 1) // rule.slide_us * rule.slide_us
    if not windows or windows[-1][0] < newest:  # a window to open (events come oldest first: the older ones are open)
        held = {window[0] for window in windows if window[0] >= oldest}
        missing = [[start, 0, 0.0, 0.0, 0.0, math.inf, -math.inf]
                   for start in range(oldest, newest + 1, rule.slide_us) if start not in held]  # fmt: skip
        ordered = not windows or missing[0][0] > windows[-1][0]
        windows = windows + missing if ordered else sorted(windows + missing)
    for window in reversed(windows):
        start = window[0]
        if start < oldest:
            break
        if start > newest:
            continue
        n = window[1] + 1
        delta = reading - window[3]
        mean = window[3] + delta / n
        window[1], window[2], window[3], window[4] = n, window[2] + reading, mean, window[4] + delta * (reading - mean)
        if reading < window[5]:
            window[5] = reading
        if reading > window[6]:
            window[6] = reading
    return windows


def _compiled(rule) -> tuple[list, list, bool]:
    """A pattern's positive steps (condition as :func:`~sensorcep.rules.model.options_of`, min, max or None), the
    conditions (the same) of the ``not`` steps after each, and whether it ends in a ``not`` step (worked out once per
    rule object)."""
    return per_object(_COMPILED, rule, _compile)


#: :func:`_compiled` patterns
_COMPILED: dict[int, tuple] = {}


def _compile(rule) -> tuple[list, list, bool]:
    positives, nots = [], []
    for step in rule.steps:
        if step.absent:
            nots[-1].append(options_of(step.when))
        else:
            positives.append((options_of(step.when), step.repeat.min, step.repeat.max))
            nots.append([])
    return positives, nots, rule.steps[-1].absent


def pattern_runs(rule, runs: list[list], t_us: int, event: Judged) -> tuple[list | None, list[list]]:
    """One event through a pattern's partial matches (each [step, count, blocked, first event's time, spans]: spans
    holds [first, last] event time of each step taken): the spans of the match that completes at it (None: none), and
    the partial matches after it (none after a match: matching starts again after it).

    Each partial match may ignore the event (it stays, blocked if the event meets a ``not`` step after a step it has
    taken enough events for), take it as one more event of its step (up to the step's max), or as the first event of
    the next step (not blocked); an event meeting the first step also begins a partial match. Partial matches in the
    same state that begin later can do whatever earlier ones can, for longer: only the latest is kept (a pattern ending
    in ``not``: one per first event, as the earliest one's within ends first). Of several matches completing at the
    same event, the one that began first is reported."""
    positives, nots, trailing = _compiled(rule)
    last = len(positives) - 1
    nexts: list[list] = []
    completed: list[list] = []
    for run in runs:
        step, count, blocked, first = run[:4]
        spans = run[4] if len(run) > 4 else []  # a partial match kept before the spans were
        if t_us - first > rule.within_us:
            continue  # too late for this partial match
        when, least, most = positives[step]
        enough = count >= least
        nexts.append([step, count, blocked or (enough and any(event.meets(n) for n in nots[step])), first, spans])
        if (most is None or count < most) and event.meets(when):
            taken = min(count + 1, least) if most is None else count + 1  # unbounded: beyond min, counts are alike
            grown = [*spans[:-1], [spans[-1][0], t_us]] if spans else [[t_us, t_us]]
            nexts.append([step, taken, False, first, grown])
            if step == last and taken >= least and not trailing:
                completed.append(grown)
        if enough and not blocked and step < last and event.meets(positives[step + 1][0]):
            nexts.append([step + 1, 1, False, first, [*spans, [t_us, t_us]]])
            if step + 1 == last and positives[last][1] == 1 and not trailing:
                completed.append([*spans, [t_us, t_us]])
    if event.meets(positives[0][0]):
        nexts.append([0, 1, False, t_us, [[t_us, t_us]]])
        if last == 0 and positives[0][1] == 1 and not trailing:
            completed.append([[t_us, t_us]])
    if completed:
        return min(completed, key=lambda spans: spans[0][0] if spans else t_us), []
    kept: dict[tuple, list] = {}
    for run in nexts:
        state = (run[0], run[1], run[2]) + ((run[3],) if trailing else ())
        if state not in kept or run[3] > kept[state][3]:
            kept[state] = run
    return None, sorted(kept.values())


def _pattern_due(rule, runs: list[list], until_us: int) -> tuple[int, list] | None:
    """A pattern ending in ``not``: the end of ``within`` of the earliest partial match that has taken its last
    positive step and was not blocked, if that end is at or before ``until_us`` (every event up to it is known), and
    that match's spans."""
    positives, _, trailing = _compiled(rule)
    if not trailing:
        return None
    ready = [run for run in runs if run[0] == len(positives) - 1 and run[1] >= positives[-1][1] and not run[2]]
    if not ready:
        return None
    earliest = min(ready, key=lambda run: run[3])
    due = earliest[3] + rule.within_us
    return (due, earliest[4] if len(earliest) > 4 else []) if due <= until_us else None


def match_detail(rule, spans: list) -> str:
    """A match's events as people read them, by the rule's step numbers (a ``not`` step has none):
    ``step 1 at <time>; step 3 at <first> to <last>`` (UTC, ms; a step that repeats: its first and last event)."""

    def at(t_us: int) -> str:
        return datetime.fromtimestamp(t_us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    numbers = [index for index, step in enumerate(rule.steps, start=1) if not step.absent]
    return "; ".join(
        f"step {n} at {at(a)}" if a == b else f"step {n} at {at(a)} to {at(b)}"
        for n, (a, b) in zip(numbers, spans, strict=False)
    )


def aggregate(function: str, window: list) -> float | None:
    """A closed window's aggregate (None: it has none, e.g. the stddev of one event)."""
    _, n, total, _, m2, low, high = window
    if function == "stddev":
        return math.sqrt(m2 / (n - 1)) if n >= 2 else None
    return {"avg": total / n, "min": low, "max": high, "sum": total, "count": float(n), "range": high - low}[function]


def compared_with(rule, device_id: str, scoped: dict) -> float | None:
    """What an aggregate rule compares a window's aggregate with: its ``value``, or the device's number in the
    ``devices`` column of ``value_from`` (``scoped[("value_from", column)]``: device id -> number; None: none)."""
    if rule.devices_column is None:
        return rule.value
    return scoped.get(("value_from", rule.devices_column), {}).get(device_id)


def _meets(rule, window: list, limit: float | None) -> bool:
    found = aggregate(rule.function, window)
    return found is not None and limit is not None and OPERATOR[rule.op](found, limit)


def baselines(rules: list[VersionedRule], memory: dict) -> list[tuple[VersionedRule, int, float, float, int]]:
    """The device's baseline per baseline rule: (rule, events, mean, spread, last event's time in µs)."""
    found = []
    for r in rules:
        if r.rule.kind == "baseline" and _key(r) in memory:
            n, mean, var, as_of = memory[_key(r)]
            found.append((r, n, mean, math.sqrt(var), as_of))
    return found


def next_deadline_us(rules: list[VersionedRule], memory: dict) -> int | None:
    """The earliest event time at which an absence could fire, an aggregate's window close or a pattern's trailing
    ``not`` end with no further event (for the processor's timer)."""
    deadlines = []
    for r in rules:
        if r.rule.kind == "aggregate" and memory.get(_key(r)):
            deadlines.append(min(window[0] for window in memory[_key(r)]) + r.rule.window_us)
        if r.rule.kind == "absence" and _key(r) in memory:
            last, sent_for = memory[_key(r)]
            if sent_for != last:
                deadlines.append(last + r.rule.within_us)
        if r.rule.kind == "pattern" and memory.get(_key(r)) and r.rule.steps[-1].absent:
            deadlines.append(min(run[3] for run in memory[_key(r)]) + r.rule.within_us)
    return min(deadlines, default=None)
