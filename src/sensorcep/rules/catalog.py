"""The ``alert_rules`` Delta table: the rules in force, one row per rule id with its version.

* :func:`plan_changes` (pure Python) compares a rule set with the table's rows: a new rule gets version 1, a changed
  definition or ``enabled`` flag the next version, a rule the set no longer lists is disabled (its row and id stay,
  so old alerts keep naming a rule the table still explains).
* :func:`apply_rules` writes the result as one Delta commit (the table is small: an overwrite), so a running query
  reads either the old rule set or the new one, never half of each; earlier rule sets stay readable by time travel.
* :func:`rules_in_force` is what the alert query evaluates: the enabled rows, seeded from ``rules_file`` (or the
  packaged default) the first time, when the table does not exist yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from sensorcep.io.lake import Tables
from sensorcep.rules.model import Rule, check_fields, check_groups, load_rules, rule_from_spec, spec_json
from sensorcep.settings import Settings

log = logging.getLogger(__name__)

TABLE = "alert_rules"
COLUMNS = ["rule_id", "rule_version", "kind", "enabled", "rule", "spec", "description", "updated_at"]
SCHEMA = (
    "rule_id string, rule_version int, kind string, enabled boolean, rule string, spec string, "
    "description string, updated_at timestamp"
)


@dataclass(frozen=True)
class VersionedRule:
    """A rule in force and the version of it that fires: every alert carries both."""

    rule: Rule
    version: int

    @property
    def id(self) -> str:
        return self.rule.id


@dataclass(frozen=True)
class Changes:
    """What :func:`plan_changes` found: rule ids added, changed (version raised), disabled, unchanged; and the
    table's rows after the change (dicts of :data:`COLUMNS`)."""

    added: list[str]
    changed: list[str]
    disabled: list[str]
    unchanged: list[str]
    rows: list[dict]

    @property
    def any(self) -> bool:
        return bool(self.added or self.changed or self.disabled)

    def __str__(self) -> str:
        parts = [f"{len(ids)} {what} ({_first(ids)})" for what, ids in self._groups() if ids]
        return "; ".join(parts) if parts else "no change"

    def _groups(self):
        return (("added", self.added), ("changed", self.changed), ("disabled", self.disabled))


def _first(ids: list[str], shown: int = 8) -> str:
    return ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def plan_changes(current: list[dict], rules: list[Rule], now: datetime | None = None) -> Changes:
    """The ``alert_rules`` rows that make ``rules`` the rule set in force, given the table's ``current`` rows."""
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    by_id = {row["rule_id"]: row for row in current}
    added, changed, disabled, unchanged, rows = [], [], [], [], []
    for rule in rules:
        spec = spec_json(rule)
        old = by_id.pop(rule.id, None)
        if old is None:
            added.append(rule.id)
            version = 1
        elif old["spec"] != spec or bool(old["enabled"]) != rule.enabled:
            changed.append(rule.id)
            version = old["rule_version"] + 1
        else:
            unchanged.append(rule.id)
            rows.append(old)
            continue
        rows.append(_row(rule, version, spec, now))
    for rule_id, old in sorted(by_id.items()):
        if old["enabled"]:
            disabled.append(rule_id)
            rows.append({**old, "enabled": False, "rule_version": old["rule_version"] + 1, "updated_at": now})
        else:
            rows.append(old)
    return Changes(added, changed, disabled, unchanged, rows)


def _row(rule: Rule, version: int, spec: str, now: datetime) -> dict:
    return {
        "rule_id": rule.id,
        "rule_version": version,
        "kind": rule.kind,
        "enabled": rule.enabled,
        "rule": rule.text,
        "spec": spec,
        "description": rule.description,
        "updated_at": now,
    }


#: the rows read in the current :func:`one_read` pass, by table (None: no pass, every call reads the table)
_read_in_pass: ContextVar[dict[str, list[dict]] | None] = ContextVar("alert_rules_read_in_pass", default=None)


@contextmanager
def one_read() -> Iterator[None]:
    """A pass that reads ``alert_rules`` (and ``routes``, :func:`read_in_pass`) once: inside it the seed check,
    :func:`fingerprint` and :func:`rules_in_force` of every rule query take the rows of the first read (each read is a
    Delta snapshot and a Spark job: starting the three rule queries read the table six times, and checked it exists
    twelve). The always-on job starts and refreshes its queries in such a pass, so the fingerprint a query starts with
    is exactly the rule set it compiles; a change made during the pass shows at the next one. A write
    (:func:`apply_rules`) in the pass drops what it read. Nested passes share the outer one."""
    if _read_in_pass.get() is not None:
        yield
        return
    token = _read_in_pass.set({})
    try:
        yield
    finally:
        _read_in_pass.reset(token)


def read_in_pass(key: str, read: Callable[[], list[dict]]) -> list[dict]:
    """``read()`` (a catalog table's rows), once per :func:`one_read` pass for ``key`` (the table's location): the
    routes table is read there too, by the notifier's start and refresh (four reads of ``routes`` a start before,
    0.3-2 s each in a job's first seconds). Outside a pass every call reads."""
    held = _read_in_pass.get()
    if held is None:
        return read()
    if key not in held:
        held[key] = read()
    return [dict(row) for row in held[key]]  # copies: a caller that edits its rows does not edit the pass's


def forget_in_pass(key: str) -> None:
    """After a write to the table at ``key``: the pass reads what was just written."""
    (_read_in_pass.get() or {}).pop(key, None)


def current_rows(spark: SparkSession, settings: Settings) -> list[dict]:
    lake = Tables(spark, settings)

    def read() -> list[dict]:
        if not lake.exists(TABLE):
            return []
        return [row.asDict() for row in lake.read(TABLE).select(*COLUMNS).collect()]

    return read_in_pass(str(lake[TABLE]), read)


def apply_rules(spark: SparkSession, settings: Settings, rules: list[Rule]) -> Changes:
    """Make ``rules`` the rule set in force (one Delta commit, nothing written when nothing changes); a rule that reads
    a field no event carries is refused (:func:`~sensorcep.rules.model.check_fields`)."""
    check_fields([rule for rule in rules if rule.enabled], settings.extra_field_names)
    check_groups(rules)
    changes = plan_changes(current_rows(spark, settings), rules)
    if changes.any or not Tables(spark, settings).exists(TABLE):
        frame = spark.createDataFrame(changes.rows or [], SCHEMA).select(*COLUMNS)
        lake = Tables(spark, settings)
        lake.write(frame, TABLE, mode="overwrite")
        forget_in_pass(str(lake[TABLE]))
        log.warning("alert_rules: %s", changes)
    return changes


def rules_in_force(spark: SparkSession, settings: Settings) -> list[VersionedRule]:
    """The enabled rules of ``alert_rules`` with their versions; the table is seeded from ``rules_file`` (empty: the
    packaged default) if it does not exist yet. Each row is validated again: a hand-edited bad row is an error that
    names it, not a rule silently skipped."""
    ensure_seeded(spark, settings)
    rows = sorted(current_rows(spark, settings), key=lambda row: row["rule_id"])
    found = [
        VersionedRule(rule_from_spec(row["rule_id"], row["spec"]), row["rule_version"])
        for row in rows
        if row["enabled"]
    ]
    check_fields([r.rule for r in found], settings.extra_field_names, "alert_rules")
    return found


def ensure_seeded(spark: SparkSession, settings: Settings) -> None:
    """Create ``alert_rules`` from ``rules_file`` (empty: the packaged rule set) if it does not exist yet. Two
    queries that start at once may both try: the one whose commit loses finds the table the other created."""
    lake = Tables(spark, settings)
    if str(lake[TABLE]) in (_read_in_pass.get() or {}) or lake.exists(TABLE):
        return
    rules = load_rules(settings.rules_file)  # a bad file is an error here, whoever else seeds
    try:
        apply_rules(spark, settings, rules)
    except Exception:  # a concurrent first write (Delta's ConcurrentWriteException and kin): fine if the table is there
        if not lake.exists(TABLE):
            raise
        log.warning("alert_rules: another query seeded it at the same moment; using its rules")


def fingerprint(spark: SparkSession, settings: Settings) -> tuple:
    """What identifies the rule set in force: (rule_id, rule_version) of each row (the table seeded first, so a
    query's fingerprint before it starts is the one it compiles). A running rule query is restarted when it changes
    (:mod:`sensorcep.pipeline.always_on`)."""
    ensure_seeded(spark, settings)
    return tuple(sorted((row["rule_id"], row["rule_version"]) for row in current_rows(spark, settings)))
