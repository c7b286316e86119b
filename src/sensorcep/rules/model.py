"""Alert rules as data: their typed model, read from YAML or from ``alert_rules`` rows, with a clear error per bad rule.

A rule set is a YAML mapping ``rules: [ {id, kind, ...}, ... ]`` (the packaged ``alert_rules.yaml`` documents every
field). :func:`parse_rules` turns it into :class:`Rule` objects or raises one :class:`RuleError` that names every
bad rule and what is wrong with it. Pure Python (pydantic), no Spark: ``make unit`` tests it in milliseconds.

pydantic (rather than hand-written checks) because it gives typed, frozen models with forbidden unknown keys (a
typo such as ``threshhold:`` is an error, not a silently ignored key), a tagged union on ``kind`` for the rule
kinds, and per-field error locations that :class:`RuleError` turns into one sentence each.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from sensorcep.errors import SensorCepError
from sensorcep.settings import parse_duration
from sensorcep.yaml_files import read_yaml

#: the numeric field every event carries; a rule may also compare fields kept through ``extra_fields`` (read as
#: numbers), which :func:`check_fields` checks against the settings
NUMERIC_FIELDS = ("sensor_freq",)
#: an event's fields that are not numbers: no condition compares them
NOT_NUMERIC = ("device_id", "event_time", "kafka_timestamp", "topic", "partition", "offset", "key", "value", "reason")
#: the most alternatives a rule's condition may expand to (its ``any:`` branches multiplied out across ``all:``)
MAX_ALTERNATIVES = 32
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

    #: stateless rules run in the real-time alert query; the others in the stateful rules query (micro-batches), but
    #: for the rules over other rules' alerts (``over_alerts``: group rules), which run in the group rules query
    stateless: ClassVar[bool] = False
    over_alerts: ClassVar[bool] = False

    @property
    def where(self) -> str:
        return f" [{self.scope.column}={self.scope.value}]" if self.scope else ""


def _event_field(name: str) -> str:
    """A field a rule may read: a name, and not one of the event's fields that are not numbers."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"{name!r} is not a field name (letters, digits and _)")
    if name in NOT_NUMERIC:
        raise ValueError(
            f"{name!r} is not a numeric field of an event; compare sensor_freq or a field kept through extra_fields"
        )
    return name


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, not {value}")
    return value


#: how a field kept through ``extra_fields`` (bronze keeps it as text) must read to count as a number: a plain decimal
#: (``230``, ``-0.5``, ``1e3``), nothing around it; anything else (``"high"``, ``0x10``, ``NaN``, `` 5``) is no value.
#: Spark and Python read it with this same pattern, whole (:func:`number`, :mod:`sensorcep.rules.evaluate`), so both
#: judge an event alike
NUMBER_PATTERN = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"


def number(value: object) -> float | None:
    """An event's field as a condition reads it: a finite number, or None (absent, null, not a number, infinite)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not re.fullmatch(NUMBER_PATTERN, value):
            return None
    elif not isinstance(value, int | float):
        return None
    found = float(value)
    return found if math.isfinite(found) else None


class _Combines(_Strict):
    """Conditions combine with Python's operators, for the builder (:mod:`sensorcep.rules.builder`): ``a & b`` is
    ``all: [a, b]``, ``a | b`` is ``any: [a, b]``, ``~a`` is ``not: a`` (nested ``&`` / ``|`` flatten)."""

    def __and__(self, other: Condition) -> AllOf:
        return AllOf(all=[*(self.all if isinstance(self, AllOf) else [self]), other])

    def __or__(self, other: Condition) -> AnyOf:
        return AnyOf(any=[*(self.any if isinstance(self, AnyOf) else [self]), other])

    def __invert__(self) -> Not:
        return Not(negated=self)


#: a comparison's operator when the comparison is negated (``not:``)
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


class Comparison(_Combines):
    """``field op value``: a numeric field of an event compared with a number. An event that does not carry the
    field as a finite number (absent, null, text) does not meet the comparison, nor its negation."""

    field: str
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float

    _field = field_validator("field")(_event_field)
    _value = field_validator("value")(_finite)

    @property
    def text(self) -> str:
        return f"{self.field} {self.op} {self.value:g}"

    def negated(self) -> Comparison:
        return Comparison(field=self.field, op=NEGATED[self.op], value=self.value)


class AllOf(_Combines):
    """``all: [...]``: every condition of the list holds."""

    all: list[Condition] = Field(min_length=1)


class AnyOf(_Combines):
    """``any: [...]``: at least one condition of the list holds."""

    any: list[Condition] = Field(min_length=1)


class Not(_Combines):
    """``not: {...}``: the condition does not hold (for an event that carries its fields: see :class:`Comparison`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    negated: Condition = Field(alias="not")


def _condition_kind(given: object) -> str:
    if isinstance(given, dict):
        return next((key for key in ("all", "any", "not") if key in given), "compare")
    return {AllOf: "all", AnyOf: "any", Not: "not"}.get(type(given), "compare")


#: a test of one event: a comparison, or comparisons combined with ``all:`` / ``any:`` / ``not:``, nested freely
Condition = Annotated[
    Union[  # noqa: UP007 - pydantic's tagged union of the four shapes
        Annotated[Comparison, Tag("compare")],
        Annotated[AllOf, Tag("all")],
        Annotated[AnyOf, Tag("any")],
        Annotated[Not, Tag("not")],
    ],
    Discriminator(_condition_kind),
]
AllOf.model_rebuild()
AnyOf.model_rebuild()
Not.model_rebuild()


def condition_text(condition: Condition, nested: bool = False) -> str:
    """``sensor_freq > 55 and (voltage > 250 or not voltage >= 180)``."""
    if isinstance(condition, Comparison):
        return condition.text
    if isinstance(condition, Not):
        return f"not {condition_text(condition.negated, nested=True)}"
    parts, word = (condition.all, " and ") if isinstance(condition, AllOf) else (condition.any, " or ")
    if len(parts) == 1:
        return condition_text(parts[0], nested)
    text = word.join(condition_text(part, nested=True) for part in parts)
    return f"({text})" if nested else text


def alternatives(condition: Condition, negate: bool = False) -> list[tuple[Comparison, ...]]:
    """The condition as alternatives of comparisons that must all hold (``not:`` pushed down to the comparisons,
    ``any:`` multiplied out across ``all:``): the form Spark evaluates, and :func:`holds` too."""
    if isinstance(condition, Comparison):
        return [(condition.negated() if negate else condition,)]
    if isinstance(condition, Not):
        return alternatives(condition.negated, not negate)
    parts = [alternatives(part, negate) for part in (condition.all if isinstance(condition, AllOf) else condition.any)]
    if isinstance(condition, AllOf) != negate:  # all, or not any: each part holds
        product: list[tuple[Comparison, ...]] = [()]
        for options in parts:
            product = [left + right for left in product for right in options]
            if len(product) > MAX_ALTERNATIVES:  # bounded before it grows further
                raise ValueError(
                    f"the condition expands to more than {MAX_ALTERNATIVES} alternatives; "
                    "write it with fewer any: inside all:"
                )
        return product
    return [option for options in parts for option in options]  # any, or not all: one part holds


def per_object(cache: dict, thing: object, work):
    """``work(thing)``, worked out once per object and kept in ``cache`` by the object's identity (rules and conditions
    hold lists: not hashable); the object is kept with its result, so its id is not reused while cached. Rules change
    rarely: a cache past 10,000 objects starts afresh, so a long-running job does not keep every old rule."""
    found = cache.get(id(thing))
    if found is None or found[0] is not thing:
        if len(cache) > 10_000:
            cache.clear()
        found = cache[id(thing)] = (thing, work(thing))
    return found[1]


def holds(condition: Condition, event: Mapping[str, object]) -> bool:
    """Whether an event (field name -> value) meets the condition (:class:`Judged`, as the stateful rules judge every
    event of every device)."""
    return Judged(event).holds(condition)


class Judged:
    """One event's fields as the rules read them: each field read as a number once, each comparison judged once (the
    rules in force judge the same comparisons of the same event, a pattern once per partial match)."""

    __slots__ = ("fields", "numbers", "compared")

    def __init__(self, fields: Mapping[str, object]):
        self.fields = fields
        self.numbers: dict[str, float | None] = {}
        self.compared: dict[tuple, bool] = {}

    def number(self, field: str) -> float | None:
        """The field as :func:`number` reads it."""
        if field in self.numbers:
            return self.numbers[field]
        found = self.numbers[field] = number(self.fields.get(field))
        return found

    def holds(self, condition) -> bool:
        """Whether one of the condition's :func:`alternatives` holds in full."""
        return self.meets(options_of(condition))

    def meets(self, options: tuple) -> bool:
        """:meth:`holds` for a condition's :func:`options_of`, worked out beforehand."""
        for option in options:
            for comparison in option:
                met = self.compared.get(comparison)
                if met is None:
                    field, op, value = comparison
                    found = self.number(field)
                    met = self.compared[comparison] = found is not None and OPERATOR[op](found, value)
                if not met:
                    break
            else:
                return True
        return False


#: :func:`options_of` conditions
_OPTIONS: dict[int, tuple] = {}


def options_of(condition: Condition) -> tuple[tuple[tuple[str, str, float], ...], ...]:
    """The condition's :func:`alternatives` as (field, op, value) comparisons (worked out once per condition)."""
    return per_object(_OPTIONS, condition, _options)


def _options(condition: Condition) -> tuple[tuple[tuple[str, str, float], ...], ...]:
    return tuple(tuple((c.field, c.op, c.value) for c in option) for option in alternatives(condition))


def fields_of(condition: Condition) -> set[str]:
    return {c.field for option in alternatives(condition) for c in option}


class _Comparison(_Rule):
    """A rule that compares the rate of change of a numeric field of an event with a value."""

    field: str
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float

    _field = field_validator("field")(_event_field)
    _value = field_validator("value")(_finite)

    @property
    def fields(self) -> set[str]:
        return {self.field}


class _Conditional(_Rule):
    """A rule that tests each event with a condition: one comparison (``field``, ``op``, ``value``) or ``when`` (a
    condition: comparisons combined with all/any/not)."""

    field: str | None = None
    op: Literal["<", "<=", ">", ">=", "==", "!="] | None = None
    value: float | None = None
    when: Condition | None = None

    _field = field_validator("field")(lambda name: None if name is None else _event_field(name))
    _value = field_validator("value")(lambda value: None if value is None else _finite(value))

    @model_validator(mode="after")
    def _one_form(self) -> _Conditional:
        inline = [name for name in ("field", "op", "value") if getattr(self, name) is not None]
        if self.when is not None and inline:
            raise ValueError(f"give either when or field/op/value, not both ({', '.join(inline)} given with when)")
        if self.when is None and len(inline) < 3:
            missing = [name for name in ("field", "op", "value") if getattr(self, name) is None]
            raise ValueError(f"give a condition: field, op and value ({', '.join(missing)} missing), or when")
        alternatives(self.test)  # bounded
        return self

    @property
    def test(self) -> Condition:
        """The rule's condition (one :class:`Comparison` for the inline form)."""
        return self.when if self.when is not None else Comparison(field=self.field, op=self.op, value=self.value)

    @property
    def condition(self) -> str:
        return condition_text(self.test)

    @property
    def fields(self) -> set[str]:
        return fields_of(self.test)

    def fires(self, columns: Mapping[str, object], device_ids):
        """Which of the events (numpy/pandas arrays by field name, and their device ids) meet the condition, for a
        rule without a site or sensor_type scope (those need the devices table): the simulator acks its own alerts
        with it. A field not in ``columns`` is absent from every event. The pipeline evaluates threshold rules in
        Spark (:mod:`sensorcep.rules.evaluate`) and the stateful kinds in :mod:`sensorcep.rules.sequential`."""
        if self.scope is not None and self.scope.column != "device_id":
            raise RuleError(f"rule {self.id}: a {self.scope.column} scope needs the devices table; use Spark")
        compare = {"<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__", "==": "__eq__", "!=": "__ne__"}
        hit = device_ids != device_ids  # all False, the arrays' shape
        for option in alternatives(self.test):
            met = device_ids == device_ids
            for c in option:
                met = met & getattr(columns[c.field], compare[c.op])(c.value) if c.field in columns else met & False
            hit = hit | met
        return hit & (device_ids == self.scope.value) if self.scope is not None else hit


#: the longest duration a rule may give (a state timer is microseconds in a 64-bit number: a typo of many digits would
#: overflow it, or be infinite, and stop the rule's query at run time instead of here)
LONGEST_DURATION_DAYS = 3_660


def _positive_duration(text: str) -> str:
    try:
        seconds = parse_duration(text, "within")
    except ValueError as error:
        raise ValueError(str(error).removeprefix("within: ")) from None
    if not seconds > 0:
        raise ValueError(f"must be longer than 0, not {text!r}")
    if not seconds <= LONGEST_DURATION_DAYS * 86_400:
        raise ValueError(f"must be at most {LONGEST_DURATION_DAYS:,} days (about ten years), not {text!r}")
    return text


@functools.lru_cache(maxsize=4096)
def _microseconds(duration: str) -> int:
    """A duration in µs (cached: the stateful rules read a rule's durations for every event)."""
    return int(parse_duration(duration) * 1_000_000)


class ThresholdRule(_Conditional):
    """An event that meets the condition fires (stateless: real-time mode)."""

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


class CountRule(_Conditional):
    """An event fires when it is the ``at_least``-th or later event of its device meeting the condition within
    ``within`` of event time (the window ending at the event, both ends included)."""

    kind: Literal["count"]
    at_least: int = Field(ge=2)
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    @property
    def text(self) -> str:
        return f"{self.at_least}+ events with {self.condition} within {self.within}{self.where}"


class SequenceRule(_Rule):
    """An event meeting ``then`` fires when an earlier event of its device met ``first`` at most ``within`` of event
    time before it; that ``first`` event is then used up (first, then, then: one alert)."""

    kind: Literal["sequence"]
    first: Condition
    then: Condition
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    @model_validator(mode="after")
    def _bounded(self) -> SequenceRule:
        alternatives(self.first), alternatives(self.then)
        return self

    @property
    def fields(self) -> set[str]:
        return fields_of(self.first) | fields_of(self.then)

    @property
    def text(self) -> str:
        first, then = condition_text(self.first, nested=True), condition_text(self.then, nested=True)
        return f"{first} then {then} within {self.within}{self.where}"


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

    _field = field_validator("field")(_event_field)
    _k = field_validator("k")(_finite)

    @property
    def fields(self) -> set[str]:
        return {self.field}

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

    fields: ClassVar[set[str]] = set()

    @property
    def text(self) -> str:
        return f"no event for {self.within}{self.where}"


#: the most times a pattern step may be asked to repeat (``times: {max}``): what bounds a pattern's memory
MAX_REPEAT = 100


class Times(_Strict):
    """How many events a pattern step takes: at least ``min``, at most ``max`` (None: no bound, "one or more")."""

    min: int = Field(default=1, ge=1, le=MAX_REPEAT)
    max: int | None = Field(default=None, ge=1, le=MAX_REPEAT)

    @model_validator(mode="after")
    def _ordered(self) -> Times:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self

    @property
    def text(self) -> str:
        if self.max == self.min:
            return f"{{{self.min}}}" if self.min > 1 else ""
        return "+" if (self.min, self.max) == (1, None) else f"{{{self.min},{'' if self.max is None else self.max}}}"


class PatternStep(_Strict):
    """One step of a pattern: events meeting ``when`` (``times`` of them, default exactly one), or with ``not: true``
    the absence of any such event between the neighbouring steps (after the last step: until ``within`` ends)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    when: Condition
    times: Times | None = None
    absent: bool = Field(default=False, alias="not")

    @property
    def repeat(self) -> Times:
        return self.times or Times(min=1, max=1)

    @property
    def text(self) -> str:
        condition = condition_text(self.when, nested=True)
        return f"no {condition}" if self.absent else f"{condition}{self.repeat.text}"


class PatternRule(_Rule):
    """``steps`` matched in event-time order on one device's events, the whole match within ``within`` of its first
    event. Between two matched steps other events may come (Flink's relaxed contiguity, ``followedBy``), except one
    meeting a ``not`` step placed between them; a trailing ``not`` step asks that no such event come until ``within``
    ends after the match's first event. The alert is the match's last event (a trailing ``not``: the moment
    ``within`` ends); after a match, matching starts again after its last event (Flink's ``SKIP_PAST_LAST_EVENT``:
    partial matches begun before it are dropped)."""

    kind: Literal["pattern"]
    steps: list[PatternStep] = Field(min_length=2)
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    @model_validator(mode="after")
    def _shape(self) -> PatternRule:
        if self.steps[0].absent:
            raise ValueError("the first step cannot be a not step: a match starts with an event")
        for number_, step in enumerate(self.steps, start=1):
            if step.absent and step.times is not None:
                raise ValueError(f"step {number_} is a not step: it takes no times")
            alternatives(step.when)
        return self

    @property
    def fields(self) -> set[str]:
        return set().union(*(fields_of(step.when) for step in self.steps))

    @property
    def text(self) -> str:
        return f"{' then '.join(step.text for step in self.steps)} within {self.within}{self.where}"


#: what an aggregate rule computes over a window's events
FUNCTIONS = ("avg", "min", "max", "sum", "count", "stddev", "range")


class AggregateRule(_Rule):
    """A device's events in each event-time window (``window`` long, a new one every ``slide``: sliding windows;
    ``slide`` unset: tumbling) are aggregated (``function`` of ``field``: avg, min, max, sum, count, stddev, the
    sample standard deviation, or range, max - min: how far the field moved within the window) and the window fires
    once, when the watermark closes it, if the aggregate compares with ``value`` by ``op``. The window's events are
    those that carry ``field`` as a number (``count`` without a field: every event); a window without such events has
    no aggregate and fires nothing (stddev: fewer than two). Windows start at multiples of ``slide`` since the epoch,
    as Spark's ``window()``; the alert's event time is the window's end. Instead of ``value``, ``value_from:
    devices.<column>`` compares with the device's own number in that column of the ``devices`` table (a setpoint), as
    the table is when the query starts; a device without a number there fires nothing."""

    kind: Literal["aggregate"]
    function: Literal["avg", "min", "max", "sum", "count", "stddev", "range"]
    field: str | None = None
    window: str
    slide: str | None = None
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float | None = None
    value_from: str | None = Field(default=None, pattern=r"^devices\.[A-Za-z_][A-Za-z0-9_]*$")

    _field = field_validator("field")(lambda name: None if name is None else _event_field(name))
    _value = field_validator("value")(lambda value: None if value is None else _finite(value))
    _window = field_validator("window", "slide")(lambda text: None if text is None else _positive_duration(text))

    @model_validator(mode="after")
    def _complete(self) -> AggregateRule:
        if self.field is None and self.function != "count":
            raise ValueError(f"{self.function} needs a field to aggregate (only count may go without one)")
        if (self.value is None) == (self.value_from is None):
            raise ValueError("give value (a number) or value_from (devices.<column>: each device's own), one of them")
        if self.slide is not None and self.window_us % self.slide_us:
            raise ValueError(f"window ({self.window}) must be a whole number of slides ({self.slide})")
        if self.window_us // self.slide_us > MAX_OPEN_WINDOWS:
            raise ValueError(f"window / slide is {self.window_us // self.slide_us}: at most {MAX_OPEN_WINDOWS} windows")
        return self

    window_us = property(lambda self: _microseconds(self.window))
    slide_us = property(lambda self: _microseconds(self.slide or self.window))

    @property
    def fields(self) -> set[str]:
        return {self.field} if self.field else set()

    @property
    def text(self) -> str:
        of = f"{self.function}({self.field or '*'})"
        every = f" every {self.slide}" if self.slide and self.slide_us != self.window_us else ""
        than = self.value_from if self.value is None else f"{self.value:g}"
        return f"{of} over {self.window}{every} {self.op} {than}{self.where}"

    @property
    def devices_column(self) -> str | None:
        """The ``devices`` column ``value_from`` names (None: the rule compares with ``value``)."""
        return self.value_from.split(".", 1)[1] if self.value_from else None


#: the most windows one event of an aggregate rule falls into (window / slide): what a device's memory holds per rule
MAX_OPEN_WINDOWS = 60
#: the labels a group rule may group devices by (columns of the ``devices`` table)
GROUP_LABELS = ("site", "sensor_type")


class GroupRule(_Rule):
    """At least ``at_least`` distinct devices of one ``site`` (or ``sensor_type``: ``by``) firing the rule named
    ``rule`` within ``within`` of event time fires once for the group: a site-wide fault is one incident, not one per
    device. Judged over the named rule's alerts in event-time order: the alert that brings the count of devices with
    an alert in the last ``within`` to ``at_least`` fires, at that alert's time, and counting restarts after it (the
    alerts up to it count no more). The group alert's ``device_id`` is the group's label, ``site=<site>`` (or
    ``sensor_type=<type>``), so the lifecycle keeps one incident per group rule and group; a device without that
    label in the ``devices`` table belongs to no group. The named rule is any rule of another kind in the same set
    (it may be disabled: then the group fires nothing)."""

    kind: Literal["group"]
    rule: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    by: Literal["site", "sensor_type"]
    at_least: int = Field(ge=2, le=10_000)
    within: str

    _within = field_validator("within")(_positive_duration)
    within_us = property(lambda self: _microseconds(self.within))

    fields: ClassVar[set[str]] = set()
    #: judged over other rules' alerts, not over events: the group rules query (:mod:`sensorcep.pipeline.group_rules`)
    over_alerts: ClassVar[bool] = True

    @model_validator(mode="after")
    def _unscoped(self) -> GroupRule:
        if self.scope is not None:
            raise ValueError("a group rule takes no scope: it groups the devices by `by` (scope the rule it names)")
        return self

    @property
    def text(self) -> str:
        return f"{self.at_least} devices of one {self.by} fire {self.rule} within {self.within}"


#: a rule of any kind this version evaluates, told apart by ``kind``
Rule = Annotated[
    ThresholdRule
    | RateRule
    | CountRule
    | AbsenceRule
    | SequenceRule
    | BaselineRule
    | AggregateRule
    | PatternRule
    | GroupRule,
    Field(discriminator="kind"),
]
#: the kinds, by name
KINDS = ("threshold", "rate", "count", "absence", "sequence", "baseline", "aggregate", "pattern", "group")


class RuleSet(_Strict):
    rules: list[Rule]


def _where(location: tuple, rules: list) -> str:
    """'rule 2 (negative_frequency), op' from a pydantic error location."""
    if len(location) < 2 or location[0] != "rules" or not isinstance(location[1], int):
        return ".".join(str(part) for part in location) or "the rule set"
    index = location[1]
    given = rules[index] if index < len(rules) else None
    name = given.get("id") if isinstance(given, dict) else None
    rest: list[str] = []
    for part in location[2:]:  # the union's tags out: when.all.0.field, not when.all.all.0.compare.field
        if part not in KINDS and part != "compare" and not (rest and part == rest[-1] in ("all", "any", "not")):
            rest.append(str(part))
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


def check_groups(rules: list[Rule], source: str = "rules") -> list[Rule]:
    """``rules``, if each group rule names a rule of the set that is not itself a group rule; else a
    :class:`RuleError` naming the group rule. (A rule set as a whole: a file, or what ``rules apply`` writes.)"""
    kinds = {rule.id: rule.kind for rule in rules}
    for rule in rules:
        if rule.kind == "group" and kinds.get(rule.rule) in (None, "group"):
            what = "no rule of the set" if rule.rule not in kinds else "another group rule"
            raise RuleError(
                f"{source}: group rule {rule.id} counts the alerts of {rule.rule!r}, which is {what}; name a rule of "
                "another kind in the same rule set"
            )
    return rules


def check_fields(rules: list[Rule], extra_fields: list[str], source: str = "rules") -> list[Rule]:
    """``rules``, if every field they read is one an event carries: ``sensor_freq``, or a field kept through the
    ``extra_fields`` setting; else a :class:`RuleError` naming each rule and field."""
    known = set(NUMERIC_FIELDS) | set(extra_fields)
    unknown = [(rule.id, sorted(rule.fields - known)) for rule in rules if rule.fields - known]
    if unknown:
        named = "; ".join(f"rule {rule_id} reads {', '.join(fields)}" for rule_id, fields in unknown)
        kept = ", ".join(sorted(extra_fields)) or "none"
        raise RuleError(
            f"{source}: {named}, which no event carries: events have sensor_freq and the fields kept through the "
            f"extra_fields setting (now: {kept}); add the field to extra_fields, or correct the rule"
        )
    return rules


def load_rules(path: str | Path | None = None) -> list[Rule]:
    """The rules of a YAML file (None or empty: the packaged default)."""
    document, source = read_yaml(path, what="rules", package="sensorcep.rules", default=DEFAULT_RULES, error=RuleError)
    return check_groups(parse_rules(document, source), source)


#: the line of the packaged rule set after which its commented examples, one of each kind, begin
EXAMPLES_AFTER = "ready to copy"


def packaged_examples() -> list[Rule]:
    """The packaged rule set's commented examples (one rule of each kind, ready to copy), uncommented and parsed: what
    a user who puts them all in force runs. The brownout example reads ``voltage`` (``extra_fields=voltage``), the
    scoped one and the group rule need the devices table."""
    text = resources.files("sensorcep.rules").joinpath(DEFAULT_RULES).read_text()
    examples = text.split(EXAMPLES_AFTER, 1)[1].split("\n", 1)[1]
    uncommented = "\n".join(line.replace("  # ", "  ", 1) for line in examples.splitlines())
    return parse_rules(yaml.safe_load("rules:\n" + uncommented), f"{DEFAULT_RULES} (its examples)")


def spec_json(rule: Rule) -> str:
    """The rule's definition as stored in ``alert_rules.spec`` (sorted keys: equal rules, equal text)."""
    spec = rule.model_dump(mode="json", by_alias=True, exclude={"id", "enabled"}, exclude_none=True)
    return json.dumps(spec, sort_keys=True)


def rule_from_spec(rule_id: str, spec: str, enabled: bool = True) -> Rule:
    """An ``alert_rules`` row's rule, validated again (a hand-edited row gets the same errors as a file)."""
    return parse_rules({"rules": [{"id": rule_id, "enabled": enabled, **json.loads(spec)}]}, "alert_rules")[0]
