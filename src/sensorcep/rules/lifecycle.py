"""The life of an alert: one incident per (rule, device) at a time, from its first alert to its close. Plain Python.

What happens, in event time (alerts at their event's time, acks at their ``ack_time``):

* **opened**: an alert of a rule for a device with no open incident opens one and pages. Its ``incident_id`` is that
  alert's ``alert_id``.
* **repeated**: an alert while the incident is open (or snoozed) updates it (``alerts`` counts them) and pages
  nobody: a flapping device pages once.
* **acked**: an ack (``action`` ``ack``, the default) of the rule and device closes the open incident, also after
  its escalation. An ack with no open incident to close is **ignored** (and recorded as such).
* **snoozed**: an ack with ``action: snooze`` and ``until`` mutes the incident until then: repeats page nobody and
  it does not escalate. **unsnoozed** at ``until`` it is open again, and escalates at once if its deadline passed
  meanwhile.
* **escalated**: an open incident not acked within ``ack_timeout`` of its opening escalates, once, and pages.
* **resolved**: an incident whose rule is not latched (``latch: false``) closes by itself once no alert has come for
  ``suppress_for``. A latched incident (the default) stays open until acked.

:func:`advance` is the whole logic of the lifecycle query's processor (:mod:`sensorcep.pipeline.alert_lifecycle`):
given an incident (or None), the inputs the watermark has made final and the watermark, it returns the transitions
and the incident after them. Inputs at the same time are taken alerts first, then acks, each by id; a deadline at
time T fires after the inputs at T (an ack at the deadline is in time). So the result depends neither on the
micro-batches nor on the arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

OPEN, SNOOZED, CLOSED = "open", "snoozed", "closed"
#: every transition :func:`advance` records, and whether it pages someone
PAGES = {
    "opened": True,
    "repeated": False,
    "snoozed": False,
    "unsnoozed": False,
    "escalated": True,
    "acked": False,
    "resolved": False,
    "ignored": False,
}
#: the order of deadlines due at the same time
_DEADLINE_ORDER = {"unsnoozed": 0, "escalated": 1, "resolved": 2}


@dataclass(frozen=True)
class Policy:
    """How a rule's incidents live: ``latch`` (open until acked), ``suppress_us`` (an unlatched incident closes
    after this long without an alert), ``escalate_us`` (``ack_timeout``) and its text for people."""

    latch: bool
    suppress_us: int
    escalate_us: int
    escalate_text: str = ""


@dataclass(frozen=True)
class Input:
    """An alert (``kind`` alert: ``alert`` holds its fields) or an ack (``kind`` ack: ``action`` ack or snooze,
    ``until_us`` for a snooze, ``actor`` who acked) at ``at_us``; ``alert_id`` = the alert's, or the one an ack
    names."""

    at_us: int
    kind: str
    alert_id: str
    action: str = "ack"
    until_us: int | None = None
    actor: str | None = None
    alert: dict = field(default_factory=dict)

    @property
    def order(self) -> tuple:
        return (self.at_us, 0 if self.kind == "alert" else 1, self.alert_id, self.action, self.until_us or 0)


@dataclass(frozen=True)
class Transition:
    """One step of an incident: what happened (``transition``), when (event time), what caused it (``cause_id``:
    the alert or ack's alert_id; None for a deadline), the state after it and how many alerts the incident has."""

    incident_id: str | None
    transition: str
    at_us: int
    cause_id: str | None
    state: str
    alerts: int
    actor: str | None = None
    detail: str = ""
    #: the incident's first alert (its fields), on ``escalated`` rows
    alert: dict | None = None

    @property
    def pages(self) -> bool:
        return PAGES[self.transition]


def _iso(us: int) -> str:
    try:
        return datetime.fromtimestamp(us / 1e6, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):  # beyond the years Python's datetime holds: said as it came
        return f"{us} µs after 1970-01-01"


def due(incident: dict | None, policy: Policy) -> list[tuple[int, str]]:
    """The incident's pending deadlines (time µs, transition), soonest first."""
    if incident is None:
        return []
    deadlines = []
    if incident["state"] == SNOOZED:
        deadlines.append((incident["until_us"], "unsnoozed"))
    if incident["state"] == OPEN and not incident["escalated"]:
        deadlines.append((incident["opened_us"] + policy.escalate_us, "escalated"))
    if not policy.latch:
        deadlines.append((incident["last_us"] + policy.suppress_us, "resolved"))
    return sorted(deadlines, key=lambda d: (d[0], _DEADLINE_ORDER[d[1]]))


def next_deadline_us(incident: dict | None, policy: Policy) -> int | None:
    deadlines = due(incident, policy)
    return deadlines[0][0] if deadlines else None


def advance(
    incident: dict | None, inputs: list[Input], watermark_us: int, policy: Policy
) -> tuple[list[Transition], dict | None]:
    """Take the final ``inputs`` (any order) and then the deadlines up to the watermark. Returns (transitions,
    incident after them: None when closed). The incident is a small JSON-able dict."""
    steps: list[Transition] = []
    incident = dict(incident) if incident else None

    def record(transition: str, at_us: int, cause: str | None, *, actor=None, detail="", alert=None) -> None:
        state = incident["state"] if incident else CLOSED
        steps.append(
            Transition(
                incident["id"] if incident else None,
                transition,
                at_us,
                cause,
                state,
                incident["alerts"] if incident else 0,
                actor,
                detail,
                alert,
            )
        )

    def fire_deadlines(until_us: int, inclusive: bool) -> None:
        nonlocal incident
        while True:
            deadlines = due(incident, policy)
            if not deadlines or deadlines[0][0] > until_us or (deadlines[0][0] == until_us and not inclusive):
                return
            at_us, name = deadlines[0]
            if name == "unsnoozed":
                incident.update(state=OPEN, until_us=None)
                record("unsnoozed", at_us, None, detail="the snooze ended")
                if not incident["escalated"] and incident["opened_us"] + policy.escalate_us <= at_us:
                    escalate(at_us)
            elif name == "escalated":
                escalate(at_us)
            else:
                closing, incident = incident, None
                steps.append(
                    Transition(closing["id"], "resolved", at_us, None, CLOSED, closing["alerts"], None,
                               f"no alert for {policy.suppress_us / 1e6:g} s")
                )  # fmt: skip

    def escalate(at_us: int) -> None:
        incident["escalated"] = True
        record("escalated", at_us, None, detail=policy.escalate_text, alert=incident["first"])

    for item in sorted(inputs, key=lambda i: i.order):
        fire_deadlines(item.at_us, inclusive=False)
        if item.kind == "alert":
            if incident is None:
                incident = {
                    "id": item.alert_id,
                    "opened_us": item.at_us,
                    "last_us": item.at_us,
                    "alerts": 1,
                    "state": OPEN,
                    "until_us": None,
                    "escalated": False,
                    "first": item.alert,
                }
                record("opened", item.at_us, item.alert_id)
            else:
                incident.update(alerts=incident["alerts"] + 1, last_us=max(incident["last_us"], item.at_us))
                record("repeated", item.at_us, item.alert_id, detail=f"alert {incident['alerts']} of the incident")
        elif incident is None:
            record("ignored", item.at_us, item.alert_id, actor=item.actor, detail=f"{item.action}: no open alert")
        elif item.action == "snooze":
            if item.until_us is None or item.until_us <= item.at_us:
                record("ignored", item.at_us, item.alert_id, actor=item.actor, detail="snooze: until is not later")
            else:
                incident.update(state=SNOOZED, until_us=item.until_us)
                record("snoozed", item.at_us, item.alert_id, actor=item.actor, detail=f"until {_iso(item.until_us)}")
        else:
            closing, incident = incident, None
            steps.append(
                Transition(closing["id"], "acked", item.at_us, item.alert_id, CLOSED, closing["alerts"], item.actor)
            )
    fire_deadlines(watermark_us, inclusive=True)
    return steps, incident
