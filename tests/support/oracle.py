"""The sampling rule as a plain batch computation over a known micro-batch sequence: the test oracle.

Written independently of :mod:`sensorcep.pipeline.sampling` (plain Python sorting, no shared helper) so the
two can check each other. It follows Spark's event-time semantics exactly:

* the watermark of batch k is ``max(event time seen in batches < k) - delay`` (0 before any data);
* a stateful operator drops, as too late, a row of batch k whose event time is <= the watermark of
  batch k - 1 (Spark 3.4+: the late-row filter uses the previous batch's watermark);
* a window [start, end) is emitted once the watermark reaches ``end``; after the last batch Spark
  runs a no-data batch, so the final watermark is ``max(all event times) - delay``.

An empty DataFrame in ``batches`` stands for a no-data batch (e.g. the one a run ends with).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
import operator
import statistics
from collections import defaultdict

import pandas as pd


def watermarks(batches: list[pd.DataFrame], delay_ms: int) -> list[int]:
    """Watermark (ms) in effect for each batch, plus one entry for the final no-data batch."""
    marks, max_ms = [0], None
    for batch in batches:
        if len(batch):
            batch_max = int(batch.event_time_us.max()) // 1000
            max_ms = batch_max if max_ms is None else max(max_ms, batch_max)
        marks.append(max(marks[-1], max_ms - delay_ms) if max_ms is not None else marks[-1])
    return marks


def accepted_events(batches: list[pd.DataFrame], delay_ms: int) -> pd.DataFrame:
    """The rows a stateful operator keeps (too-late rows removed)."""
    marks = watermarks(batches, delay_ms)
    kept = []
    for k, batch in enumerate(batches):
        late_mark = marks[k - 1] if k > 0 else 0
        kept.append(batch[batch.event_time_us > late_mark * 1000])
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()


def late_events(batches: list[pd.DataFrame], delay_ms: int) -> list[tuple]:
    """The rows a stateful operator drops as too late: (device_id, sensor_freq, event_time_us, watermark_ms)."""
    marks = watermarks(batches, delay_ms)
    late = []
    for k, batch in enumerate(batches):
        late_mark = marks[k - 1] if k > 0 else 0
        for device, freq, t in batch[["device_id", "sensor_freq", "event_time_us"]].itertuples(index=False):
            if t <= late_mark * 1000:
                late.append((device, float(freq), int(t), late_mark))
    return sorted(late)


def reference_samples(
    batches: list[pd.DataFrame],
    window_s: int,
    slide_s: int,
    delay_s: int,
    scope: str = "window",
    anomaly_threshold: float = 0.0,
) -> pd.DataFrame:
    """``sensor_samples`` rows (integer times) Spark must emit for this micro-batch sequence."""
    window_us, slide_us = window_s * 1_000_000, slide_s * 1_000_000
    final_mark_us = watermarks(batches, delay_s * 1000)[-1] * 1000
    groups: dict[tuple, dict[tuple, tuple]] = defaultdict(dict)
    for device, freq, t in accepted_events(batches, delay_s * 1000)[
        ["device_id", "sensor_freq", "event_time_us"]
    ].itertuples(index=False):
        start = t - t % slide_us
        while start > t - window_us:
            key = (start,) if scope == "window" else (start, device)
            event = (int(t), device, float(freq))
            seen = groups[key].get((device, int(t)))
            if seen is None or event < seen:  # a duplicate counts once: keep the smallest copy
                groups[key][(device, int(t))] = event
            start -= slide_us
    rows = []
    for key, events in groups.items():
        start = key[0]
        if start + window_us > final_mark_us:
            continue  # still open
        ordered = sorted(events.values())
        n = len(ordered)
        roles: dict[int, list[str]] = defaultdict(list)
        roles[0].append("first")
        roles[n // 2].append("middle")
        roles[n - 1].append("last")
        for i, (_, _, freq) in enumerate(ordered):
            if freq < anomaly_threshold:
                roles[i].append("anomaly")
        for i in sorted(roles):
            t, device, freq = ordered[i]
            rows.append(
                {
                    "window_start_ms": start // 1000,
                    "window_end_ms": (start + window_us) // 1000,
                    "device_id": device,
                    "sensor_freq": freq,
                    "event_time_us": t,
                    "roles": roles[i],
                    "is_anomalous": int(freq < anomaly_threshold),
                }
            )
    columns = ["window_start_ms", "window_end_ms", "device_id", "sensor_freq", "event_time_us", "roles", "is_anomalous"]
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------------------------------------ alert rules
_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
_OPERATORS["!="] = operator.ne


def reads_as_number(value) -> bool:
    """Whether a rule reads an event field as a number: an int or float that is finite, or text that is a plain
    decimal and nothing else (no spaces, underscores, hex, NaN, other digits), finite once read."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, str):
        digits, dot, exponent = "0123456789", ".", "eE"
        mantissa, _, power = next(
            ((value[:i], value[i], value[i + 1 :]) for i, ch in enumerate(value) if ch in exponent), (value, "", None)
        )
        mantissa = mantissa[1:] if mantissa[:1] in "+-" and mantissa else mantissa
        whole, _, fraction = mantissa.partition(dot)
        if not (whole or fraction) or any(ch not in digits for ch in whole + fraction):
            return False
        if power is not None:
            power = power[1:] if power[:1] in "+-" and power else power
            if not power or any(ch not in digits for ch in power):
                return False
    elif not isinstance(value, int | float):
        return False
    return math.isfinite(float(value))


def meets(condition: dict, event: dict, negate: bool = False) -> bool:
    """Whether ``event`` meets a rule condition as written in YAML, read recursively (``negate``: under a ``not``):
    a comparison whose field the event lacks or does not carry as a number is false, negated or not."""
    if "all" in condition or "any" in condition:
        parts = [meets(part, event, negate) for part in condition.get("all", condition.get("any"))]
        every = ("all" in condition) != negate  # not all = any not; not any = all not
        return all(parts) if every else any(parts)
    if "not" in condition:
        return meets(condition["not"], event, not negate)
    value = event.get(condition["field"])
    if not reads_as_number(value):
        return False
    return _OPERATORS[condition["op"]](float(value), condition["value"]) != negate


def _condition(rule: dict, key: str = "when") -> dict:
    """A rule's condition as written: ``when``, else its inline field/op/value."""
    return rule.get(key) or {name: rule[name] for name in ("field", "op", "value")}


def _event_rows(events: pd.DataFrame) -> list[dict]:
    """The events as dicts of their fields (a null field absent)."""
    return [{k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
            for row in events.to_dict("records")]  # fmt: skip


def rule_alerts(events: pd.DataFrame, rules: list[dict], devices: dict[str, dict] | None = None) -> set[tuple]:
    """(alert_id, rule_id) of every alert a set of threshold rules (as written in YAML) fires over ``events``
    (device_id, sensor_freq, event_time_us, any other fields), in plain Python: each event against each enabled rule
    (:func:`meets`), its scope looked up in ``devices`` (device_id -> {site, sensor_type}), alert_id =
    sha256(device|event_time_us|rule_id)[:32]."""
    devices = devices or {}
    fired = set()
    for event in _event_rows(events):
        device, event_us = event["device_id"], event["event_time_us"]
        for rule in rules:
            if not rule.get("enabled", True) or not meets(_condition(rule), event):
                continue
            scope = rule.get("scope") or {}
            if "device_id" in scope and device != scope["device_id"]:
                continue
            if any(devices.get(device, {}).get(key) != value for key, value in scope.items() if key != "device_id"):
                continue
            key = f"{device}|{int(event_us)}|{rule['id']}"
            fired.add((hashlib.sha256(key.encode()).hexdigest()[:32], rule["id"]))
    return fired


def stateful_rule_alerts(
    events: pd.DataFrame, rules: list[dict], watermark_ms: int, setpoints: dict[str, dict[str, float]] | None = None
) -> set[tuple]:
    """(alert_id, rule_id) of the alerts of the stateful rules (as written in YAML, scoped to a device or not), in
    plain Python, over the events a stateful operator accepted (:func:`accepted_events`) and that the final
    ``watermark_ms`` has passed, each device's in event-time order. A rate or baseline rule reads only the events
    that carry its field as a number; count and sequence conditions are read by :func:`meets`. ``setpoints``: the
    ``devices`` table's numbers by column and device, for an aggregate rule's ``value_from``."""
    fired = set()

    def alert(device: str, t_us: int, rule: dict) -> None:
        fired.add((hashlib.sha256(f"{device}|{int(t_us)}|{rule['id']}".encode()).hexdigest()[:32], rule["id"]))

    final = events[events.event_time_us <= watermark_ms * 1000]
    for device, group in final.groupby("device_id"):
        ordered = _event_rows(group.sort_values("event_time_us"))
        times = [int(e["event_time_us"]) for e in ordered]
        for rule in rules:
            used: set[int] = set()
            scope = rule.get("scope") or {}
            if not rule.get("enabled", True) or scope.get("device_id", device) != device:
                continue
            if rule["kind"] in ("rate", "baseline"):
                read = [(t, float(e[rule["field"]])) for t, e in zip(times, ordered, strict=True)
                        if reads_as_number(e.get(rule["field"]))]  # fmt: skip
                at, values = [t for t, _ in read], [x for _, x in read]
            if rule["kind"] == "rate":
                for i in range(1, len(at)):
                    change = (values[i] - values[i - 1]) / ((at[i] - at[i - 1]) / 1e6)
                    if _OPERATORS[rule["op"]](change, rule["value"]):
                        alert(device, at[i], rule)
            elif rule["kind"] == "count":
                within_us = pd.Timedelta(rule["within"]).value // 1000
                hits = [t for t, e in zip(times, ordered, strict=True) if meets(_condition(rule), e)]
                for t in hits:
                    if sum(t - within_us <= other <= t for other in hits) >= rule["at_least"]:
                        alert(device, t, rule)
            elif rule["kind"] == "sequence":
                within_us = pd.Timedelta(rule["within"]).value // 1000
                firsts = [j for j, e in enumerate(ordered) if meets(rule["first"], e)]
                for i, t in enumerate(times):
                    if not meets(rule["then"], ordered[i]):
                        continue
                    j = _latest_before(firsts, i)  # the one the query remembers
                    if j is not None and t - times[j] <= within_us and j not in used:
                        used.add(j)  # used up
                        alert(device, t, rule)
            elif rule["kind"] == "baseline":
                before = ew_baselines_before(values, rule["span"])
                for i, (t, x) in enumerate(zip(at, values, strict=True)):
                    mean, spread = before[i]
                    floor = rule.get("min_spread") or 0.0
                    # pandas' weighted mean of a constant run may miss the constant by rounding: that is no departure
                    departure = abs(x - mean) if abs(x - mean) > 1e-9 * (1 + abs(mean)) else 0.0
                    if i >= rule.get("min_events", 20) and departure > rule["k"] * max(spread, floor):
                        alert(device, t, rule)
            elif rule["kind"] == "aggregate":
                limit = rule.get("value")
                if "value_from" in rule:
                    limit = (setpoints or {}).get(rule["value_from"].removeprefix("devices."), {}).get(device)
                for end_us, found in _window_aggregates(rule, times, ordered, watermark_ms * 1000):
                    if found is not None and limit is not None and _OPERATORS[rule["op"]](found, limit):
                        alert(device, end_us, rule)
            elif rule["kind"] == "pattern":
                for t in pattern_matches(rule, times, ordered, watermark_ms * 1000):
                    alert(device, t, rule)
            elif rule["kind"] == "absence":
                within_us = pd.Timedelta(rule["within"]).value // 1000
                for before, after in zip(times, times[1:], strict=False):
                    if after - before > within_us:
                        alert(device, before + within_us, rule)
                if times and times[-1] + within_us <= watermark_ms * 1000:
                    alert(device, times[-1] + within_us, rule)
    return fired


def pattern_matches(rule: dict, times: list[int], events: list[dict], until_us: int) -> list[int]:
    """The alert times of a pattern rule (as written in YAML) over one device's events in time order, by search: the
    pattern's definition read literally. A match assigns events, in order, to the positive steps (each step between
    its ``times`` min and max of events meeting it; other events may come between), with no event meeting a ``not``
    step strictly between the last event of the step before it and the first of the step after it, and its last event
    at most ``within`` after its first. Without a trailing ``not`` the alert is the earliest event at which some match
    ends (its last step at its min count); with one, the earliest first event whose match has no event meeting the
    trailing ``not`` after it until first + within, and the alert is first + within (once the final watermark has
    passed it). After an alert the search starts again after it."""
    within_us = pd.Timedelta(rule["within"]).value // 1000
    positives, nots = [], []
    for step in rule["steps"]:
        if step.get("not"):
            nots[-1].append(step["when"])
        else:
            repeat = step.get("times")
            positives.append((step["when"], 1, 1) if repeat is None else
                             (step["when"], repeat.get("min", 1), repeat.get("max")))  # fmt: skip
            nots.append([])
    trailing, last, n = bool(rule["steps"][-1].get("not")), len(positives) - 1, len(times)

    @functools.cache
    def ends(step: int, count: int, at: int, first: int) -> frozenset:
        """The indexes at which an assignment that has given ``count`` events to ``step``, the last at ``at``, can
        end (the last step at its min count; a trailing ``not``: at any count up to its max)."""
        when, least, most = positives[step]
        found = set()
        if step == last and count >= least:
            found.add(at)
            if not trailing:
                return frozenset(found)
        for k in range(at + 1, n):
            if times[k] - times[first] > within_us:
                break
            if (most is None or count < most) and meets(when, events[k]):
                found |= ends(step, min(count + 1, least) if most is None else count + 1, k, first)
            between = range(at + 1, k)
            if (count >= least and step < last and meets(positives[step + 1][0], events[k])
                    and not any(meets(c, events[m]) for m in between for c in nots[step])):  # fmt: skip
                found |= ends(step + 1, 1, k, first)
        return frozenset(found)

    fired, resume = [], 0
    while True:
        starts = [s for s in range(resume, n) if meets(positives[0][0], events[s])]
        if not trailing:
            found = [min(ends(0, 1, s, s)) for s in starts if ends(0, 1, s, s)]
            if not found:
                return fired
            at = min(found)
            fired.append(times[at])
            resume = at + 1
            continue
        due = None
        for s in starts:
            deadline = times[s] + within_us
            if deadline > until_us:
                break
            quiet = [p for p in ends(0, 1, s, s) if not any(meets(c, events[m]) for m in range(p + 1, n)
                     if times[m] <= deadline for c in nots[last])]  # fmt: skip
            if quiet:
                due = deadline
                break
        if due is None:
            return fired
        fired.append(due)
        resume = next((i for i in range(n) if times[i] > due), n)


def _window_aggregates(rule: dict, times: list[int], events: list[dict], until_us: int) -> list[tuple]:
    """(window end in µs, aggregate or None) of every window of an aggregate rule that holds one of the device's
    events and that ends by ``until_us``: each window's events gathered afresh (start at a multiple of the slide),
    then aggregated by Python's own functions (``statistics.stdev`` for stddev)."""
    window_us = pd.Timedelta(rule["window"]).value // 1000
    slide_us = pd.Timedelta(rule.get("slide") or rule["window"]).value // 1000
    field = rule.get("field")
    read = [(t, 1.0 if field is None else float(e[field])) for t, e in zip(times, events, strict=True)
            if field is None or reads_as_number(e.get(field))]  # fmt: skip
    if not read:
        return []
    first = read[0][0] - read[0][0] % slide_us - window_us
    found = []
    for start in range(first, read[-1][0] + 1, slide_us):
        values = [x for t, x in read if start <= t < start + window_us]
        if not values or start + window_us > until_us:
            continue
        function = rule["function"]
        if function == "stddev":
            value = statistics.stdev(values) if len(values) > 1 else None
        else:
            value = {"avg": sum(values) / len(values), "min": min(values), "max": max(values), "sum": sum(values),
                     "count": float(len(values)), "range": max(values) - min(values)}[function]  # fmt: skip
        found.append((start + window_us, value))
    return found


def _latest_before(firsts: list[int], before: int) -> int | None:
    """Of the (ascending) indices of the events that met the sequence's ``first`` condition, the latest before
    ``before``."""
    at = bisect.bisect_left(firsts, before)
    return firsts[at - 1] if at else None


def ew_baseline(values: list[float], span: int) -> tuple[float, float]:
    """Exponentially weighted mean and (biased) standard deviation of ``values``, alpha = 2 / (span + 1), by pandas
    (``ewm(adjust=False)``): an implementation independent of the rules' own recursion."""
    return ew_baselines_before([*values, 0.0], span)[-1]


def ew_baselines_before(values: list[float], span: int) -> list[tuple[float, float]]:
    """:func:`ew_baseline` of each prefix ``values[:i]``, i.e. the baseline each value meets, from one pass of pandas
    (its weighted statistics of a series are those of each prefix, in order); (0.0, 0.0) before the first value."""
    if not values:
        return []
    weighted = pd.Series(values, dtype="float64").ewm(alpha=2.0 / (span + 1), adjust=False)
    means, spreads = weighted.mean().tolist(), weighted.std(bias=True).tolist()
    return [(0.0, 0.0), *((float(m), float(s)) for m, s in zip(means[:-1], spreads[:-1], strict=True))]


def lifecycle_steps(inputs: list[tuple], watermark_s: int, latch: bool, suppress_s: int, escalate_s: int) -> list:
    """The alert lifecycle of one (rule, device), by a clock: second by second up to the watermark, first the inputs
    of that second (alerts, then acks, each by id), then what the clock says is due (the end of a snooze, an
    escalation, a quiet close, in that order). ``inputs``: (second, kind, alert_id, action, until_s) with kind alert or
    ack. Returns (incident_id, transition, second, cause_id, state after, alerts) tuples, in order."""
    steps, incident = [], None
    by_second: dict[int, list] = {}
    for item in inputs:
        by_second.setdefault(item[0], []).append(item)
    first = min(by_second, default=watermark_s)
    for second in range(min(first, watermark_s), watermark_s + 1):
        for _, kind, alert_id, action, until_s in sorted(
            by_second.get(second, []), key=lambda i: (i[1] != "alert", i[2], i[3] or "", i[4] or 0)
        ):
            if kind == "alert" and incident is None:
                incident = {"id": alert_id, "opened": second, "last": second, "n": 1, "state": "open",
                            "until": None, "escalated": False}  # fmt: skip
                steps.append((alert_id, "opened", second, alert_id, "open", 1))
            elif kind == "alert":
                incident["n"] += 1
                incident["last"] = max(incident["last"], second)
                steps.append((incident["id"], "repeated", second, alert_id, incident["state"], incident["n"]))
            elif incident is None:
                steps.append((None, "ignored", second, alert_id, "closed", 0))
            elif action == "snooze" and until_s <= second:
                steps.append((incident["id"], "ignored", second, alert_id, incident["state"], incident["n"]))
            elif action == "snooze":
                incident.update(state="snoozed", until=until_s)
                steps.append((incident["id"], "snoozed", second, alert_id, "snoozed", incident["n"]))
            else:
                steps.append((incident["id"], "acked", second, alert_id, "closed", incident["n"]))
                incident = None
        if incident and incident["state"] == "snoozed" and incident["until"] <= second:
            incident.update(state="open", until=None)
            steps.append((incident["id"], "unsnoozed", second, None, "open", incident["n"]))
        if incident and incident["state"] == "open" and not incident["escalated"]:
            if incident["opened"] + escalate_s <= second:
                incident["escalated"] = True
                steps.append((incident["id"], "escalated", second, None, "open", incident["n"]))
        if incident and not latch and incident["last"] + suppress_s <= second:
            steps.append((incident["id"], "resolved", second, None, "closed", incident["n"]))
            incident = None
    return steps


def device_status_changes(batches: list[tuple[int, dict[str, list[int]]]], timeout_ms: int) -> list[tuple]:
    """``device_status`` as device activity's contract states it (``sensorcep.pipeline.device_activity``), replayed
    over the micro-batches a query ran: ``batches`` is, per batch in order, its watermark (ms, the one it fires
    timers with) and the event times (ms) it took per device. Per device, in event time: its first batch's earliest
    event is ``device_first_seen``; an event later than every one before it that comes more than the timeout after the
    last of them is ``device_offline`` at that last + timeout, then ``device_online`` at the event; an event at or
    before the latest one changes no status (it counts); after a batch's events, a device still online whose latest
    event + timeout is before the batch's watermark goes ``device_offline`` then. Each row carries the device's first
    and latest event and its count after the batch's events. Returns (device, status_event, status, changed_at,
    first_seen, last_seen, event_count) tuples, in order."""
    known: dict[str, dict] = {}
    rows: list[tuple] = []
    for watermark_ms, events in batches:
        for device in sorted(events):
            times = sorted(events[device])
            seen = known.get(device)
            if seen is None:
                seen = known[device] = {"first": times[0], "last": times[0], "count": 0, "online": True}
                changes = [("device_first_seen", "online", times[0])]
            else:
                seen["first"], changes = min(seen["first"], times[0]), []
            for t in (t for t in times if t > seen["last"]):
                if seen["online"] and t - seen["last"] > timeout_ms:
                    changes.append(("device_offline", "offline", seen["last"] + timeout_ms))
                    seen["online"] = False
                if not seen["online"]:
                    changes.append(("device_online", "online", t))
                    seen["online"] = True
                seen["last"] = t
            seen["count"] += len(times)
            rows += [(device, *change, seen["first"], seen["last"], seen["count"]) for change in changes]
        for device in sorted(known):
            seen = known[device]
            if seen["online"] and seen["last"] + timeout_ms < watermark_ms:
                seen["online"] = False
                at = seen["last"] + timeout_ms
                rows.append((device, "device_offline", "offline", at, seen["first"], seen["last"], seen["count"]))
    return rows
