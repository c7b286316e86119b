"""Alert rules as data: their typed model, read from YAML or from ``alert_rules`` rows, with a clear error per bad rule.

A rule set is a YAML mapping ``rules: [ {id, kind, ...}, ... ]`` (the packaged ``alert_rules.yaml`` documents every
field). :func:`parse_rules` turns it into :class:`Rule` objects or raises one :class:`RuleError` that names every
bad rule and what is wrong with it. Pure Python (pydantic), no Spark: ``make unit`` tests it in milliseconds.

pydantic (rather than hand-written checks) because it gives typed, frozen models with forbidden unknown keys (a
typo such as ``threshhold:`` is an error, not a silently ignored key), a tagged union on ``kind`` for the rule
kinds, and per-field error locations that :class:`RuleError` turns into one sentence each.
"""

from __future__ import annotations

import json
import math
import operator
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sensorcep.errors import SensorCepError
from sensorcep.settings import parse_duration
from sensorcep.yaml_files import read_yaml

#: an event's numeric fields a threshold may compare (the parsed event of 01's rules)
NUMERIC_FIELDS = ("sensor_freq",)
#: the comparisons a threshold takes, as written in a rule
OPERATORS = ("<", "<=", ">", ">=", "==", "!=")
#: the ways to scope a rule to some devices (site and sensor_type are columns of the ``devices`` table)
SCOPES = ("device_id", "site", "sensor_type")
#: rule kinds the design has room for, refused until their stateful query lands
#: the packaged rule set: what ``alert_rules`` is seeded with unless ``rules_file`` names another
DEFAULT_RULES = "alert_rules.yaml"


#: a rule's ``op`` as a Python comparison (the stateful kinds' logic and :class:`Condition`)
OPERATOR = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
OPERATOR["!="] = operator.ne


class RuleError(SensorCepError, ValueError):
    """A rule set that cannot be used: the message names each bad rule and what is wrong with it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scope(_Strict):
    """Which devices a rule watches: one device, a site or a sensor type; no scope: every device."""

    device_id: str | None = None
    site: str | None = None
    sensor_type: str | None = None

    @model_validator(mode="after")
    def _one_key(self) -> Scope:
        given = [name for name in SCOPES if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(SCOPES)}, not {', '.join(given) or 'none'}")
        if not getattr(self, given[0]).strip():
            raise ValueError(f"{given[0]} must not be empty")
        return self

    @property
    def column(self) -> str:
        return next(name for name in SCOPES if getattr(self, name) is not None)

    @property
    def value(self) -> str:
        return getattr(self, self.column)


#: an alert of a rule that does not say: open until acknowledged (latched), and, if not latched, open while its
#: repeats come within this much event time of each other (:mod:`sensorcep.rules.lifecycle`)
DEFAULT_LATCH = True
DEFAULT_SUPPRESS_FOR = "5 minutes"
#: how urgent a rule's incidents are, for routing (:mod:`sensorcep.routes`); a rule that does not say: warning
SEVERITIES = ("info", "warning", "critical")
DEFAULT_SEVERITY = "warning"


class _Rule(_Strict):
    """What every rule has: an id, a scope, a description, an enabled flag, how its alerts live (``latch``,
    ``suppress_for``: None = the defaults, :data:`DEFAULT_LATCH` and :data:`DEFAULT_SUPPRESS_FOR`) and how urgent they
    are (``severity``, for routing: None = :data:`DEFAULT_SEVERITY`)."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    scope: Scope | None = None
    description: str = ""
    enabled: bool = True
    latch: bool | None = None
    suppress_for: str | None = None
    severity: Literal["info", "warning", "critical"] | None = None

    @field_validator("suppress_for")
    @classmethod
    def _suppress_for(cls, text: str | None) -> str | None:
        return None if text is None else _positive_duration(text)

    @property
    def latched(self) -> bool:
        return DEFAULT_LATCH if self.latch is None else self.latch

    @property
    def suppress_us(self) -> int:
        return _microseconds(self.suppress_for or DEFAULT_SUPPRESS_FOR)

    @property
    def level(self) -> str:
        """The rule's severity (:data:`DEFAULT_SEVERITY` when it does not say)."""
        return self.severity or DEFAULT_SEVERITY

    #: stateless rules run in the real-time alert query; the others in the stateful rules query (micro-batches)
    stateless: ClassVar[bool] = False

    @property
    def where(self) -> str:
        return f" [{self.scope.column}={self.scope.value}]" if self.scope else ""


class _Comparison(_Rule):
    """A rule that compares a numeric field of an event (or its rate of change) with a value."""

    field: str
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float

    @field_validator("field")
    @classmethod
    def _numeric_field(cls, name: str) -> str:
        if name not in NUMERIC_FIELDS:
            raise ValueError(f"{name!r} is not a numeric field of an event; one of: {', '.join(NUMERIC_FIELDS)}")
        return name

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {value}")
        return value

    @property
    def condition(self) -> str:
        return f"{self.field} {self.op} {self.value:g}"

    def fires(self, field_values, device_ids):
        """Which of the events (numpy/pandas arrays of the rule's field and device ids) meet the comparison, for a
        rule without a site or sensor_type scope (those need the devices table): the simulator acks its own alerts
        with it. The pipeline evaluates threshold rules in Spark (:mod:`sensorcep.rules.evaluate`) and the stateful
        kinds in :mod:`sensorcep.rules.sequential`."""
        if self.scope is not None and self.scope.column != "device_id":
            raise RuleError(f"rule {self.id}: a {self.scope.column} scope needs the devices table; use Spark")
        compare = {"<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__", "==": "__eq__", "!=": "__ne__"}
        hit = getattr(field_values, compare[self.op])(self.value)
        return hit & (device_ids == self.scope.value) if self.scope is not None else hit


def _positive_duration(text: str) -> str:
    try:
        seconds = parse_duration(text, "within")
    except ValueError as error:
        raise ValueError(str(error).removeprefix("within: ")) from None
    if seconds <= 0:
        raise ValueError(f"must be longer than 0, not {text!r}")
    return text


def _microseconds(duration: str) -> int:
    return int(parse_duration(duration) * 1_000_000)


class ThresholdRule(_Comparison):
    """An event whose ``field`` compares with ``value`` by ``op`` fires (stateless: real-time mode)."""

    kind: Literal["threshold"]
    stateless: ClassVar[bool] = True

    @property
    def text(self) -> str:
        """The rule in one line, as alerts and reports show it: ``sensor_freq < 0 [site=lab]``."""
        return f"{self.condition}{self.where}"


class RateRule(_Comparison):
    """An event fires when the change of ``field`` per second of event time since the device's previous event
    compares with ``value`` by ``op`` (e.g. ``op: ">", value: 50``: a jump of more than 50 per second)."""

    kind: Literal["rate"]

    @property
    def text(self) -> str:
        return f"change of {self.field} per second {self.op} {self.value:g}{self.where}"


class CountRule(_Comparison):
    """An event fires when it is the ``at_least``-th or later event of its device meeting the comparison within
    ``within`` of event time (the window ending at the event, both ends included)."""

    kind: Literal["count"]
    at_least: int = Field(ge=2)
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    @property
    def text(self) -> str:
        return f"{self.at_least}+ events with {self.condition} within {self.within}{self.where}"


class Condition(_Strict):
    """A test of one event: ``field op value``."""

    field: str
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float

    _field = field_validator("field")(_Comparison._numeric_field.__func__)
    _value = field_validator("value")(_Comparison._finite.__func__)

    @property
    def text(self) -> str:
        return f"{self.field} {self.op} {self.value:g}"

    def holds(self, value: float) -> bool:
        return OPERATOR[self.op](value, self.value)


class SequenceRule(_Rule):
    """An event meeting ``then`` fires when an earlier event of its device met ``first`` at most ``within`` of event
    time before it; that ``first`` event is then used up (first, then, then: one alert)."""

    kind: Literal["sequence"]
    first: Condition
    then: Condition
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    @property
    def text(self) -> str:
        return f"{self.first.text} then {self.then.text} within {self.within}{self.where}"


class BaselineRule(_Rule):
    """An event fires when ``field`` is more than ``k`` spreads from its device's baseline: an exponentially weighted
    mean and standard deviation over about the last ``span`` events (alpha = 2 / (span + 1)), kept per device in
    state and written to ``device_baselines``. No verdict before the device has ``min_events`` events. Every event,
    an outlier too, then moves the baseline.

    The spread is taken as at least ``min_spread`` (unset: 0): a device whose readings were constant has a spread of
    0, and any departure from its constant value is then infinitely many spreads away and fires (a sensor stuck at one
    value that suddenly reads something else). For readings that are quantised or noise-free, ``min_spread`` says how
    far a reading may move unnoticed: it fires only beyond ``k * max(spread, min_spread)``."""

    kind: Literal["baseline"]
    field: str
    k: float = Field(gt=0)
    span: int = Field(ge=2)
    min_events: int = Field(default=20, ge=2)
    min_spread: float | None = Field(default=None, ge=0)  # None: 0, and a rule that does not say keeps its spec

    @property
    def spread_floor(self) -> float:
        return self.min_spread or 0.0

    _field = field_validator("field")(_Comparison._numeric_field.__func__)
    _k = field_validator("k")(_Comparison._finite.__func__)

    @property
    def alpha(self) -> float:
        return 2.0 / (self.span + 1)

    @property
    def text(self) -> str:
        return f"{self.field} more than {self.k:g} spreads from the device's baseline (span {self.span}){self.where}"


class AbsenceRule(_Rule):
    """No event from a device for ``within`` of event time after its last one fires once, at last event + within
    (a device never seen is not absent: it has no last event)."""

    kind: Literal["absence"]
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    @property
    def text(self) -> str:
        return f"no event for {self.within}{self.where}"


#: a rule of any kind this version evaluates, told apart by ``kind``
Rule = Annotated[
    ThresholdRule | RateRule | CountRule | AbsenceRule | SequenceRule | BaselineRule, Field(discriminator="kind")
]
#: the kinds, by name
KINDS = ("threshold", "rate", "count", "absence", "sequence", "baseline")


class RuleSet(_Strict):
    rules: list[Rule]


def _where(location: tuple, rules: list) -> str:
    """'rule 2 (negative_frequency), op' from a pydantic error location."""
    if len(location) < 2 or location[0] != "rules" or not isinstance(location[1], int):
        return ".".join(str(part) for part in location) or "the rule set"
    index = location[1]
    given = rules[index] if index < len(rules) else None
    name = given.get("id") if isinstance(given, dict) else None
    rest = [str(part) for part in location[2:] if part not in KINDS]
    label = f"rule {index + 1}" + (f" ({name})" if name else "")
    return f"{label}, {'.'.join(rest)}" if rest else label


def parse_rules(document: object, source: str = "rules") -> list[Rule]:
    """A loaded YAML document -> its rules, validated; :class:`RuleError` names every bad rule of ``source``."""
    if not isinstance(document, dict) or "rules" not in document:
        raise RuleError(f"{source}: expected a mapping with a 'rules' list (see the packaged {DEFAULT_RULES})")
    given = document["rules"]
    if not isinstance(given, list):
        raise RuleError(f"{source}: 'rules' must be a list of rules, not {type(given).__name__}")
    problems = []
    for index, rule in enumerate(given):
        if not isinstance(rule, dict):
            problems.append(f"rule {index + 1}: expected a mapping of a rule's fields, not {type(rule).__name__}")
            continue
        kind = rule.get("kind")
        label = f"rule {index + 1}" + (f" ({rule.get('id')})" if rule.get("id") else "")
        if kind is None or kind not in KINDS:
            problems.append(
                f"{label}: kind {'is missing' if kind is None else f'{kind!r} is not a rule kind'}; "
                f"one of: {', '.join(KINDS)}"
            )
    if problems:
        raise RuleError(f"{source}: " + "; ".join(problems))
    try:
        parsed = RuleSet.model_validate(document)
    except ValidationError as error:
        lines = [f"{_where(e['loc'], given)}: {e['msg'].removeprefix('Value error, ')}" for e in error.errors()]
        raise RuleError(f"{source}: {len(lines)} problem(s): " + "; ".join(lines)) from None
    seen: dict[str, int] = {}
    for index, rule in enumerate(parsed.rules):
        if rule.id in seen:
            raise RuleError(f"{source}: rules {seen[rule.id] + 1} and {index + 1} share the id {rule.id!r}")
        seen[rule.id] = index
    return parsed.rules


def load_rules(path: str | Path | None = None) -> list[Rule]:
    """The rules of a YAML file (None or empty: the packaged default)."""
    document, source = read_yaml(path, what="rules", package="sensorcep.rules", default=DEFAULT_RULES, error=RuleError)
    return parse_rules(document, source)


def spec_json(rule: Rule) -> str:
    """The rule's definition as stored in ``alert_rules.spec`` (sorted keys: equal rules, equal text)."""
    return json.dumps(rule.model_dump(mode="json", exclude={"id", "enabled"}, exclude_none=True), sort_keys=True)


def rule_from_spec(rule_id: str, spec: str, enabled: bool = True) -> Rule:
    """An ``alert_rules`` row's rule, validated again (a hand-edited row gets the same errors as a file)."""
    return parse_rules({"rules": [{"id": rule_id, "enabled": enabled, **json.loads(spec)}]}, "alert_rules")[0]
