"""Alert rules as data: their typed model, read from YAML or from ``alert_rules`` rows, with a clear error per bad rule.

A rule set is a YAML mapping ``rules: [ {id, kind, ...}, ... ]`` (the packaged ``alert_rules.yaml`` documents every
field). :func:`parse_rules` turns it into :class:`Rule` objects or raises one :class:`RuleError` that names every
bad rule and what is wrong with it. Pure Python (pydantic), no Spark: ``make unit`` tests it in milliseconds.

pydantic (rather than hand-written checks) because it gives typed, frozen models with forbidden unknown keys (a
typo such as ``threshhold:`` is an error, not a silently ignored key), room for a tagged union on ``kind`` for the
rule kinds still to come, and per-field error locations that :class:`RuleError` turns into one sentence each.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sensorcep.errors import SensorCepError

#: an event's numeric fields a threshold may compare (the parsed event of 01's rules)
NUMERIC_FIELDS = ("sensor_freq",)
#: the comparisons a threshold takes, as written in a rule
OPERATORS = ("<", "<=", ">", ">=", "==", "!=")
#: the ways to scope a rule to some devices (site and sensor_type are columns of the ``devices`` table)
SCOPES = ("device_id", "site", "sensor_type")
#: rule kinds the design has room for, refused until their stateful query lands
PLANNED_KINDS = ("rate", "count", "absence", "sequence", "baseline")
#: the packaged rule set: what ``alert_rules`` is seeded with unless ``rules_file`` names another
DEFAULT_RULES = "alert_rules.yaml"


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


class ThresholdRule(_Strict):
    """An event whose ``field`` compares with ``value`` by ``op`` fires (stateless: real-time mode)."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    kind: Literal["threshold"]
    field: str
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float
    scope: Scope | None = None
    description: str = ""
    enabled: bool = True

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
    def text(self) -> str:
        """The rule in one line, as alerts and reports show it: ``sensor_freq < 0 [site=lab]``."""
        where = f" [{self.scope.column}={self.scope.value}]" if self.scope else ""
        return f"{self.field} {self.op} {self.value:g}{where}"

    def fires(self, field_values, device_ids):
        """Which of the events (numpy/pandas arrays of the rule's field and device ids) fire this rule, for a rule
        without a site or sensor_type scope (those need the devices table): the simulator acks its own alerts
        with it. The pipeline evaluates rules in Spark (:mod:`sensorcep.rules.evaluate`)."""
        if self.scope is not None and self.scope.column != "device_id":
            raise RuleError(f"rule {self.id}: a {self.scope.column} scope needs the devices table; use Spark")
        compare = {"<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__", "==": "__eq__", "!=": "__ne__"}
        hit = getattr(field_values, compare[self.op])(self.value)
        return hit & (device_ids == self.scope.value) if self.scope is not None else hit


#: a rule of any kind this version evaluates (a tagged union on ``kind`` once the stateful kinds land)
Rule = ThresholdRule


class RuleSet(_Strict):
    rules: list[Rule]


def _where(location: tuple, rules: list) -> str:
    """'rule 2 (negative_frequency), op' from a pydantic error location."""
    if len(location) < 2 or location[0] != "rules" or not isinstance(location[1], int):
        return ".".join(str(part) for part in location) or "the rule set"
    index = location[1]
    given = rules[index] if index < len(rules) else None
    name = given.get("id") if isinstance(given, dict) else None
    rest = [str(part) for part in location[2:] if part != "threshold"]
    label = f"rule {index + 1}" + (f" ({name})" if name else "")
    return f"{label}, {'.'.join(rest)}" if rest else label


def parse_rules(document: object, source: str = "rules") -> list[ThresholdRule]:
    """A loaded YAML document -> its rules, validated; :class:`RuleError` names every bad rule of ``source``."""
    if not isinstance(document, dict) or "rules" not in document:
        raise RuleError(f"{source}: expected a mapping with a 'rules' list (see the packaged {DEFAULT_RULES})")
    given = document["rules"]
    if not isinstance(given, list):
        raise RuleError(f"{source}: 'rules' must be a list of rules, not {type(given).__name__}")
    problems = []
    for index, rule in enumerate(given):
        kind = rule.get("kind") if isinstance(rule, dict) else None
        if kind in PLANNED_KINDS:
            label = f"rule {index + 1}" + (f" ({rule.get('id')})" if rule.get("id") else "")
            problems.append(
                f"{label}: kind {kind!r} is not available yet; this version evaluates threshold rules "
                f"(the stateful kinds {', '.join(PLANNED_KINDS)} are planned)"
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


def load_rules(path: str | Path | None = None) -> list[ThresholdRule]:
    """The rules of a YAML file (None or empty: the packaged default)."""
    if not path:
        text = resources.files("sensorcep.rules").joinpath(DEFAULT_RULES).read_text()
        return parse_rules(yaml.safe_load(text), DEFAULT_RULES)
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise RuleError(f"rules file {path}: cannot be read ({error.strerror})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RuleError(f"rules file {path}: not valid YAML ({error})") from None
    return parse_rules(document, str(path))


def spec_json(rule: ThresholdRule) -> str:
    """The rule's definition as stored in ``alert_rules.spec`` (sorted keys: equal rules, equal text)."""
    return json.dumps(rule.model_dump(mode="json", exclude={"id", "enabled"}, exclude_none=True), sort_keys=True)


def rule_from_spec(rule_id: str, spec: str, enabled: bool = True) -> ThresholdRule:
    """An ``alert_rules`` row's rule, validated again (a hand-edited row gets the same errors as a file)."""
    return parse_rules({"rules": [{"id": rule_id, "enabled": enabled, **json.loads(spec)}]}, "alert_rules")[0]
