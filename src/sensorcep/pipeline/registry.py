"""Every streaming query of the project, collected from the modules that declare them (listed once, here).

Each module in :data:`QUERY_MODULES` declares its queries where it builds them (:func:`sensorcep.pipeline.queries.
declare`); nothing below this module imports it, so there is no import circle. The always-on job, the local runner,
monitoring and 05 read the registry here.
"""

from __future__ import annotations

from types import ModuleType

from sensorcep.observability.health import trigger_interval_ms
from sensorcep.pipeline import (
    alert_lifecycle,
    alerts,
    device_activity,
    group_rules,
    ingest,
    notifications,
    sampling,
    stateful_rules,
)
from sensorcep.pipeline.queries import TASK_ORDER, Query, UnknownQueryError
from sensorcep.settings import Settings

#: the pipeline modules that declare queries; a new query module is added here
QUERY_MODULES: tuple[ModuleType, ...] = (
    ingest,
    sampling,
    device_activity,
    stateful_rules,
    alerts,
    alert_lifecycle,
    group_rules,
    notifications,
)


def registry() -> dict[str, Query]:
    """Every declared query, in pipeline order (by :data:`TASK_ORDER`, then name), by name."""
    found: dict[str, Query] = {}
    for module in QUERY_MODULES:
        for value in vars(module).values():
            declared = getattr(value, "query", None)
            if not isinstance(declared, Query) or declared.start is not value:
                continue
            if declared.name in found and found[declared.name].start is not value:
                raise ValueError(
                    f"query {declared.name!r} is declared twice: {found[declared.name].start.__qualname__}, "
                    f"{value.__qualname__}"
                )
            found[declared.name] = declared
    ordered = sorted(found.values(), key=lambda q: (TASK_ORDER.index(q.task), q.name))
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
