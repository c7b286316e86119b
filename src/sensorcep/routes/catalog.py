"""The ``routes`` Delta table: the routes in force, one row per published version, as ``alert_rules`` holds the rules.

* :func:`publish` checks a route set and appends it as the next version (nothing when it equals the one in force),
  with who published it and from where: the table is its own history;
* :func:`routes_in_force` is what the notifier query sends by: the newest version, the table seeded from
  ``routes_file`` the first time;
* :func:`fingerprint` (the version in force) is the notifier's ``reload_when``: the always-on job restarts the query
  on its checkpoint when someone publishes, as it does the rule queries when the rules change. Its groups carry on
  (each names its receiver); a group whose receiver the new routes no longer have is told by nobody, and the ledger
  says so (``dead_letter``, the reason naming the receiver).

    python -m sensorcep routes publish --file routes.yaml --author ann
    python -m sensorcep routes history
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from sensorcep.io.lake import Tables
from sensorcep.routes.model import RoutesError, RouteSet, load_routes, parse_routes
from sensorcep.rules import catalog as rules_catalog
from sensorcep.schemas import BY_NAME
from sensorcep.settings import Settings

log = logging.getLogger(__name__)

TABLE = "routes"


def spec(route_set: RouteSet) -> str:
    """A route set as the table keeps it: its JSON (names of secrets only: the secrets stay in the scope)."""
    return json.dumps(route_set.model_dump(mode="json", by_alias=True), sort_keys=True)


def versions(spark: SparkSession, settings: Settings) -> list[dict]:
    """Every published version, oldest first (none: the table does not exist yet)."""
    lake = Tables(spark, settings)

    def read() -> list[dict]:
        if not lake.exists(TABLE):
            return []
        return sorted((row.asDict() for row in lake.read(TABLE).collect()), key=lambda row: row["version"])

    return rules_catalog.read_in_pass(str(lake[TABLE]), read)  # once per pass of the always-on job's starts


def publish(spark: SparkSession, settings: Settings, route_set: RouteSet, author: str, source: str) -> int | None:
    """Make ``route_set`` the routes in force: its version, or None when it equals the version in force."""
    if not author.strip():
        raise RoutesError("publishing routes needs an author: the routes table records who changed them")
    held = versions(spark, settings)
    text = spec(route_set)
    if held and held[-1]["spec"] == text:
        return None
    version = held[-1]["version"] + 1 if held else 1
    row = (version, text, source, author, datetime.now(timezone.utc))
    lake = Tables(spark, settings)
    lake.create([TABLE])
    lake.write(spark.createDataFrame([row], BY_NAME[TABLE].columns), TABLE)
    rules_catalog.forget_in_pass(str(lake[TABLE]))
    log.warning("routes: version %d published by %s from %s", version, author, source)
    return version


def ensure_seeded(spark: SparkSession, settings: Settings) -> None:
    """Publish ``routes_file`` as version 1 when the table holds no version yet."""
    if not versions(spark, settings):
        publish(spark, settings, load_routes(settings.routes_file), "routes_file", settings.routes_file)


def routes_in_force(spark: SparkSession, settings: Settings) -> tuple[int, RouteSet]:
    """(version, routes) of the newest version, seeded first. A hand-edited bad row is an error naming its version."""
    ensure_seeded(spark, settings)
    newest = versions(spark, settings)[-1]
    return newest["version"], parse_routes(json.loads(newest["spec"]), f"{TABLE} version {newest['version']}")


def fingerprint(spark: SparkSession, settings: Settings) -> int | None:
    """The version in force (None when no routes are set: the notifier does not run)."""
    if not settings.routes_file:
        return None
    ensure_seeded(spark, settings)
    return versions(spark, settings)[-1]["version"]
