"""Who would be told, and what is muted: incidents through a :class:`~sensorcep.routes.model.RouteSet`.

:func:`plan` takes open incidents (their labels) and the silences in force and returns the groups each receiver gets
(one message per group, listing its incidents: a 50-device site outage grouped by site is one message) and the
incidents that page nobody, each with its reason (a silence, or an inhibiting incident), so "why was nobody paged?"
has an answer. Pure Python; ``python -m sensorcep routes test --alerts sample.json`` prints a plan without sending.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sensorcep.routes.model import Route, RouteSet
from sensorcep.settings import parse_duration

#: Alertmanager's defaults, for a tree that does not say
GROUP_WAIT, GROUP_INTERVAL, REPEAT_INTERVAL = "30 seconds", "5 minutes", "4 hours"


@dataclass(frozen=True)
class Incident:
    """An open incident as routing sees it: its id and its labels (:data:`~sensorcep.routes.model.LABELS`)."""

    incident_id: str
    labels: dict[str, str]
    open: bool = True


@dataclass(frozen=True)
class Silence:
    """Mutes the incidents whose labels carry every ``matchers`` label from ``starts`` until ``ends``."""

    silence_id: str
    matchers: dict[str, str]
    starts: datetime
    ends: datetime
    author: str
    comment: str

    def mutes(self, incident: Incident, at: datetime) -> bool:
        return self.starts <= at < self.ends and matches(self.matchers, incident.labels)


@dataclass(frozen=True)
class Match:
    """Where a matching route sends an incident, and how it groups (inherited down the tree)."""

    receiver: str
    path: str
    group_by: tuple[str, ...]
    group_wait_s: float
    group_interval_s: float
    repeat_interval_s: float
    #: the escalation levels: (seconds after the incident opened, receiver), in order
    escalate: tuple[tuple[float, str], ...] = ()


@dataclass
class Group:
    """One message to ``receiver``: the incidents that share the route and its ``group_by`` labels."""

    match: Match
    key: tuple[tuple[str, str], ...]
    incidents: list[Incident] = field(default_factory=list)

    @property
    def title(self) -> str:
        by = ", ".join(f"{k}={v}" for k, v in self.key) or "all"
        return f"{self.match.receiver}: {len(self.incidents)} incident(s) [{by}] via {self.match.path}"


@dataclass
class Plan:
    groups: list[Group]
    muted: list[tuple[Incident, str]]


def matches(matchers: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(name) == value for name, value in matchers.items())


def routes_for(route_set: RouteSet, labels: dict[str, str]) -> list[Match]:
    """The routes an incident with ``labels`` goes to: depth first, the first matching child (and the next ones while
    a matching child says ``continue``); a route none of whose children matches takes the incident itself."""
    root = route_set.route
    inherited = Match(
        root.receiver,
        "route",
        tuple(root.group_by or ()),
        parse_duration(root.group_wait or GROUP_WAIT),
        parse_duration(root.group_interval or GROUP_INTERVAL),
        parse_duration(root.repeat_interval or REPEAT_INTERVAL),
        _levels(root),
    )
    return _walk(root, inherited, labels)


def _levels(route: Route) -> tuple[tuple[float, str], ...]:
    return tuple((parse_duration(level.after), level.to) for level in route.escalate or ())


def _walk(route: Route, here: Match, labels: dict[str, str]) -> list[Match]:
    found: list[Match] = []
    for index, child in enumerate(route.routes):
        if not matches(child.match, labels):
            continue
        found += _walk(child, _inherit(here, child, f"{here.path} > routes[{index + 1}]"), labels)
        if not child.continue_:
            break
    return found or [here]


def _inherit(parent: Match, child: Route, path: str) -> Match:
    return Match(
        child.receiver or parent.receiver,
        path,
        tuple(child.group_by) if child.group_by is not None else parent.group_by,
        parse_duration(child.group_wait) if child.group_wait else parent.group_wait_s,
        parse_duration(child.group_interval) if child.group_interval else parent.group_interval_s,
        parse_duration(child.repeat_interval) if child.repeat_interval else parent.repeat_interval_s,
        _levels(child) if child.escalate is not None else parent.escalate,
    )


def muted_by(route_set: RouteSet, incident: Incident, incidents: Iterable[Incident], silences, at) -> str | None:
    """Why ``incident`` pages nobody (a silence in force, or an open incident that inhibits it), or None."""
    for silence in silences:
        if silence.mutes(incident, at):
            until = f"{silence.ends:%Y-%m-%d %H:%M}"
            return f"silenced by {silence.silence_id} until {until} ({silence.author}: {silence.comment})"
    for rule in route_set.inhibit:
        if not matches(rule.target, incident.labels):
            continue
        for source in incidents:
            same = all(source.labels.get(n) == incident.labels.get(n) for n in rule.equal)
            if source.open and source is not incident and matches(rule.source, source.labels) and same:
                equal = ", ".join(rule.equal) or "no labels"
                return f"inhibited by {source.incident_id} ({source.labels.get('rule_id')}, equal {equal})"
    return None


def plan(
    route_set: RouteSet,
    incidents: list[Incident],
    silences: Iterable[Silence] = (),
    at=None,
    others: Iterable[Incident] = (),
) -> Plan:
    """The messages the open ``incidents`` make under ``route_set`` at ``at`` (default: now), and what is muted.
    ``others``: further open incidents that may inhibit these (already told about, so not planned again)."""
    at = at or datetime.now().astimezone()
    silences = list(silences)
    sources = [*incidents, *others]
    groups: dict[tuple, Group] = {}
    muted = []
    for incident in incidents:
        reason = muted_by(route_set, incident, sources, silences, at)
        if reason is not None:
            muted.append((incident, reason))
            continue
        for match in routes_for(route_set, incident.labels):
            key = tuple((name, incident.labels.get(name, "")) for name in match.group_by)
            groups.setdefault((match.receiver, match.path, key), Group(match, key)).incidents.append(incident)
    return Plan(list(groups.values()), muted)


def notification_id(incident_id: str, transition: str, receiver: str, level: int = 0) -> str:
    """The id a notification keeps across retries (a receiver's idempotency key, PagerDuty's ``dedup_key``)."""
    return hashlib.sha256(f"{incident_id}|{transition}|{receiver}|{level}".encode()).hexdigest()[:32]
