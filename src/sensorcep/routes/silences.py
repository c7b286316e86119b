"""Silences at run time: created and ended from the command line, kept in the Delta table ``silences``, read by the
notifier query.

A silence mutes the incidents whose labels carry every one of its matchers, from ``starts`` until ``ends``, with the
author and a comment (:class:`sensorcep.routes.planning.Silence`); a muted page is a ``suppressed`` row of
``notifications`` that names the silence. It is not an incident's snooze (an ack with an end, judged by the
lifecycle): a silence mutes pages by label, whatever the incidents do.

The table is append-only, so it is its own history: creating a silence appends its row; ending it early appends the
same silence again with ``ends`` at that moment and who ended it (``written_by``). A silence is its newest row.

    python -m sensorcep routes silence --match site=plant --for "2 hours" --author ann --comment "maintenance"
    python -m sensorcep routes unsilence <id> --author bob
    python -m sensorcep routes silences
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from sensorcep.io.lake import Tables
from sensorcep.routes.model import LABELS, RoutesError
from sensorcep.routes.planning import Silence
from sensorcep.schemas import BY_NAME
from sensorcep.settings import Settings, parse_duration

TABLE = "silences"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def parse_matchers(pairs: list[str]) -> dict[str, str]:
    """``["site=plant", "rule_id=too_hot"]`` -> matchers; a pair that is not ``label=value`` of a known label is an
    error naming it."""
    matchers = {}
    for pair in pairs:
        label, sep, value = pair.partition("=")
        if not sep or not value or label not in LABELS:
            raise RoutesError(f"silence matcher {pair!r}: give label=value, the label one of {', '.join(LABELS)}")
        matchers[label] = value
    if not matchers:
        raise RoutesError("a silence needs at least one matcher (label=value): it would mute every incident")
    return matchers


def _append(spark: SparkSession, settings: Settings, silence: Silence, written_by: str) -> None:
    row = (
        silence.silence_id,
        silence.matchers,
        silence.starts,
        silence.ends,
        silence.author,
        silence.comment,
        _now(),
        written_by,
    )
    lake = Tables(spark, settings)
    lake.create([TABLE])
    lake.write(spark.createDataFrame([row], BY_NAME[TABLE].columns), TABLE)


def add(
    spark: SparkSession,
    settings: Settings,
    matchers: dict[str, str],
    duration: str,
    author: str,
    comment: str,
    starts: datetime | None = None,
) -> Silence:
    """Create a silence of ``matchers`` for ``duration`` (e.g. ``"2 hours"``) from ``starts`` (default now)."""
    if not author.strip() or not comment.strip():
        raise RoutesError("a silence needs an author and a comment: who muted what, and why")
    matchers = parse_matchers([f"{label}={value}" for label, value in matchers.items()])  # none: it would mute all
    starts = starts or _now()
    ends = starts + timedelta(seconds=parse_duration(duration, "silence duration"))
    silence = Silence(uuid.uuid4().hex[:12], dict(matchers), starts, ends, author, comment)
    _append(spark, settings, silence, author)
    return silence


def end(spark: SparkSession, settings: Settings, silence_id: str, by: str) -> Silence:
    """End the silence now (its row again, ``ends`` now, written by ``by``); an unknown id is an error naming it."""
    found = {s.silence_id: s for s in current(spark, settings)}
    if silence_id not in found:
        raise RoutesError(f"no silence {silence_id!r}; the silences: {', '.join(found) or 'none'}")
    silence = found[silence_id]
    ended = Silence(silence.silence_id, silence.matchers, silence.starts, min(silence.ends, _now()), silence.author,
                    silence.comment)  # fmt: skip
    _append(spark, settings, ended, by)
    return ended


def current(spark: SparkSession, settings: Settings) -> list[Silence]:
    """Every silence as its newest row says (ended ones included; :meth:`Silence.mutes` judges one at a time)."""
    lake = Tables(spark, settings)
    if not lake.exists(TABLE):
        return []
    newest = Window.partitionBy("silence_id").orderBy(F.col("written_at").desc())
    latest = lake.read(TABLE).withColumn("n", F.row_number().over(newest)).where("n = 1")
    # the times as microseconds since the epoch: a collected timestamp would be naive, in the client's time zone
    rows = latest.select("*", F.unix_micros("starts").alias("starts_us"), F.unix_micros("ends").alias("ends_us"))
    # a row written by hand without its times or with no matcher mutes nothing (a silence of nothing would be all)
    usable = rows.where(
        F.col("starts_us").isNotNull() & F.col("ends_us").isNotNull() & (F.coalesce(F.size("matchers"), F.lit(0)) > 0)
    )
    return [
        Silence(r.silence_id, dict(r.matchers), _utc(r.starts_us), _utc(r.ends_us), r.author, r.comment)
        for r in sorted(usable.collect(), key=lambda r: r.starts_us)
    ]


def _utc(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, timezone.utc)
