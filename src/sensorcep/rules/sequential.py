"""The stateful rule kinds (rate, count, absence, sequence, baseline) over one device's events in event-time order.

Plain Python, no Spark.

:func:`advance` is the whole logic of the stateful rules query's processor
(:mod:`sensorcep.pipeline.stateful_rules`): given what a device's memory holds, the events that the watermark has
made final (every event at or before it is known: later copies are dropped as late) and the watermark, it returns
the alerts they fire and the new memory. The memory is a small JSON-able dict per device:

* ``rate``: the device's previous event (time, value);
* ``count``: the times of the matching events still within ``within`` of the newest;
* ``absence``: the last event's time, and for which last event the absence alert was already sent;
* ``sequence``: the time of the latest event that met ``first`` and has not been used up;
* ``baseline``: events seen, exponentially weighted mean and variance, the last event's time.

Each rule's memory is kept under ``<rule id>:<version>``: a changed rule starts afresh, and the memory of a rule no
longer in force is dropped. Because events are released only when the watermark passes them, the result does not
depend on how the events were cut into micro-batches, nor on their arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import OPERATOR


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
    events: Iterable[tuple[int, float, int | None]],
    watermark_us: int,
    scoped: dict[tuple, list[str]] | None = None,
) -> tuple[list[Fired], dict]:
    """Run the final ``events`` (event_time_us, sensor_freq, kafka_timestamp_us), oldest first, through the
    ``rules`` that apply to ``device_id``; then the absences the watermark proves. Returns (alerts, memory)."""
    scoped = scoped or {}
    mine = [r for r in rules if applies(r, device_id, scoped)]
    memory = {k: v for k, v in memory.items() if k in {_key(r) for r in mine}}
    fired: list[Fired] = []

    def alert(r: VersionedRule, t_us: int, value: float | None, kafka_us: int | None) -> None:
        fired.append(Fired(device_id, t_us, value, kafka_us, r.id, r.version, r.rule.text))

    for t_us, value, kafka_us in sorted(events, key=lambda e: e[0]):
        for r in mine:
            rule, key = r.rule, _key(r)
            if rule.kind == "rate":
                previous = memory.get(key)
                if previous is not None and t_us > previous[0]:
                    change = (value - previous[1]) / ((t_us - previous[0]) / 1e6)
                    if OPERATOR[rule.op](change, rule.value):
                        alert(r, t_us, value, kafka_us)
                memory[key] = [t_us, value]
            elif rule.kind == "count":
                if OPERATOR[rule.op](value, rule.value):
                    recent = [t for t in memory.get(key, []) if t >= t_us - rule.within_us] + [t_us]
                    if len(recent) >= rule.at_least:
                        alert(r, t_us, value, kafka_us)
                    memory[key] = recent[-rule.at_least :]  # older ones can never count again
            elif rule.kind == "sequence":
                first_at = memory.get(key)
                if first_at is not None and rule.then.holds(value) and t_us - first_at <= rule.within_us:
                    alert(r, t_us, value, kafka_us)
                    first_at = None  # used up
                memory[key] = t_us if rule.first.holds(value) else first_at
            elif rule.kind == "baseline":
                n, mean, var, _ = memory.get(key, [0, 0.0, 0.0, None])
                # a constant run (spread 0) fires on any departure, unless min_spread sets a floor
                if n >= rule.min_events and abs(value - mean) > rule.k * max(math.sqrt(var), rule.spread_floor):
                    alert(r, t_us, value, kafka_us)
                if n == 0:
                    mean, var = value, 0.0
                else:
                    diff = value - mean
                    mean += rule.alpha * diff
                    var = (1 - rule.alpha) * (var + diff * rule.alpha * diff)
                memory[key] = [n + 1, mean, var, t_us]
            elif rule.kind == "absence":
                last, sent_for = memory.get(key, [None, None])
                if last is not None and t_us - last > rule.within_us and sent_for != last:
                    alert(r, last + rule.within_us, None, None)
                memory[key] = [t_us, None]
    for r in mine:
        if r.rule.kind == "absence":
            last, sent_for = memory.get(_key(r), [None, None])
            if last is not None and sent_for != last and last + r.rule.within_us <= watermark_us:
                alert(r, last + r.rule.within_us, None, None)
                memory[_key(r)] = [last, last]
    return fired, memory


def baselines(rules: list[VersionedRule], memory: dict) -> list[tuple[VersionedRule, int, float, float, int]]:
    """The device's baseline per baseline rule: (rule, events, mean, spread, last event's time in µs)."""
    found = []
    for r in rules:
        if r.rule.kind == "baseline" and _key(r) in memory:
            n, mean, var, as_of = memory[_key(r)]
            found.append((r, n, mean, math.sqrt(var), as_of))
    return found


def next_deadline_us(rules: list[VersionedRule], memory: dict) -> int | None:
    """The earliest event time at which an absence could fire with no further event (for the processor's timer)."""
    deadlines = []
    for r in rules:
        if r.rule.kind == "absence" and _key(r) in memory:
            last, sent_for = memory[_key(r)]
            if sent_for != last:
                deadlines.append(last + r.rule.within_us)
    return min(deadlines, default=None)
