"""Rules written in Python: a typed builder for the same rule model the YAML files hold.

Each function returns the rule model's own object (:mod:`sensorcep.rules.model`), validated as a YAML rule is (a bad
rule is a :class:`~sensorcep.rules.model.RuleError` naming it), so what it builds goes wherever rules go:
:func:`sensorcep.rules.catalog.apply_rules`, a backtest, or :func:`to_yaml` for review and ``rules apply``. Nothing in
a rule is executed: a condition is data, compiled by the queries as any YAML rule is. ::

    from sensorcep.rules.builder import absent, aggregate, count, field, group, pattern, sequence, step, threshold
    from sensorcep.rules.builder import to_yaml

    freq, voltage = field("sensor_freq"), field("voltage")  # voltage: kept through extra_fields
    rules = [
        threshold("brownout", (freq > 55) & ((voltage > 250) | ~(voltage >= 180)), severity="critical"),
        count("sags", voltage < 180, at_least=3, within="5 minutes"),
        sequence("surge_then_sag", first=voltage > 250, then=voltage < 180, within="2 minutes"),
        aggregate("hot_average", "avg", freq, window="5 minutes", slide="1 minute", op=">", value=80),
        pattern("spike_twice", step(freq > 90), absent(freq < 60), step(freq > 90), within="2 minutes"),
        group("site_brownout", "brownout", by="site", at_least=3, within="10 minutes"),
    ]
    print(to_yaml(rules))

``a & b`` is ``all:``, ``a | b`` is ``any:``, ``~a`` is ``not:``; write parentheses around each comparison (Python
binds ``&`` tighter than ``>``). A rule whose condition is one comparison is written as ``field``/``op``/``value``,
exactly as in YAML, so a rule moved from YAML to Python keeps its spec and its version.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from pydantic import ValidationError

from sensorcep.rules.model import Comparison, Condition, Rule, RuleError, parse_rules


@dataclass(frozen=True, eq=False)
class Field:
    """An event field by name; comparing it with a number makes a :class:`~sensorcep.rules.model.Comparison`."""

    name: str

    def _compare(self, op: str, value: float) -> Comparison:
        try:
            return Comparison(field=self.name, op=op, value=value)
        except ValidationError as error:
            problems = "; ".join(f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}" for e in error.errors())
            raise RuleError(f"{self.name} {op} {value!r}: {problems}") from None

    def __lt__(self, value: float) -> Comparison:
        return self._compare("<", value)

    def __le__(self, value: float) -> Comparison:
        return self._compare("<=", value)

    def __gt__(self, value: float) -> Comparison:
        return self._compare(">", value)

    def __ge__(self, value: float) -> Comparison:
        return self._compare(">=", value)

    def __eq__(self, value: float) -> Comparison:  # type: ignore[override]
        return self._compare("==", value)

    def __ne__(self, value: float) -> Comparison:  # type: ignore[override]
        return self._compare("!=", value)

    __hash__ = None  # type: ignore[assignment]


def field(name: str) -> Field:
    return Field(name)


def _condition(condition: Condition) -> dict:
    """A condition as a rule's fields: one comparison inline (field, op, value), else ``when``."""
    if isinstance(condition, Comparison):
        return condition.model_dump()
    return {"when": condition.model_dump(mode="json", by_alias=True)}


def _rule(rule_id: str, kind: str, **fields) -> Rule:
    (rule,) = parse_rules({"rules": [{"id": rule_id, "kind": kind, **fields}]}, f"rule {rule_id}")
    return rule


def threshold(rule_id: str, condition: Condition, **options) -> Rule:
    """An event that meets ``condition`` fires (``options``: scope, description, enabled, latch, suppress_for,
    severity, as in YAML)."""
    return _rule(rule_id, "threshold", **_condition(condition), **options)


def count(rule_id: str, condition: Condition, *, at_least: int, within: str, **options) -> Rule:
    return _rule(rule_id, "count", **_condition(condition), at_least=at_least, within=within, **options)


def sequence(rule_id: str, *, first: Condition, then: Condition, within: str, **options) -> Rule:
    dump = lambda c: c.model_dump(mode="json", by_alias=True)  # noqa: E731
    return _rule(rule_id, "sequence", first=dump(first), then=dump(then), within=within, **options)


def rate(rule_id: str, of: Field, *, op: str, value: float, **options) -> Rule:
    return _rule(rule_id, "rate", field=of.name, op=op, value=value, **options)


def absence(rule_id: str, *, within: str, **options) -> Rule:
    return _rule(rule_id, "absence", within=within, **options)


def baseline(rule_id: str, of: Field, *, k: float, span: int, **options) -> Rule:
    return _rule(rule_id, "baseline", field=of.name, k=k, span=span, **options)


def aggregate(
    rule_id: str,
    function: str,
    of: Field | None = None,
    *,
    window: str,
    op: str,
    value: float | None = None,
    value_from: str | None = None,
    **options,
) -> Rule:
    """``kind: aggregate``, compared with ``value`` or with each device's ``value_from="devices.<column>"``."""
    than = {"value": value} if value_from is None else {"value_from": value_from}
    return _rule(
        rule_id, "aggregate", function=function, window=window, op=op, **than,
        **({"field": of.name} if of is not None else {}), **options,
    )  # fmt: skip


def step(when: Condition, *, times: tuple[int, int | None] | None = None) -> dict:
    """A pattern step: events meeting ``when``, ``times`` = (min, max) of them (max None: no bound)."""
    dump = when.model_dump(mode="json", by_alias=True)
    return {"when": dump, **({"times": {"min": times[0], "max": times[1]}} if times else {})}


def absent(when: Condition) -> dict:
    """A pattern's ``not`` step: no event meeting ``when`` between its neighbours (last: until ``within`` ends)."""
    return {"when": when.model_dump(mode="json", by_alias=True), "not": True}


def pattern(rule_id: str, *steps: dict, within: str, **options) -> Rule:
    """``kind: pattern`` from :func:`step` and :func:`absent`, e.g.
    ``pattern("spike_twice", step(freq > 90), absent(freq < 60), step(freq > 90), within="2 minutes")``."""
    return _rule(rule_id, "pattern", steps=list(steps), within=within, **options)


def group(rule_id: str, rule: str, *, by: str, at_least: int, within: str, **options) -> Rule:
    """``kind: group``: ``at_least`` devices of one ``by`` (site, sensor_type) firing the rule ``rule`` within
    ``within``, e.g. ``group("site_pumps", "pump_fault", by="site", at_least=3, within="10 minutes")``."""
    return _rule(rule_id, "group", rule=rule, by=by, at_least=at_least, within=within, **options)


def to_yaml(rules: list[Rule]) -> str:
    """The rules as a YAML rule set (what ``rules check`` and ``rules apply --file`` read), defaults left out."""
    written = [
        {"id": rule.id, **rule.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude={"id"})}
        for rule in rules
    ]
    return yaml.safe_dump({"rules": written}, sort_keys=False)
