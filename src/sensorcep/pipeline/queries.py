"""What a streaming query is: its declaration, made where the query is built.

A query is declared by decorating its start function in its pipeline module::

    @queries.declare("ingest", task="ingest", writes="bronze_events, quarantine_events, duplicate_events")
    def start_ingest(spark, settings, *, wait=True):
        ...
        return launch(stream, settings, start_ingest.query, wait=wait, foreach_batch=...)

The declaration (:class:`Query`, on the function as ``.query``) holds the query's name (its checkpoint folder and
``stream_progress.query_name``), the always-on task that runs it (the bundle's ``task_key``), which setting gives its
trigger (``trigger``, ``alerts_trigger`` or ``records_trigger``), its FAIR pool, the tables and topics it writes
(checked against :data:`sensorcep.settings.TABLES`), whether it reads ``bronze_events`` (then it waits for ingest to
create it), and what it compiles in when it starts (``reload_when``: the always-on job restarts it when that changes,
e.g. the rules), and the settings its checkpoint's state is bound to (``fixed_settings``: a restart with another value
is refused, :mod:`sensorcep.pipeline.checkpoint_settings`).

:mod:`sensorcep.pipeline.registry` lists the pipeline modules once and collects their declarations: starting
(:func:`sensorcep.pipeline.streaming.launch` takes the declaration itself), the always-on job, the local runner,
monitoring and 05 read it there. Adding a query: declare its start function in a module and list that module in
``registry.QUERY_MODULES``. This module imports no pipeline module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sensorcep.errors import SensorCepError
from sensorcep.settings import TABLES, Settings

#: the settings a query's trigger comes from: ``trigger`` (default), ``alerts_trigger`` (the real-time alert query),
#: ``records_trigger`` (queries whose output nobody waits on: :attr:`Settings.records_query_trigger`)
TRIGGER_SETTINGS = ("trigger", "alerts_trigger", "records_trigger")
#: the topics a query may write besides tables (``writes="alerts topic"``)
TOPICS = ("alerts topic", "escalations topic")


class UnknownQueryError(SensorCepError, KeyError):
    """A query name no pipeline module declares."""

    def __str__(self) -> str:  # KeyError would quote the sentence
        return str(self.args[0])


@dataclass(frozen=True)
class Query:
    name: str
    start: Callable  # start(spark, settings, *, wait=True) -> StreamingQuery, or None when it has nothing to do
    task: str
    writes: tuple[str, ...]
    trigger_setting: str = "trigger"
    pool: str | None = None
    reads_bronze: bool = False
    #: fingerprint(spark, settings) of what the query compiles in when it starts (the alert rules): the always-on
    #: job restarts the query, on its checkpoint, when it changes
    reload_when: Callable | None = None
    #: settings its checkpoint's state is built under: a restart with another value is refused
    fixed_settings: tuple[str, ...] = ()
    #: tables only it writes, by appends, from its input's start: a start on a new checkpoint (reset, or deleted)
    #: while one of them holds rows would write them all again, and is refused (``streaming.refuse_reset``; so is one
    #: while ``late_events`` holds late rows of the query's own, for every query that writes them)
    rewritten_from_start: tuple[str, ...] = ()

    def trigger(self, settings: Settings) -> str:
        """The trigger this query runs with under ``settings``."""
        if self.trigger_setting == "records_trigger":
            return settings.records_query_trigger
        return getattr(settings, self.trigger_setting)

    @property
    def tables(self) -> tuple[str, ...]:
        """The Delta tables it writes."""
        return tuple(w for w in self.writes if w in TABLES)


def declare(
    name: str,
    *,
    task: str,
    writes: str,
    trigger_setting: str = "trigger",
    pool: str | None = None,
    reads_bronze: bool = False,
    reload_when: Callable | None = None,
    fixed_settings: str = "",
    rewritten_from_start: str = "",
):
    """Decorator: declare the query ``name`` that the decorated function starts (the function's ``.query``).

    ``writes``: the tables (names of :data:`sensorcep.settings.TABLES`) and topics (:data:`TOPICS`) it writes,
    comma-separated; anything else is refused here, when the module is imported. ``fixed_settings``: the
    :class:`Settings` fields its checkpoint is bound to, comma-separated. ``rewritten_from_start``: the tables of
    ``writes`` that a new checkpoint would write again (:attr:`Query.rewritten_from_start`)."""
    if trigger_setting not in TRIGGER_SETTINGS:
        raise ValueError(f"query {name}: trigger_setting must be one of {TRIGGER_SETTINGS}, not {trigger_setting!r}")
    if task not in TASK_ORDER:
        raise ValueError(f"query {name}: task must be one of {TASK_ORDER}, not {task!r}")
    written = tuple(w.strip() for w in writes.split(",") if w.strip())
    unknown = [w for w in written if w not in TABLES and w not in TOPICS]
    if unknown:
        raise ValueError(
            f"query {name}: writes names {', '.join(map(repr, unknown))}, neither a table of settings.TABLES "
            f"nor one of {', '.join(TOPICS)}"
        )

    fixed = tuple(f.strip() for f in fixed_settings.split(",") if f.strip())
    not_settings = [f for f in fixed if f not in Settings.__dataclass_fields__]
    if not_settings:
        raise ValueError(f"query {name}: fixed_settings names {', '.join(map(repr, not_settings))}, not settings")

    rewritten = tuple(t.strip() for t in rewritten_from_start.split(",") if t.strip())
    if not set(rewritten) <= set(written) & set(TABLES):
        raise ValueError(f"query {name}: rewritten_from_start names tables it does not write: {rewritten}")

    def register(start: Callable) -> Callable:
        start.query = Query(
            name, start, task, written, trigger_setting, pool, reads_bronze, reload_when, fixed, rewritten
        )
        return start

    return register


#: the always-on tasks (the bundle's task keys), in pipeline order
TASK_ORDER = ("ingest", "sampling_state", "alerts", "alert_records")
