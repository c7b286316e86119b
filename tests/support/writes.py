"""Which query writes which table: every Delta write of :class:`sensorcep.io.lake.Tables`, recorded with the streaming
query whose micro-batch made it (Spark's ``sql.streaming.queryId`` of the calling thread)."""

from __future__ import annotations

import threading
from collections import defaultdict

from sensorcep.io.lake import Tables


def record_writes(monkeypatch, spark) -> dict[str, set[str]]:
    """Patch the writes of ``Tables`` for the test; returns query name (``-``: no query) -> tables it wrote. ``spark``:
    the session that starts the queries (a micro-batch runs in a clone of it, which does not know them)."""
    written: dict[str, set[str]] = defaultdict(set)
    lock = threading.Lock()

    def query_of(df) -> str:
        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        query = spark.streams.get(query_id) if query_id else None
        return query.name if query is not None else "-"

    def wrap(method):
        def call(self, df, name, *args, **kwargs):
            with lock:
                written[query_of(df)].add(name)
            return method(self, df, name, *args, **kwargs)

        return call

    for method in ("append_batch", "merge_new_rows", "write"):
        monkeypatch.setattr(Tables, method, wrap(getattr(Tables, method)))
    return written
