"""Routes as data: who is told about an incident, grouped how, and what mutes it, read from YAML with one error per
bad entry.

A routes file is a mapping with ``receivers`` (where a message can go), ``route`` (a tree: an incident goes to the
first child route that matches it, and on to the next too when that one says ``continue``; a route without a match
of its children takes it itself) and ``inhibit`` (an open incident matching ``source`` mutes incidents matching
``target`` that share the ``equal`` labels), as Prometheus Alertmanager's configuration does. A route's grouping
(``group_by``, ``group_wait``, ``group_interval``, ``repeat_interval``) and receiver are inherited by its children.
The packaged ``routes.yaml`` documents every field.

Labels an incident carries: :data:`LABELS`. Receivers name secrets (a scope's keys on Databricks, environment
variables locally), never their values: no credential is ever in YAML. Pure Python (pydantic, as the rules are), no
Spark.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sensorcep.errors import SensorCepError
from sensorcep.settings import parse_duration
from sensorcep.yaml_files import read_yaml

#: what an incident is matched and grouped on
LABELS = ("rule_id", "device_id", "site", "sensor_type", "severity")
#: the kinds of receiver
RECEIVER_KINDS = ("webhook", "slack", "pagerduty", "email")
#: the packaged routes: one receiver, every incident, Alertmanager's default timings
DEFAULT_ROUTES = "routes.yaml"


class RoutesError(SensorCepError, ValueError):
    """A routes file that cannot be used: the message names each bad entry and what is wrong with it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _labels(mapping: dict[str, str]) -> dict[str, str]:
    unknown = sorted(set(mapping) - set(LABELS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not a label; labels: {', '.join(LABELS)}")
    return mapping


def _duration(text: str | None) -> str | None:
    if text is not None and parse_duration(text, "duration") <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return text


class Webhook(_Strict):
    """A JSON POST to ``url``, signed with HMAC-SHA256 (header ``X-Sensorcep-Signature``) by the secret named."""

    url: str = Field(pattern=r"^https?://")
    hmac_secret: str


class Slack(_Strict):
    """Slack's incoming-webhook format; the webhook URL (it holds a token) is the secret named."""

    webhook_secret: str


class PagerDuty(_Strict):
    """PagerDuty's Events API v2 (``dedup_key`` = the notification id); the routing key is the secret named."""

    routing_key_secret: str
    url: str | None = Field(default=None, pattern=r"^https?://")  # None: PagerDuty's own endpoint


class Email(_Strict):
    """E-mail over SMTP; host, port, user and password are the secret named (``host:port:user:password``)."""

    to: list[str] = Field(min_length=1)
    smtp_secret: str


class Receiver(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    webhook: Webhook | None = None
    slack: Slack | None = None
    pagerduty: PagerDuty | None = None
    email: Email | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Receiver:
        given = [kind for kind in RECEIVER_KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(RECEIVER_KINDS)}, not {', '.join(given) or 'none'}")
        return self

    @property
    def kind(self) -> str:
        return next(kind for kind in RECEIVER_KINDS if getattr(self, kind) is not None)


class Escalation(_Strict):
    """One level of a route's escalation: an incident still open ``after`` it opened (not acked, not resolved) is
    paged to the receiver ``to`` as well."""

    after: str
    to: str

    _after = field_validator("after")(_duration)


class Route(_Strict):
    """A node of the routing tree. ``match``: labels an incident must carry (none: every incident). ``escalate``:
    levels, ``after`` increasing (inherited by child routes that do not say)."""

    match: dict[str, str] = Field(default_factory=dict)
    receiver: str | None = None
    group_by: list[str] | None = None
    group_wait: str | None = None
    group_interval: str | None = None
    repeat_interval: str | None = None
    continue_: bool = Field(default=False, alias="continue")
    escalate: list[Escalation] | None = None
    routes: list[Route] = Field(default_factory=list)

    _match = field_validator("match")(_labels)
    _durations = field_validator("group_wait", "group_interval", "repeat_interval")(_duration)

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, names: list[str] | None) -> list[str] | None:
        if names is not None:
            _labels(dict.fromkeys(names, ""))
        return names

    @field_validator("escalate")
    @classmethod
    def _levels_in_order(cls, levels: list[Escalation] | None) -> list[Escalation] | None:
        afters = [parse_duration(level.after) for level in levels or []]
        if any(later <= earlier for earlier, later in zip(afters, afters[1:], strict=False)):
            raise ValueError(f"escalation levels must come later and later: after {[lv.after for lv in levels]}")
        return levels


class Inhibit(_Strict):
    source: dict[str, str] = Field(min_length=1)
    target: dict[str, str] = Field(min_length=1)
    equal: list[str] = Field(default_factory=list)

    _matchers = field_validator("source", "target")(_labels)

    @field_validator("equal")
    @classmethod
    def _equal(cls, names: list[str]) -> list[str]:
        _labels(dict.fromkeys(names, ""))
        return names


class RouteSet(_Strict):
    receivers: list[Receiver] = Field(min_length=1)
    route: Route
    inhibit: list[Inhibit] = Field(default_factory=list)

    @model_validator(mode="after")
    def _receivers_exist(self) -> RouteSet:
        names = [r.name for r in self.receivers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"receiver names must be unique: {', '.join(twice)} twice")
        if self.route.receiver is None:
            raise ValueError("the root route needs a receiver (its children inherit it)")
        missing = sorted({r for r in _receivers_named(self.route) if r not in names})
        if missing:
            raise ValueError(f"routes name receivers that are not declared: {', '.join(missing)}")
        return self

    def receiver(self, name: str) -> Receiver:
        return next(r for r in self.receivers if r.name == name)


def _receivers_named(route: Route) -> list[str]:
    own = ([route.receiver] if route.receiver else []) + [level.to for level in route.escalate or []]
    return own + [n for child in route.routes for n in _receivers_named(child)]


def parse_routes(document: object, source: str = "routes") -> RouteSet:
    """A loaded YAML document -> its routes, validated; :class:`RoutesError` names every bad entry of ``source``."""
    if not isinstance(document, dict) or "route" not in document:
        raise RoutesError(
            f"{source}: expected a mapping with 'receivers' and 'route' (see the packaged {DEFAULT_ROUTES})"
        )
    try:
        return RouteSet.model_validate(document)
    except ValidationError as error:
        lines = [f"{_where(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in error.errors()]
        raise RoutesError(f"{source}: {len(lines)} problem(s): " + "; ".join(lines)) from None


def _where(location: tuple) -> str:
    """'route.routes.2.receiver' -> 'route > routes[2] > receiver' (1-based, as a person counts)."""
    parts = []
    for part in location:
        if isinstance(part, int):
            parts[-1] = f"{parts[-1]}[{part + 1}]" if parts else f"[{part + 1}]"
        else:
            parts.append(str(part).rstrip("_"))
    return " > ".join(parts) or "the routes file"


def load_routes(path: str | Path | None = None) -> RouteSet:
    """The routes of a YAML file (None or empty: the packaged default)."""
    document, source = read_yaml(
        path, what="routes", package="sensorcep.routes", default=DEFAULT_ROUTES, error=RoutesError
    )
    return parse_routes(document, source)
