"""Rules -> Spark expressions: which events fire which rules, the same code live (streaming) and in a backtest (batch).

:func:`fire` keeps the events that fire at least one rule, one row per (event, rule) with the rule's id, version and
text. All rules are compiled into the query's plan as one array literal and a lambda over it (no join, no UDF, no
state), so the real-time alert query evaluates them record by record at its usual latency, and the plan stays the
same size whatever the number of rules; a scope by ``site`` or ``sensor_type`` is resolved through the ``devices``
table to its device ids when the query starts (and again at each reload).
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sensorcep.errors import SensorCepError
from sensorcep.io.lake import Tables
from sensorcep.rules.catalog import VersionedRule
from sensorcep.rules.model import NUMBER_PATTERN, NUMERIC_FIELDS, alternatives, number
from sensorcep.settings import Settings

log = logging.getLogger(__name__)

#: the columns :func:`fire` adds to each event it keeps
FIRED_COLUMNS = ["rule_id", "rule_version", "rule"]


class RuleScopeError(SensorCepError, RuntimeError):
    """A rule scoped by site or sensor type, and no ``devices`` table to say which devices those are."""


class RuleFieldError(SensorCepError, ValueError):
    """A rule reads an event field the events do not carry."""


def scope_devices(spark: SparkSession, settings: Settings, rules: list[VersionedRule]) -> dict[tuple, object]:
    """What the rules need of the ``devices`` table, read once: (column, value) of each site/sensor_type scope -> the
    device ids it gives that scope; ("value_from", column) of each aggregate rule's ``value_from`` -> {device id: its
    number in that column} (a device whose value is null or not a number is left out)."""
    wanted = {
        (r.rule.scope.column, r.rule.scope.value) for r in rules if r.rule.scope and r.rule.scope.column != "device_id"
    }
    setpoints = {r.rule.devices_column for r in rules if getattr(r.rule, "devices_column", None)}
    if not wanted and not setpoints:
        return {}
    lake = Tables(spark, settings)
    if not lake.exists("devices"):
        names = [f"{c}={v}" for c, v in sorted(wanted)] + [f"value_from devices.{c}" for c in sorted(setpoints)]
        names = ", ".join(names)
        raise RuleScopeError(
            f"rules with {names} need the devices table (device_id, site, sensor_type, ...) to know which devices "
            "those are, and it does not exist; write it (locally: python -m sensorcep simulate --devices-table) or "
            "scope the rules by device_id"
        )
    devices = lake.read("devices")
    found: dict[tuple, object] = {}
    for column in sorted({c for c, _ in wanted} | setpoints):
        if column not in devices.columns:
            raise RuleScopeError(f"the devices table has no column {column!r}, which a rule names")
    for column, value in sorted(wanted):
        ids = [row.device_id for row in devices.where(F.col(column) == value).select("device_id").collect()]
        if not ids:
            log.warning("alert rules: no device has %s=%s; the rules scoped to it fire for no event", column, value)
        found[(column, value)] = sorted(ids)
    for column in sorted(setpoints):
        rows = devices.select("device_id", F.col(column).cast("string").alias("v")).collect()
        found[("value_from", column)] = {row.device_id: number(row.v) for row in rows if number(row.v) is not None}
    return found


def rule_table(rules: list[VersionedRule], devices: dict[tuple, list[str]]) -> Column:
    """The one-comparison rules as one array literal of structs: id, version, text, field, op, value and ``devices``
    (the device ids a scoped rule watches; null: every device)."""

    def comparison(versioned: VersionedRule):
        ((only,),) = alternatives(versioned.rule.test)
        return only

    return F.array(
        *(
            F.struct(
                F.lit(r.id).alias("rule_id"),
                F.lit(r.version).alias("rule_version"),
                F.lit(r.rule.text).alias("rule"),
                F.lit(comparison(r).field).alias("field"),
                F.lit(comparison(r).op).alias("op"),
                F.lit(comparison(r).value).cast("double").alias("value"),
                _watched(r, devices).alias("devices"),
            )
            for r in rules
        )
    )


def _watched(versioned: VersionedRule, devices: dict[tuple, list[str]]) -> Column:
    scope = versioned.rule.scope
    if scope is None:
        return F.lit(None).cast("array<string>")
    ids = [scope.value] if scope.column == "device_id" else devices.get((scope.column, scope.value), [])
    return F.array(*(F.lit(i) for i in ids)).cast("array<string>")


def _fires(rule: Column, event_value: Column) -> Column:
    """Whether ``rule`` (a :func:`rule_table` element) fires for an event (null, which ``filter`` drops, when the
    event does not carry the field as a finite number). The event's field is referenced once (``difference``): Spark
    inlines a column's expression where it pushes a filter, so a test that named the field once per rule would copy
    01's whole parse expression into the plan once per rule (planning took seconds for 30 rules). IEEE 754 keeps the
    sign of a difference of finite numbers exact: x - v < 0 exactly when x < v."""
    difference = event_value - rule["value"]
    sign = (
        F.when(rule["op"] == "<", difference < 0)
        .when(rule["op"] == "<=", difference <= 0)
        .when(rule["op"] == ">", difference > 0)
        .when(rule["op"] == ">=", difference >= 0)
        .when(rule["op"] == "==", difference == 0)
        .otherwise(difference != 0)
    )
    return sign & (rule["devices"].isNull() | F.array_contains(rule["devices"], F.col("device_id")))


#: a comparison of :class:`~sensorcep.rules.model.Comparison` as a Spark column operator
COMPARE = {
    "<": Column.__lt__,
    "<=": Column.__le__,
    ">": Column.__gt__,
    ">=": Column.__ge__,
    "==": Column.__eq__,
    "!=": Column.__ne__,
}


def _combined(versioned: VersionedRule, values: dict[str, Column], devices: dict[tuple, list[str]]) -> Column:
    """A rule with a combined condition as one column: its struct (id, version, text) when the event meets the
    condition (any alternative, every comparison of it) and the rule watches the device, else null."""
    meets = F.lit(False)
    for option in alternatives(versioned.rule.test):
        every = F.lit(True)
        for c in option:
            every = every & F.coalesce(COMPARE[c.op](values[c.field], F.lit(c.value)), F.lit(False))
        meets = meets | every
    watched = _watched(versioned, devices)
    scope = versioned.rule.scope
    in_scope = F.lit(True) if scope is None else F.array_contains(watched, F.col("device_id"))
    fired = F.struct(
        F.lit(versioned.id).alias("rule_id"),
        F.lit(versioned.version).alias("rule_version"),
        F.lit(versioned.rule.text).alias("rule"),
    )
    return F.when(meets & in_scope, fired)


def numeric(events: DataFrame, name: str) -> Column:
    """An event field as conditions read it: ``sensor_freq`` as parsed; a field kept through ``extra_fields`` (text
    in bronze) as a finite number when it reads as one (:data:`~sensorcep.rules.model.NUMBER_PATTERN`), else null."""
    if name not in events.columns:
        raise RuleFieldError(
            f"a rule reads the event field {name!r}, which these events do not carry; keep it through extra_fields"
        )
    if name in NUMERIC_FIELDS:
        return F.col(name)
    text = F.col(name).cast("string")
    found = F.when(text.rlike(f"^(?:{NUMBER_PATTERN})\\z"), text.cast("double"))  # the whole text, as Python's
    return F.when(~F.isnan(found) & (F.abs(found) != float("inf")), found)


def _behind_a_generator(frame: DataFrame) -> DataFrame:
    """``frame``'s rows through a one-row generator: Spark inlines no expression of it into what reads its columns
    (as :func:`sensorcep.pipeline.parsing.parsed_once` does for 01's parse)."""
    return frame.select(F.inline(F.array(F.struct(*[frame[name] for name in frame.columns]))))


def fire(events: DataFrame, rules: list[VersionedRule], devices: dict[tuple, list[str]] | None = None) -> DataFrame:
    """``events`` that fire a rule, one row per (event, rule fired), with :data:`FIRED_COLUMNS` added.

    The one-comparison rules (the common case) are one array literal, filtered per event by a lambda (Spark's
    ``filter`` higher-order function): the plan's size does not grow with their number, and an event that fires
    nothing leaves an empty array (and no row). A rule with a combined condition (all / any / not, or a field kept
    through extra_fields) is one column of its own, compiled to plain comparisons Spark generates code for (a
    lambda nested per alternative and comparison made the real-time query ~100x slower with 100 such rules); the
    fields the rules read are computed once per event, behind a generator, so no comparison parses one again."""
    devices = devices or {}
    if not rules:
        nothing = (F.lit(None).cast("string"), F.lit(None).cast("int"), F.lit(None).cast("string"))
        typed = (value.alias(name) for value, name in zip(nothing, FIRED_COLUMNS, strict=True))
        return events.where(F.lit(False)).select("*", *typed)
    columns = events.columns
    fields = sorted(set().union(*(r.rule.fields for r in rules)))
    extra = [name for name in fields if name not in NUMERIC_FIELDS]
    if extra:  # each extra field read as a number once per event (a generator: Spark inlines nothing through it)
        read = [numeric(events, name).alias(f"_rule_{name}") for name in extra]
        events = _behind_a_generator(events.select(*columns, *read))
    values = {name: F.col(name if name in NUMERIC_FIELDS else f"_rule_{name}") for name in fields}
    simple = [r for r in rules if len(alternatives(r.rule.test)) == len(alternatives(r.rule.test)[0]) == 1]
    combined = [r for r in rules if r not in simple]

    def event_value(rule: Column) -> Column:  # the rule's field of the event
        named = sorted({alternatives(r.rule.test)[0][0].field for r in simple})
        if len(named) == 1:
            return values[named[0]]
        chosen = F.when(rule["field"] == named[0], values[named[0]])
        for name in named[1:]:
            chosen = chosen.when(rule["field"] == name, values[name])
        return chosen

    parts = []
    if simple:
        parts.append(F.filter(rule_table(simple, devices), lambda rule: _fires(rule, event_value(rule))))
    if combined:
        each = F.array(*(_combined(r, values, devices) for r in combined))
        parts.append(F.filter(each, lambda fired: fired.isNotNull()))
    if len(parts) == 2:  # the same element type on both sides: id, version, text
        named = F.transform(parts[0], lambda r: F.struct(*(r[c].alias(c) for c in FIRED_COLUMNS)))
        parts = [named, parts[1]]
    fired = parts[0] if len(parts) == 1 else F.concat(*parts)
    # explode, not a filter on the array's size: Spark pushes a filter down through 01's parse and inlines the
    # parsed field into it, so the lambda (evaluated without generated code) would parse each event again; a
    # generator reads the parsed column (empty array: no row)
    return events.select(*columns, F.explode(fired).alias("_fired")).select(
        *columns, *(F.col(f"_fired.{c}").alias(c) for c in FIRED_COLUMNS)
    )
