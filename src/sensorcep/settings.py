"""One typed settings object for the whole project.

Every notebook reads its job parameters (Databricks widgets, or the local stand-in) into a
:class:`Settings`; defaults live here and nowhere else. Tables are catalog names (``tables=catalog``:
``<catalog>.<schema>.<table>``) or Delta paths (``tables=paths``), see :mod:`sensorcep.io.tables`; checkpoint
locations are derived from ``base_path`` deterministically so a restart finds its checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from sensorcep.errors import SensorCepError
from sensorcep.schemas import BY_NAME, DECLARED

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOCAL_BROKER = "127.0.0.1:9092"

#: the pipeline's tables (names in the catalog's schema; their files, where this project places them:
#: ``<base_path>/tables/<name>``)
#: every Delta table's name, as :mod:`sensorcep.schemas` declares them
TABLES = tuple(spec.name for spec in DECLARED)

#: bronze columns an extra event field may not shadow: bronze's own, and the raw record's in quarantine
RESERVED_COLUMNS = frozenset(BY_NAME["bronze_events"].column_names) | {"reason", "raw_value", "key", "value"}


def is_plain_name(name: str) -> bool:
    """Whether ``name`` is a catalog or schema name Spark reads without backquotes: letters of any script, ASCII digits
    and ``_``. Development mode names the schema ``dev_<user>_sensor_cep``, and the CLI keeps a user name's Unicode
    letters there (it lower-cases the name and replaces everything but letters and digits with ``_``); Spark's SQL
    lexer takes an unquoted identifier of Unicode letters, ASCII digits and ``_``."""
    return all(c == "_" or c.isalpha() or c in "0123456789" for c in name)


class SettingsError(SensorCepError, ValueError):
    """A job parameter / widget value that cannot be used."""


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap_servers: str = field(
        default=LOCAL_BROKER,
        metadata={"doc": "Kafka brokers, host:port[,host:port...]"},
    )
    events_topic: str = field(default="sensor-events", metadata={"doc": "the topic the sensor events are read from"})
    alerts_topic: str = field(
        default="sensor-alerts",
        metadata={"doc": "the topic alerts are written to (anomalies and the alert lifecycle read it back)"},
    )
    acks_topic: str = field(
        default="sensor-alert-acks",
        metadata={"doc": "the topic of acknowledgements and snoozes of alerts"},
    )
    escalations_topic: str = field(
        default="",
        metadata={"doc": "also send escalations to this topic; empty: only the alert_escalations table"},
    )
    base_path: str = field(
        default=str(PROJECT_ROOT / ".data"),
        metadata={"doc": "checkpoints under <base_path>/checkpoints; tables' files under <base_path>/tables"},
    )
    tables: str = field(
        default="catalog",
        metadata={
            "doc": "catalog: tables are named <catalog>.<schema>.<table> (Unity Catalog on Databricks; locally Spark's "
            "catalog, files under <base_path>/tables); paths: Delta tables by path, no names"
        },
    )
    catalog: str = field(
        default="",
        metadata={"doc": "catalog of the tables; empty: the session's current catalog (locally spark_catalog)"},
    )
    schema: str = field(
        default="sensor_cep",
        metadata={"doc": "schema of the tables (the bundle passes its schema: dev_<user>_sensor_cep in dev)"},
    )
    trigger: str = field(
        default="availableNow",
        metadata={
            "doc": "trigger of the micro-batch queries: availableNow (process what is there, then stop) or an interval "
            "such as 10 seconds (keep running)"
        },
    )
    records_trigger: str = field(
        default="",
        metadata={
            "doc": "while trigger is an interval: the interval of the queries whose output nobody waits on "
            "(sampling, device_activity, anomalies: tables, no alert), when longer; each micro-batch costs CPU "
            "whatever its rows, so a quiet fleet costs less (docs/triggers.md); empty: trigger"
        },
    )
    min_batch_records: int = field(
        default=0,
        metadata={
            "doc": "while trigger is an interval: ingest starts a micro-batch only once this many new Kafka records "
            "wait, or max_batch_delay after its last batch (Spark's minOffsetsPerTrigger, maxTriggerDelay); the "
            "queries behind bronze follow ingest's commits, so a quiet fleet runs a round per max_batch_delay, a busy "
            "one per trigger (docs/triggers.md); 0: a batch at every trigger"
        },
    )
    max_batch_delay: str = field(
        default="1 minute",
        metadata={"doc": "the longest ingest holds new records back while fewer than min_batch_records wait"},
    )
    window_duration: str = field(
        default="60 seconds",
        metadata={"doc": "length of the sliding event-time windows 02 samples"},
    )
    slide_duration: str = field(
        default="30 seconds",
        metadata={"doc": "how often a window starts; must divide window_duration"},
    )
    watermark_delay: str = field(
        default="30 seconds",
        metadata={"doc": "how far the watermark trails the newest event time; rows behind it are late (late_events)"},
    )
    sample_scope: str = field(
        default="window",
        metadata={"doc": "window: one sample set per window over all devices; device: one per device and window"},
    )
    max_offsets_per_trigger: int = field(
        default=100_000,
        metadata={"doc": "at most this many Kafka records per micro-batch (0: no limit); availableNow honours it"},
    )
    partitions: int = field(default=2, metadata={"doc": "partitions of the topics the project creates (simulator)"})
    device_timeout: str = field(
        default="5 minutes",
        metadata={"doc": "event-time silence after which a device is offline (device_status)"},
    )
    anomaly_threshold: float = field(
        default=0.0,
        metadata={
            "doc": "sampling keeps every event with sensor_freq below it (02); alerts come from the rules in "
            "alert_rules (rules_file)"
        },
    )
    rules_file: str = field(
        default="",
        metadata={
            "doc": "YAML rule set that seeds the alert_rules table when it does not exist yet; empty: the packaged "
            "sensorcep/rules/alert_rules.yaml (python -m sensorcep rules apply --file F changes the table)"
        },
    )
    routes_file: str = field(
        default="",
        metadata={
            "doc": "YAML routes (docs/routes.md) that seed the routes table the notifier query tells the receivers by "
            "(python -m sensorcep routes publish --file F adds a version); empty: nobody is told and the notifier "
            "does not run"
        },
    )
    routes_secret_scope: str = field(
        default="sensorcep",
        metadata={
            "doc": "secret scope of the receivers' secrets (webhook HMAC keys, Slack URLs, PagerDuty keys, SMTP); "
            "locally the environment variables <SCOPE>_<NAME>"
        },
    )
    incident_page_url: str = field(
        default="",
        metadata={
            "doc": "where the incident page is served (python -m sensorcep incidents; on Databricks the app's URL): "
            "every message links to its incidents there; empty: messages carry no link"
        },
    )
    rules_refresh: str = field(
        default="30 seconds",
        metadata={
            "doc": "how often the always-on job reads alert_rules (once for all its rule queries), and restarts a "
            "rule query whose rules changed"
        },
    )
    ack_timeout: str = field(
        default="10 minutes",
        metadata={"doc": "an incident not acknowledged within this much event time of its opening escalates"},
    )
    max_future: str = field(
        default="5 minutes",
        metadata={
            "doc": "clock skew allowed: an event time further ahead of its Kafka timestamp (or of the ingest clock, "
            "if earlier) is quarantined, an ack's time is capped"
        },
    )
    alerts_trigger: str = field(
        default="realtime",
        metadata={"doc": "the alert query's trigger: realtime[:<checkpoint interval>], an interval, or availableNow"},
    )
    tuning_preset: str = field(
        default="quick",
        metadata={"doc": "04's matrix: quick (5 configurations) or full (the study); smoke only proves the path"},
    )
    kafka_secret_scope: str = field(
        default="",
        metadata={
            "doc": "secret scope with kafka-username and kafka-password (SASL); empty: no SASL; locally the "
            "environment variables <SCOPE>_KAFKA_USERNAME and <SCOPE>_KAFKA_PASSWORD"
        },
    )
    accept_data_loss: bool = field(
        default=False,
        metadata={
            "doc": "true: a query whose Kafka records were deleted before it read them goes on from the earliest "
            "records left (stream_progress counts the skipped ones); false: it stops with an error saying what was "
            "lost"
        },
    )
    scheduler_pools: str = field(
        default="sampling:1,alerts:2",
        metadata={"doc": "FAIR scheduler pools and weights (local session; on Databricks every pool has weight 1)"},
    )
    query_suffix: str = field(default="", metadata={"doc": "appended to query/checkpoint names"})
    extra_fields: str = field(
        default="",
        metadata={"doc": "optional event fields kept in bronze (comma list); rules may read them as numbers"},
    )
    job_id: str = field(default="", metadata={"doc": "the deployed pipeline job's id ({{job.id}}): 05 lists its runs"})

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> Settings:
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise SettingsError(f"unknown parameter(s): {', '.join(unknown)}; known: {', '.join(known)}")
        kwargs = {}
        for name, value in values.items():
            kwargs[name] = _coerce(name, known[name].type, value)
        settings = cls(**kwargs)
        settings.validate()
        return settings

    def __post_init__(self):
        # one spelling per trigger, the parser's (``available_now`` -> ``availableNow``): code asks the parsed value
        # (:attr:`runs_to_end`, :func:`is_realtime`), never compares the text; junk is left for validate() to name
        for name in ("trigger", "alerts_trigger"):
            object.__setattr__(self, name, canonical_trigger(getattr(self, name)))

    @property
    def records_query_trigger(self) -> str:
        """The trigger of the record-keeping queries (``records_trigger``): ``trigger`` when it runs to the end or
        ``records_trigger`` is empty, else the longer of the two intervals."""
        if self.runs_to_end or not self.records_trigger:
            return self.trigger
        return max(self.trigger, self.records_trigger, key=parse_duration)

    @property
    def runs_to_end(self) -> bool:
        """The micro-batch ``trigger`` drains what is there and stops (``availableNow``, ``once``): a batch job."""
        return trigger_runs_to_end(self.trigger)

    def replace(self, **changes) -> Settings:
        new = dataclasses.replace(self, **changes)
        new.validate()
        return new

    def validate(self) -> None:
        if self.tables not in ("catalog", "paths"):
            raise SettingsError(f"tables must be 'catalog' (names) or 'paths', not {self.tables!r}")
        for name in ("catalog", "schema"):
            if not is_plain_name(getattr(self, name)):
                raise SettingsError(f"{name}: {getattr(self, name)!r} is not a usable name (letters, digits, _)")
        if self.tables == "paths" and self.base_path.startswith("/Volumes/"):
            raise SettingsError(
                "tables=paths: Unity Catalog volumes cannot hold Delta tables; use tables=catalog (managed tables in "
                "the schema) and keep base_path on the volume for checkpoints"
            )
        if self.tables == "catalog" and not self.schema:
            raise SettingsError("schema: tables=catalog names tables <catalog>.<schema>.<table>; give a schema")
        if self.sample_scope not in ("window", "device"):
            raise SettingsError(f"sample_scope must be 'window' or 'device', not {self.sample_scope!r}")
        for name in (
            "window_duration",
            "slide_duration",
            "watermark_delay",
            "device_timeout",
            "ack_timeout",
            "max_future",
            "rules_refresh",
            "max_batch_delay",
        ):
            parse_duration(getattr(self, name), name)
        for name in (
            "window_duration",
            "slide_duration",
            "device_timeout",
            "ack_timeout",
            "rules_refresh",
            "max_batch_delay",
        ):
            if parse_duration(getattr(self, name), name) <= 0:
                raise SettingsError(f"{name} must be longer than 0, not {getattr(self, name)!r}")
        if parse_duration(self.slide_duration) > parse_duration(self.window_duration):
            raise SettingsError("slide_duration must not exceed window_duration")
        if parse_duration(self.window_duration) % parse_duration(self.slide_duration):
            raise SettingsError(
                f"slide_duration ({self.slide_duration}) must divide window_duration "
                f"({self.window_duration}) into whole slides, e.g. 60 s by 20, 30 or 60 s"
            )
        if is_realtime(self.trigger):
            raise SettingsError("trigger: real-time mode runs stateless queries only; it is for alerts_trigger")
        parse_trigger(self.alerts_trigger)
        if self.records_trigger and _trigger_kinds(self.records_trigger) != {"processingTime"}:
            raise SettingsError(
                "records_trigger must be an interval such as 1 minute (or empty: trigger), "
                f"not {self.records_trigger!r}"
            )
        if self.partitions < 1:
            raise SettingsError("partitions must be >= 1")
        if self.max_offsets_per_trigger < 0:
            raise SettingsError("max_offsets_per_trigger must be >= 0 (0 = no limit)")
        if self.min_batch_records < 0:
            raise SettingsError("min_batch_records must be >= 0 (0 = a batch at every trigger)")
        if self.max_offsets_per_trigger and self.min_batch_records > self.max_offsets_per_trigger:
            raise SettingsError(
                f"min_batch_records ({self.min_batch_records:,}) must not exceed max_offsets_per_trigger "
                f"({self.max_offsets_per_trigger:,}): a batch could never hold what it waits for"
            )
        parse_pools(self.scheduler_pools)
        if not math.isfinite(self.anomaly_threshold):
            raise SettingsError(f"anomaly_threshold must be a finite number, not {self.anomaly_threshold!r}")
        if not re.fullmatch(r"[A-Za-z0-9_]*", self.query_suffix):
            raise SettingsError(
                f"query_suffix: {self.query_suffix!r} may hold letters, digits and _ only (it names checkpoint "
                "folders and writer ids: a path in it would point a query at another query's checkpoint)"
            )
        if not re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)*", self.kafka_bootstrap_servers):
            raise SettingsError(
                f"kafka_bootstrap_servers: {self.kafka_bootstrap_servers!r} is not a host:port[,host:port...] list"
            )
        self._validate_topics()
        for name in self.extra_field_names:
            # Spark resolves column names in any case: a field named like a column in another case is that column
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name.lower() in RESERVED_COLUMNS:
                raise SettingsError(
                    f"extra_fields: {name!r} is not a usable column name (letters, digits, _; "
                    f"not one of {', '.join(sorted(RESERVED_COLUMNS))})"
                )

    def _validate_topics(self) -> None:
        topics = {"events_topic": self.events_topic, "alerts_topic": self.alerts_topic, "acks_topic": self.acks_topic}
        if self.escalations_topic:
            topics["escalations_topic"] = self.escalations_topic
        for name, topic in topics.items():
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic) or topic in (".", ".."):
                raise SettingsError(f"{name}: {topic!r} is not a Kafka topic name (letters, digits, '.', '_', '-')")
        seen: dict[str, str] = {}
        for name, topic in topics.items():
            if topic in seen:
                raise SettingsError(
                    f"{name} and {seen[topic]} are both {topic!r}: each topic has one role (an alert written to "
                    "the topic its query reads would be read back as input)"
                )
            seen[topic] = name

    # ----------------------------------------------------------------- derived locations
    def table_name(self, name: str) -> str | None:
        """The table's catalog name (``catalog.schema.table``; ``schema.table`` in the current catalog when
        ``catalog`` is empty), or None when tables are paths."""
        self._known_table(name)
        if self.tables == "paths":
            return None
        return ".".join(part for part in (self.catalog, self.schema, name) if part)

    def table_path(self, name: str) -> str:
        """Where this project places the table's files: every table with ``tables=paths``, and locally with
        ``tables=catalog`` (Spark's local catalog registers them there). On Databricks, Unity Catalog manages the
        files of a named table."""
        self._known_table(name)
        return f"{self.base_path.rstrip('/')}/tables/{name}"

    @staticmethod
    def _known_table(name: str) -> None:
        if name not in TABLES:
            raise SettingsError(f"unknown table {name!r}; known: {', '.join(TABLES)}")

    def checkpoint_path(self, query: str, *, realtime: bool = False) -> str:
        """The query's checkpoint; a real-time-mode run of it has its own (``<query>-realtime``): a checkpoint first
        written by micro-batches is refused in real-time mode (``CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``)."""
        suffix = "-realtime" if realtime else ""
        return f"{self.base_path.rstrip('/')}/checkpoints/{self.query_name(query)}{suffix}"

    def query_name(self, query: str) -> str:
        return f"{query}{self.query_suffix}"

    @property
    def extra_field_names(self) -> list[str]:
        """Optional top-level event fields (e.g. ``firmware``) carried into bronze as strings when present."""
        return [name.strip() for name in self.extra_fields.split(",") if name.strip()]

    def interval(self, name: str) -> str:
        """A duration setting (``watermark_delay``, ``window_duration`` ...) spelled for Spark."""
        return spark_interval(parse_duration(getattr(self, name), name))

    @property
    def window_seconds(self) -> int:
        return int(parse_duration(self.window_duration))

    @property
    def slide_seconds(self) -> int:
        return int(parse_duration(self.slide_duration))

    @property
    def watermark_seconds(self) -> int:
        return int(parse_duration(self.watermark_delay))

    @property
    def ack_timeout_seconds(self) -> int:
        return int(parse_duration(self.ack_timeout))

    @property
    def max_future_seconds(self) -> int:
        return int(parse_duration(self.max_future))


def _coerce(name: str, type_name, value):
    type_name = type_name if isinstance(type_name, str) else type_name.__name__
    if type_name == "int":
        try:
            return int(str(value).strip() or 0)
        except ValueError:
            raise SettingsError(f"{name} must be an integer, not {value!r}") from None
    if type_name == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no", ""):
            return False
        raise SettingsError(f"{name} must be true or false, not {value!r}")
    if type_name == "float":
        try:
            return float(value)
        except ValueError:
            raise SettingsError(f"{name} must be a number, not {value!r}") from None
    return str(value)


_UNITS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}


_DURATION_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_duration(text: str, name: str = "duration") -> float:
    """'60 seconds', '5 minutes', '500 ms', '1 minute 30 seconds', '90s' -> seconds (float).

    The whole text must be number-unit terms (a lone number is seconds): anything else, such as SQL after a
    valid start, is refused rather than ignored.
    """
    text_ = str(text).strip()
    total, pos, terms = 0.0, 0, 0
    while pos < len(text_):
        match = _DURATION_TERM.match(text_, pos)
        lone_number = match is not None and not terms and match.end() == len(text_)
        unit = match.group(2).lower() if match else ""
        unit = unit or ("seconds" if lone_number else "")
        if unit not in _UNITS:
            raise SettingsError(
                f"{name}: cannot read {text!r} as a duration like '30 seconds' or '1 minute 30 seconds'"
            )
        total += float(match.group(1)) * _UNITS[unit]
        pos, terms = match.end(), terms + 1
    if not terms:
        raise SettingsError(f"{name}: cannot read {text!r} as a duration like '30 seconds'")
    return total


def spark_interval(seconds: float) -> str:
    """A duration in a spelling every Spark interval parser reads (``"90 seconds"``, ``"500 milliseconds"``)."""
    millis = round(seconds * 1000)
    return f"{millis // 1000} seconds" if millis % 1000 == 0 else f"{millis} milliseconds"


#: Spark's default checkpoint interval of a real-time-mode query, and the shortest it accepts
#: (``spark.sql.streaming.realTimeMode.minBatchDuration``)
REALTIME_DEFAULT_INTERVAL = "5 minutes"
REALTIME_MIN_SECONDS = 5.0


def parse_trigger(text: str) -> dict:
    """Trigger parameter -> keyword arguments for ``DataStreamWriter.trigger``.

    ``availableNow``; an interval such as ``"10 seconds"`` (micro-batches); or ``realtime`` /
    ``realtime:<interval>`` (Spark's real-time mode: long-running tasks process each record as it arrives;
    the interval is how often progress is checkpointed, not a latency, default 5 minutes, at least 5 seconds).
    """
    text = str(text).strip()
    if text in ("availableNow", "available_now"):
        return {"availableNow": True}
    if text in ("once",):
        return {"once": True}
    mode, _, interval = text.partition(":")
    if mode.strip().lower() in ("realtime", "real-time", "real_time"):
        interval = interval.strip() or REALTIME_DEFAULT_INTERVAL
        if parse_duration(interval, "realtime trigger") < REALTIME_MIN_SECONDS:
            raise SettingsError(
                f"trigger {text!r}: a real-time-mode checkpoint interval is at least "
                f"{REALTIME_MIN_SECONDS:g} seconds (it is not a latency)"
            )
        return {"realTime": spark_interval(parse_duration(interval, "realtime trigger"))}
    return {"processingTime": spark_interval(parse_duration(text, "trigger"))}


def _trigger_kinds(text: str) -> set[str]:
    """What kind of trigger ``text`` is (``{"processingTime"}``, ...); empty when it is none."""
    try:
        return set(parse_trigger(text))
    except SettingsError:
        return set()


def is_realtime(trigger: str) -> bool:
    return "realTime" in parse_trigger(trigger)


def trigger_runs_to_end(trigger: str) -> bool:
    """``availableNow`` / ``once`` (in any accepted spelling): the query stops by itself at the end of its input."""
    return bool({"availableNow", "once"} & set(parse_trigger(trigger)))


def canonical_trigger(text: str) -> str:
    """One spelling for the triggers that run to the end (``available_now`` -> ``availableNow``); intervals and
    real-time triggers keep the user's text; text that is not a trigger is returned as it is (validate names it)."""
    try:
        kwargs = parse_trigger(text)
    except SettingsError:
        return text
    return next(iter(kwargs)) if {"availableNow", "once"} & set(kwargs) else text


def parse_pools(text: str) -> dict[str, int]:
    """``"sampling:1,alerts:2"`` -> ``{"sampling": 1, "alerts": 2}`` (FAIR pool names and positive weights)."""
    pools = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        pool, _, weight = (part.strip() for part in item.partition(":"))
        if not re.fullmatch(r"[A-Za-z0-9_]+", pool) or not re.fullmatch(r"\d*", weight) or weight == "0":
            raise SettingsError(
                f"scheduler_pools: cannot read {item!r}: want name:weight, a name of letters, digits and _ and a "
                "whole weight >= 1, e.g. 'sampling:1,alerts:2'"
            )
        if pool in pools:
            raise SettingsError(f"scheduler_pools: pool {pool!r} is given twice")
        pools[pool] = int(weight or 1)
    return pools


def parameter_names() -> list[str]:
    return [f.name for f in fields(Settings)]


def defaults() -> dict[str, str]:
    """Widget defaults: the field defaults, overridden by ``SENSORCEP_<NAME>`` environment variables
    (how tests and the local runner point every notebook at another broker or base path)."""
    return {f.name: os.environ.get(f"SENSORCEP_{f.name.upper()}", str(f.default)) for f in fields(Settings)}


#: settings whose laptop default means nothing on a Databricks cluster, and what to give instead
WORKSPACE_REQUIRED = {
    "kafka_bootstrap_servers": "the sensor Kafka cluster's host:port list",
    "base_path": "the deployment's volume, /Volumes/<catalog>/<schema>/data (executors cannot write workspace files)",
    "catalog": "the Unity Catalog catalog that holds the deployment's schema",
}


def settings_from_widgets(dbutils, names: Iterable[str]) -> Settings:
    """Declare a text widget per name (default from :class:`Settings`) and read them all back.

    On Databricks (any ``dbutils`` but the local stand-in) a widget of :data:`WORKSPACE_REQUIRED` left at its laptop
    default stops here with one sentence naming what to set: a job run passes the deployment's values; a notebook
    opened by hand must be given them.
    """
    names = list(names)
    defaults_ = defaults()
    unknown = [n for n in names if n not in defaults_]
    if unknown:
        raise SettingsError(f"unknown widget(s): {', '.join(unknown)}")
    for name in names:
        dbutils.widgets.text(name, defaults_[name])
    values = {name: dbutils.widgets.get(name) for name in names}
    if not getattr(dbutils, "local", False):
        missing = [n for n in names if n in WORKSPACE_REQUIRED and values[n] == defaults_[n]]
        if missing:
            raise SettingsError(
                "on Databricks, set the widget(s) "
                + "; ".join(f"{n} ({WORKSPACE_REQUIRED[n]})" for n in missing)
                + ": they still hold the laptop defaults (a run of the deployed job passes them)"
            )
    return Settings.from_mapping(values)


def env_settings(**overrides) -> Settings:
    """Settings from ``SENSORCEP_<NAME>`` environment variables plus explicit overrides."""
    values = {**defaults(), **{k: v for k, v in overrides.items() if v is not None}}
    return Settings.from_mapping(values)
