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

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

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
    number (:func:`~sensorcep.rules.model.number`); a condition on such a field is not met.

    Each rule takes the events in one loop of its own (its constants worked out once per rule object,
    :func:`_constants`); the alerts come out in event order, and for one event in the order of ``rules``, as if each
    event had gone through every rule in turn. The rules' (id, version) are distinct, as the catalog keeps them: each
    names the rule's memory."""
    scoped = scoped or {}
    mine = [r for r in rules if applies(r, device_id, scoped)]
    memory = {k: v for k, v in memory.items() if k in {_key(r) for r in mine}}
    ordered = sorted(events, key=lambda e: e[0])
    judged = [Judged({**(extra[0] if extra else {}), "sensor_freq": value}) for _, value, _, *extra in ordered]
    tagged: list[tuple[int, int, Fired]] = []  # (event's position, rule's, alert): sorted into event order below

    def alerting(index: int, r: VersionedRule):
        def alert(at: int, t_us: int, value, kafka_us, detail: str = "") -> None:
            fired = Fired(device_id, t_us, value, kafka_us, r.id, r.version, _text(r.rule), detail)
            tagged.append((at, index, fired))

        return alert

    for index, r in enumerate(mine):
        run = _RUNS.get(r.rule.kind)  # a stateless or group rule has none: nothing to do here
        if run is not None:
            run(r.rule, _key(r), memory, ordered, judged, alerting(index, r))
    for index, r in enumerate(mine):
        key, alert = _key(r), functools.partial(alerting(index, r), len(ordered))  # after every event
        if r.rule.kind == "pattern" and memory.get(key):
            due = _pattern_due(r.rule, memory[key], watermark_us)
            if due is not None:
                alert(due[0], None, None, match_detail(r.rule, due[1]))
                memory[key] = []
            else:  # a partial match whose within has passed can no longer complete
                memory[key] = [run for run in memory[key] if run[3] + r.rule.within_us >= watermark_us]
        if r.rule.kind == "aggregate" and memory.get(key):
            still_open = []
            for window in memory[key]:
                end_us = window[0] + r.rule.window_us
                if end_us > watermark_us:
                    still_open.append(window)
                elif _meets(r.rule, window, compared_with(r.rule, device_id, scoped)):
                    alert(end_us, None, None)
            memory[key] = still_open
        if r.rule.kind == "absence":
            last, sent_for = memory.get(key, [None, None])
            if last is not None and sent_for != last and last + r.rule.within_us <= watermark_us:
                alert(last + r.rule.within_us, None, None)
                memory[key] = [last, last]
    tagged.sort(key=lambda tag: (tag[0], tag[1]))  # stable: one rule's alerts at one event keep their order
    return [f for _, _, f in tagged], memory


def _text(rule) -> str:
    """The rule as its alerts say it (worked out once per rule object)."""
    return per_object(_TEXTS, rule, lambda rule: rule.text)


#: :func:`_text` of each rule
_TEXTS: dict[int, str] = {}


def _constants(rule) -> tuple:
    """What a rule's loop reads for every event, worked out once per rule object: its operator, durations and the
    :func:`~sensorcep.rules.model.options_of` of its conditions (an inline condition is a new object at each read)."""
    return per_object(_CONSTANTS, rule, _work_out)


#: :func:`_constants` of each rule
_CONSTANTS: dict[int, tuple] = {}


def _work_out(rule) -> tuple:
    kind = rule.kind
    if kind == "rate":
        return rule.field, OPERATOR[rule.op], rule.value
    if kind == "count":
        return options_of(rule.test), rule.within_us, rule.at_least
    if kind == "sequence":
        return options_of(rule.first), options_of(rule.then), rule.within_us
    if kind == "baseline":
        return rule.field, rule.min_events, rule.k, rule.spread_floor, rule.alpha
    if kind == "aggregate":
        return rule.field, rule.window_us, rule.slide_us
    if kind == "absence":
        return (rule.within_us,)
    return ()


def _run_rate(rule, key, memory, ordered, judged, alert) -> None:
    field, compare, value = _constants(rule)
    previous = memory.get(key)
    for at, (t_us, reading_value, kafka_us, *_) in enumerate(ordered):
        reading = judged[at].number(field)
        if reading is None:
            continue
        if previous is not None and t_us > previous[0]:
            if compare((reading - previous[1]) / ((t_us - previous[0]) / 1e6), value):
                alert(at, t_us, reading_value, kafka_us)
        previous = memory[key] = [t_us, reading]


def _run_count(rule, key, memory, ordered, judged, alert) -> None:
    test, within_us, at_least = _constants(rule)
    for at, (t_us, value, kafka_us, *_) in enumerate(ordered):
        if judged[at].meets(test):
            recent = [t for t in memory.get(key, []) if t >= t_us - within_us] + [t_us]
            if len(recent) >= at_least:
                alert(at, t_us, value, kafka_us)
            memory[key] = recent[-at_least:]  # older ones can never count again


def _run_sequence(rule, key, memory, ordered, judged, alert) -> None:
    first, then, within_us = _constants(rule)
    first_at = memory.get(key)
    for at, (t_us, value, kafka_us, *_) in enumerate(ordered):
        event = judged[at]
        if first_at is not None and event.meets(then) and t_us - first_at <= within_us:
            alert(at, t_us, value, kafka_us)
            first_at = None  # used up
        first_at = memory[key] = t_us if event.meets(first) else first_at


def _run_baseline(rule, key, memory, ordered, judged, alert) -> None:
    field, min_events, k, floor, alpha = _constants(rule)
    for at, (t_us, value, kafka_us, *_) in enumerate(ordered):
        reading = judged[at].number(field)
        if reading is None:
            continue
        n, mean, var, _ = memory.get(key, [0, 0.0, 0.0, None])
        # a constant run (spread 0) fires on any departure, unless min_spread sets a floor
        if n >= min_events and abs(reading - mean) > k * max(math.sqrt(var), floor):
            alert(at, t_us, value, kafka_us)
        if n == 0:
            mean, var = reading, 0.0
        else:
            diff = reading - mean
            mean += alpha * diff
            var = (1 - alpha) * (var + diff * alpha * diff)
        memory[key] = [n + 1, mean, var, t_us]


def _run_aggregate(rule, key, memory, ordered, judged, alert) -> None:
    """Each event's reading into every window it falls into, in place: each window is [start_us, events, sum, mean,
    m2, min, max], the mean and m2 by Welford's update (for stddev); the list stays ordered by start."""
    field, window_us, slide_us = _constants(rule)
    if key in memory:  # windows are updated in place: the caller's memory stays as it was
        memory[key] = [list(window) for window in memory[key]]
    windows = memory.get(key, [])
    for at, (t_us, *_) in enumerate(ordered):
        reading = 1.0 if field is None else judged[at].number(field)
        if reading is None:
            continue
        newest = t_us - t_us % slide_us  # the latest window that holds t, aligned as Spark's window()
        oldest = newest - ((newest - (t_us - window_us)) - 1) // slide_us * slide_us
        if not windows or windows[-1][0] < newest:  # a window to open (events come oldest first: older ones are open)
            windows = _open_windows(windows, oldest, newest, slide_us)
        for window in reversed(windows):
            start = window[0]
            if start < oldest:
                break
            if start > newest:
                continue
            n = window[1] + 1
            mean = window[3]
            delta = reading - mean
            mean += delta / n
            window[1], window[2], window[3] = n, window[2] + reading, mean
            window[4] += delta * (reading - mean)
            if reading < window[5]:
                window[5] = reading
            if reading > window[6]:
                window[6] = reading
        memory[key] = windows


def _run_pattern(rule, key, memory, ordered, judged, alert) -> None:
    """Each event through :func:`pattern_runs`, but for an event that meets none of the pattern's conditions: that one
    changes no partial match, which are only dropped as ``within`` passes, so they stay as they are, less the expired
    ones (as :func:`pattern_runs` leaves them: ordered, one per state; a partial match kept before the spans were goes
    the long way, which adds them)."""
    _, _, trailing, within_us, every = _compiled(rule)
    runs = memory.get(key, [])
    settled = all(len(run) > 4 for run in runs)
    for at, (t_us, value, kafka_us, *_) in enumerate(ordered):
        event = judged[at]
        if trailing:
            due = _pattern_due(rule, runs, t_us - 1)
            if due is not None:  # a trailing not held until within ended, before this event: the match ends there
                alert(at, due[0], None, None, match_detail(rule, due[1]))
                runs = []
        for options in every:
            if event.meets(options):
                break
        else:
            if settled:  # an event that meets none of the pattern's conditions
                runs = memory[key] = [run for run in runs if t_us - run[3] <= within_us]
                continue
        matched, runs = pattern_runs(rule, runs, t_us, event)
        memory[key], settled = runs, True
        if matched is not None:
            alert(at, t_us, value, kafka_us, match_detail(rule, matched))


def _run_absence(rule, key, memory, ordered, judged, alert) -> None:
    (within_us,) = _constants(rule)
    for at, (t_us, *_) in enumerate(ordered):
        last, sent_for = memory.get(key, [None, None])
        if last is not None and t_us - last > within_us and sent_for != last:
            alert(at, last + within_us, None, None)
        memory[key] = [t_us, None]


#: each stateful kind's loop over a device's events
_RUNS = {
    "rate": _run_rate,
    "count": _run_count,
    "sequence": _run_sequence,
    "baseline": _run_baseline,
    "aggregate": _run_aggregate,
    "pattern": _run_pattern,
    "absence": _run_absence,
}


def _open_windows(windows: list[list], oldest: int, newest: int, slide_us: int) -> list[list]:
    """``windows`` with the windows from ``oldest`` to ``newest`` start it lacks, empty, in order of start."""
    held = {window[0] for window in windows if window[0] >= oldest}
    missing = [[start, 0, 0.0, 0.0, 0.0, math.inf, -math.inf]
               for start in range(oldest, newest + 1, slide_us) if start not in held]  # fmt: skip
    ordered = not windows or missing[0][0] > windows[-1][0]
    return windows + missing if ordered else sorted(windows + missing)


def _compiled(rule) -> tuple[list, list, bool, int, list]:
    """A pattern's positive steps (condition as :func:`~sensorcep.rules.model.options_of`, min, max or None), the
    conditions (the same) of the ``not`` steps after each, whether it ends in a ``not`` step, its ``within`` in µs and
    every condition of its steps (worked out once per rule object)."""
    return per_object(_COMPILED, rule, _compile)


#: :func:`_compiled` patterns
_COMPILED: dict[int, tuple] = {}


def _compile(rule) -> tuple[list, list, bool, int, list]:
    positives, nots = [], []
    for step in rule.steps:
        if step.absent:
            nots[-1].append(options_of(step.when))
        else:
            positives.append((options_of(step.when), step.repeat.min, step.repeat.max))
            nots.append([])
    every = list({id(options): options for options in (options_of(step.when) for step in rule.steps)}.values())
    return positives, nots, rule.steps[-1].absent, rule.within_us, every


def pattern_runs(rule, runs: list[list], t_us: int, event: Judged) -> tuple[list | None, list[list]]:
    """One event through a pattern's partial matches (each [step, count, blocked, first event's time, spans]: spans
    holds [first, last] event time of each step taken): the spans of the match that completes at it (None: none), and
    the partial matches after it (none after a match: matching starts again after it).

    Each partial match may ignore the event (it stays, blocked if the event meets a ``not`` step after a step it has
    taken enough events for), take it as one more event of its step (up to the step's max), or as the first event of
    the next step (not blocked); an event meeting the first step also begins a partial match. Partial matches in the
    same state that begin later can do whatever earlier ones can, for longer: only the latest is kept (a pattern ending
    in ``not``: one per first event, as the earliest one's within ends first). Of several matches completing at the
    same event, the one that began first is reported. The partial matches it returns are ordered and one per state.
    """
    positives, nots, trailing, within_us, _ = _compiled(rule)
    last = len(positives) - 1
    nexts: list[list] = []
    completed: list[list] = []
    for run in runs:
        step, count, blocked, first = run[:4]
        spans = run[4] if len(run) > 4 else []  # a partial match kept before the spans were
        if t_us - first > within_us:
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
    positives, _, trailing, _, _ = _compiled(rule)
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
        return (
            datetime.fromtimestamp(t_us / 1e6, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        )

    numbers = [index for index, step in enumerate(rule.steps, start=1) if not step.absent]
    return "; ".join(
        f"step {n} at {at(a)}" if a == b else f"step {n} at {at(a)} to {at(b)}"
        for n, (a, b) in zip(numbers, spans, strict=False)
    )


def aggregate(function: str, window: list) -> float | None:
    """A closed window's aggregate (None: it has none, e.g. the stddev of one event)."""
    _, n, total, _, m2, low, high = window
    if function == "stddev":  # m2 overflows to inf (or -inf, inf - inf) for readings near float's limits: no stddev
        return math.sqrt(m2 / (n - 1)) if n >= 2 and 0 <= m2 < math.inf else None
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
