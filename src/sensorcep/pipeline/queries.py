"""Every streaming query of the project, declared once.

A query is declared where it is built, by decorating its start function::

    @queries.declare("ingest", task="ingest", writes="bronze_events, quarantine_events, duplicate_events")
    def start_ingest(spark, settings, *, wait=True): ...

The declaration holds the query's name (its checkpoint folder and ``stream_progress.query_name``), the always-on
task that runs it (the bundle's ``task_key``), which setting gives its trigger (``trigger`` or ``alerts_trigger``),
its FAIR pool, what it writes, whether it reads ``bronze_events`` (then it waits for ingest to create it), and what
it compiles in when it starts (``reload_when``: the always-on job restarts it when that changes, e.g. the rules).
Starting and running to the end (:func:`sensorcep.pipeline.streaming.launch`), the always-on job, the local runner,
monitoring and 05 all read :func:`registry`; adding a query is one decorated function in a pipeline module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sensorcep.errors import SensorCepError
from sensorcep.observability.health import trigger_interval_ms
from sensorcep.settings import Settings


class UnknownQueryError(SensorCepError, KeyError):
    """A query name no pipeline module declares."""

    def __str__(self) -> str:  # KeyError would quote the sentence
        return str(self.args[0])


@dataclass(frozen=True)
class Query:
    name: str
    start: Callable  # start(spark, settings, *, wait=True) -> StreamingQuery, or None when it has nothing to do
    task: str
    writes: str
    trigger_setting: str = "trigger"
    pool: str | None = None
    reads_bronze: bool = False
    #: fingerprint(spark, settings) of what the query compiles in when it starts (the alert rules): the always-on
    #: job restarts the query, on its checkpoint, when it changes
    reload_when: Callable | None = None

    def trigger(self, settings: Settings) -> str:
        """The trigger this query runs with under ``settings``."""
        return getattr(settings, self.trigger_setting)


_DECLARED: dict[str, Query] = {}


def declare(
    name: str,
    *,
    task: str,
    writes: str,
    trigger_setting: str = "trigger",
    pool: str | None = None,
    reads_bronze: bool = False,
    reload_when: Callable | None = None,
):
    """Decorator: declare the query ``name`` that the decorated function starts."""
    if trigger_setting not in ("trigger", "alerts_trigger"):
        raise ValueError(f"query {name}: trigger_setting must be trigger or alerts_trigger, not {trigger_setting!r}")

    if task not in TASK_ORDER:
        raise ValueError(f"query {name}: task must be one of {TASK_ORDER}, not {task!r}")

    def register(start: Callable) -> Callable:
        if name in _DECLARED and _DECLARED[name].start.__qualname__ != start.__qualname__:
            raise ValueError(
                f"query {name!r} is declared twice: {_DECLARED[name].start.__qualname__}, {start.__name__}"
            )
        _DECLARED[name] = Query(name, start, task, writes, trigger_setting, pool, reads_bronze, reload_when)
        return start

    return register


#: the always-on tasks (the bundle's task keys), in pipeline order
TASK_ORDER = ("ingest", "sampling_state", "alerts", "alert_records")


def registry() -> dict[str, Query]:
    """Every declared query, in pipeline order (by :data:`TASK_ORDER`, then name), by name."""
    # the modules that declare them import this one, so they are imported here, when asked
    from sensorcep.pipeline import alert_lifecycle, alerts, device_activity, ingest, sampling, stateful_rules  # noqa: F401, PLC0415

    ordered = sorted(_DECLARED.values(), key=lambda q: (TASK_ORDER.index(q.task), q.name))
    return {q.name: q for q in ordered}


def query(name: str) -> Query:
    """The declaration of ``name`` (a project query name, without ``query_suffix``)."""
    declared = registry()
    if name not in declared:
        raise UnknownQueryError(f"no query named {name!r}; the project's queries: {', '.join(declared)}")
    return declared[name]


def tasks() -> dict[str, list[Query]]:
    """Always-on task key -> its queries, in pipeline order."""
    grouped: dict[str, list[Query]] = {}
    for declared in registry().values():
        grouped.setdefault(declared.task, []).append(declared)
    return grouped


def trigger_intervals(settings: Settings) -> dict[str, int]:
    """Each project query's trigger interval in ms (0 = as fast as possible), for the health rules."""

    return {settings.query_name(name): trigger_interval_ms(q.trigger(settings)) for name, q in registry().items()}
