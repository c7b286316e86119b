"""When grouped messages go out: Alertmanager's timing over the lifecycle's paging transitions.

A group (a receiver's route and its ``group_by`` labels, :func:`sensorcep.routes.planning.plan`) holds the open
incidents that paged into it. Its first message goes ``group_wait`` after its first incident, so that the rest of an
outage can join it. After that it waits ``group_interval`` before telling about incidents that joined, and sends
again every ``repeat_interval`` while it still holds open incidents. An incident leaves its group when it closes
(acked or resolved): a group with nothing left sends nothing more. A route's escalation levels page their receivers
about the incidents of the group still open ``after`` they opened: one message per group and level, each incident
once per level.

:func:`step` is the whole logic, plain Python and deterministic: given the groups so far, the transitions since the
last step and the time now, it returns the messages due and the groups after them (small, JSON-able).
:mod:`sensorcep.routes.notifier` sends what is due and makes the rows of the ``notifications`` ledger; the notifier
query (:mod:`sensorcep.pipeline.notifications`) runs it over ``alert_events`` (docs/routes.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone

from sensorcep.routes.model import RouteSet
from sensorcep.routes.planning import Incident, plan

#: transitions that open or raise an incident's page, and those that close it (:data:`sensorcep.rules.lifecycle.PAGES`)
PAGING = ("opened", "escalated")
CLOSING = ("acked", "resolved")


@dataclass(frozen=True)
class Change:
    """A lifecycle transition of an incident, with the incident's labels (``at``: seconds, the dispatcher's clock)."""

    incident: Incident
    transition: str
    at: float


@dataclass(frozen=True)
class Due:
    """A message that is due: for ``receiver``, the group's open incidents, and which of them are new in it."""

    message_id: str
    receiver: str
    group: str
    incidents: tuple[str, ...]
    new: tuple[str, ...]
    repeat: bool
    #: 0: the group's own message; k: the route's k-th escalation level (1-based), about ``incidents``
    level: int = 0


def _group_name(receiver: str, path: str, key: tuple) -> str:
    return f"{receiver} {path} " + ",".join(f"{k}={v}" for k, v in key)


def step(
    route_set: RouteSet, groups: dict, changes: list[Change], now: float, silences=(), muted: list | None = None
) -> tuple[list[Due], dict]:
    """Apply ``changes`` (in time order) to ``groups`` and return the messages due at ``now`` and the new groups.

    ``groups``: {name: {"receiver", "incidents": {id: labels}, "pending": [ids not told yet], "first_at",
    "sent_at", "wait", "interval", "repeat", "escalate": [[after_s, receiver], ...], "opened_at": {id: at},
    "levels": {id: the last level it was escalated to}}}. A muted incident (silence, inhibition) joins no group; with
    ``muted`` (a list), each muted paging change is appended to it as (change, reason)."""
    groups = {
        n: {
            **g,
            "incidents": dict(g["incidents"]),
            "pending": list(g["pending"]),
            "opened_at": dict(g.get("opened_at", {})),
            "levels": dict(g.get("levels", {})),
        }
        for n, g in groups.items()
    }
    for change in sorted(changes, key=lambda c: c.at):
        incident = change.incident
        if change.transition in CLOSING:
            for group in groups.values():
                group["incidents"].pop(incident.incident_id, None)
                group["opened_at"].pop(incident.incident_id, None)
                group["levels"].pop(incident.incident_id, None)
                if incident.incident_id in group["pending"]:
                    group["pending"].remove(incident.incident_id)
            continue
        if change.transition not in PAGING:
            continue
        open_now = [Incident(i, labels) for g in groups.values() for i, labels in g["incidents"].items()]
        # silences are judged when the page would go out (the pass), not at the transition's own time
        planned = plan(
            route_set, [incident], silences, datetime.fromtimestamp(max(change.at, now), timezone.utc), open_now
        )
        if muted is not None:
            muted += [(change, reason) for _, reason in planned.muted]
        for group_plan in planned.groups:
            name = _group_name(group_plan.match.receiver, group_plan.match.path, group_plan.key)
            group = groups.setdefault(
                name,
                {"receiver": group_plan.match.receiver, "incidents": {}, "pending": [], "first_at": change.at,
                 "sent_at": None, "wait": group_plan.match.group_wait_s,
                 "interval": group_plan.match.group_interval_s, "repeat": group_plan.match.repeat_interval_s,
                 "escalate": [list(level) for level in group_plan.match.escalate], "opened_at": {}, "levels": {}},
            )  # fmt: skip
            if not group["incidents"] and group["sent_at"] is None:
                group["first_at"] = change.at
            group["incidents"][incident.incident_id] = incident.labels
            group["opened_at"].setdefault(incident.incident_id, change.at)
            if incident.incident_id not in group["pending"]:
                group["pending"].append(incident.incident_id)
    due = []
    for name, group in sorted(groups.items()):
        if not group["incidents"]:
            continue
        if group["sent_at"] is None:
            ready = now >= group["first_at"] + group["wait"]
        elif group["pending"]:
            ready = now >= group["sent_at"] + group["interval"]
        else:
            ready = now >= group["sent_at"] + group["repeat"]
        if not ready:
            continue
        incidents, new = tuple(sorted(group["incidents"])), tuple(group["pending"])
        key = f"{name}|{'|'.join(incidents)}|{group['sent_at']}"
        message_id = hashlib.sha256(key.encode()).hexdigest()[:32]
        due.append(Due(message_id, group["receiver"], name, incidents, new, repeat=not new))
        group["sent_at"], group["pending"] = now, []
    for name, group in sorted(groups.items()):
        due += _escalations(name, group, now)
    return due, groups


def _escalations(name: str, group: dict, now: float) -> list[Due]:
    """The group's escalation messages due at ``now``: per level, the incidents still open ``after`` they opened that
    this level has not paged yet (a pass that comes late sends every level they passed, in order)."""
    due = []
    for level, (after_s, receiver) in enumerate(group.get("escalate", []), start=1):
        reached = tuple(
            sorted(
                i
                for i in group["incidents"]
                if group["levels"].get(i, 0) < level and now >= group["opened_at"].get(i, now) + after_s
            )
        )
        if not reached:
            continue
        message_id = hashlib.sha256(f"{name}|level {level}|{'|'.join(reached)}".encode()).hexdigest()[:32]
        due.append(Due(message_id, receiver, name, reached, reached, repeat=False, level=level))
        group["levels"].update(dict.fromkeys(reached, level))
    return due
