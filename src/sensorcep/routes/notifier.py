"""One pass of the notifier: what is due is sent once, and every message and every muted page is a ledger row.

:func:`notify` runs :func:`sensorcep.routes.dispatch.step` over the lifecycle's transitions since the last pass,
sends each message that is due through ``send`` (:func:`sensorcep.routes.delivery.deliver`, or a stand-in), and
returns the rows of the ``notifications`` ledger with the groups after the pass:

* one row per message: its id (the retries' idempotency key), receiver, group, the incidents it lists and which of
  them are new, and what came of it (``delivered`` or ``dead_letter``, each attempt's answer);
* one row per paging transition that paged nobody (``suppressed``), with the reason: the silence in force (its
  author and comment) or the incident that inhibits it. "Why was nobody paged?" has its answer in the table.

The pass is deterministic: the same groups, transitions and time give the same rows and ids, so a pass replayed
after a crash sends the same ids again (at least once, each retry with the same key) and its rows are written once
by the micro-batch's idempotent append. The always-on job's notifier query runs it over ``alert_events``
(:mod:`sensorcep.pipeline.notifications`, docs/routes.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from sensorcep.routes.delivery import Message, Outcome
from sensorcep.routes.dispatch import Change, Due, step
from sensorcep.routes.model import RouteSet
from sensorcep.routes.planning import notification_id

#: the columns of a ``notifications`` row
NOTIFICATION_COLUMNS = [
    "notification_id",
    "receiver",
    "group_name",
    "incident_ids",
    "new_incident_ids",
    "repeat",
    "level",
    "status",
    "reason",
    "attempts",
    "at",
]
#: a ledger row's status: sent and answered, given up after its retries, or muted before it was sent
STATUSES = ("delivered", "dead_letter", "suppressed")


def message(due: Due, groups: dict, link: str | None = None) -> Message:
    """The message a due group sends: its open incidents with their labels, the new ones first."""
    labels = groups[due.group]["incidents"]
    ordered = [*due.new, *[i for i in due.incidents if i not in due.new]]
    what = "still open" if due.repeat else f"{len(due.new)} new"
    if due.level:
        what = f"escalated to level {due.level}, not acked"
    return Message(
        notification_id=due.message_id,
        receiver=due.receiver,
        transition="escalated" if due.level else "repeated" if due.repeat else "opened",
        title=f"{len(due.incidents)} open incident(s), {what}: {due.group}",
        incidents=[{"incident_id": i, **labels.get(i, {})} for i in ordered],
        severity=max((labels.get(i, {}).get("severity", "warning") for i in ordered), key=_rank),
        link=link,
    )


def page_link(page_url: str, incidents: tuple[str, ...]) -> str | None:
    """Where a message's reader acks: the incident's page, or the open incidents for a group of several; None without
    an incident page (``incident_page_url``)."""
    if not page_url:
        return None
    base = page_url.rstrip("/")
    return f"{base}/incidents/{incidents[0]}" if len(incidents) == 1 else f"{base}/"


def _rank(severity: str) -> int:
    return {"info": 0, "warning": 1, "critical": 2}.get(severity, 1)


def notify(
    route_set: RouteSet,
    groups: dict,
    changes: list[Change],
    now: float,
    send: Callable[[Message], Outcome],
    silences=(),
    page_url: str = "",
) -> tuple[list[dict], dict]:
    """Apply ``changes``, send what is due at ``now`` (seconds) through ``send``, and return the ledger rows and the
    groups after the pass. A message that ``send`` dead-letters is recorded as such; the pass goes on."""
    muted: list = []
    due, groups = step(route_set, groups, changes, now, silences, muted=muted)
    at = datetime.fromtimestamp(now, timezone.utc)
    rows = []
    for each in due:
        outcome = send(message(each, groups, page_link(page_url, each.incidents)))
        rows.append(
            {
                "notification_id": each.message_id,
                "receiver": each.receiver,
                "group_name": each.group,
                "incident_ids": list(each.incidents),
                "new_incident_ids": list(each.new),
                "repeat": each.repeat,
                "level": each.level,
                "status": outcome.status,
                "reason": None,
                "attempts": list(outcome.attempts),
                "at": at,
            }
        )
    for change, reason in muted:
        incident = change.incident.incident_id
        rows.append(
            {
                "notification_id": notification_id(incident, change.transition, "", 0),
                "receiver": None,
                "group_name": None,
                "incident_ids": [incident],
                "new_incident_ids": [incident],
                "repeat": False,
                "level": 0,
                "status": "suppressed",
                "reason": reason,
                "attempts": [],
                "at": datetime.fromtimestamp(change.at, timezone.utc),
            }
        )
    return rows, groups
