"""The always-on job in a process of its own, for the seeded fault test (``tests/support/nemesis.py``).

    python tests/support/nemesis_driver.py '<job parameters as JSON>' [point]

(``"only": "ingest,sampling_state"`` among the parameters: only those tasks of the job; ``"queries":
"ingest,device_activity"``: only those queries.)

It runs every task of ``sensor_cep_streaming`` as ``python -m sensorcep run --job sensor_cep_streaming`` does (one
Spark application) and prints a line as each Delta write of a query starts (``write <query> <table> <n>``) and when
it committed something (``committed <query> <table> <k>``), so the nemesis acts on progress, not on time. ``point``
arms one fault inside the process; each is reached or the run never dies by itself (the nemesis then fails the test):

* ``before:<query>:<table>:K``  kill -9 of its own process group (Python driver, Spark JVM, Python workers) as the
  query's K-th non-empty append or MERGE of ``<table>`` starts: the micro-batch is half written;
* ``after:<query>:<table>:K``   the same right after the query's K-th write that committed to ``<table>``, before
  Spark records the micro-batch as done: the replay must add nothing;
* ``offset_log:<query>:K`` / ``commit_log:<query>:K``  kill -9 as the K-th new file lands in the query's
  checkpoint ``offsets/`` (the batch is planned, not run) or ``commits/`` (done, the next one not planned);
* ``state_commit:<query>:K``    kill -9 as the K-th new state store version file lands under its ``state/``;
* ``delta_checkpoint:<table>:1`` kill -9 as the table's next Delta checkpoint lands (the fault run's tables checkpoint
  every :data:`CHECKPOINT_INTERVAL` commits, Delta's default is 10: a slow machine commits bronze a few times a run);
* ``in_delta_commit:<table>:K`` / ``in_delta_checkpoint:<table>:1`` / ``in_offset_log:<query>:K`` /
  ``in_commit_log:<query>:K``  kill -9 inside the write of a file: as the K-th temporary file is created that Delta
  (a table's commit ``<version>.json``, not its creation, version 0; its checkpoint ``<version>.checkpoint.parquet``)
  or Spark's checkpoint file manager (an offset or commit log entry) writes and then renames into place (Linux
  inotify: the kill follows the creation by microseconds, the rename by milliseconds); the line ``inside <temporary
  file>`` names it, and the nemesis checks that the file was left half done;
* ``delivery:notifier:K``       kill -9 as the notifier's K-th message of the run has reached its receiver, before
  the pass that sent it records its groups and ledger rows: the replayed pass must send it again with the same id;
* ``stop_alerts:K``             after the anomalies query's K-th write, stop the real-time alert query and start it
  again on its checkpoint (a task restart of the always-on job);
* ``drain``                     no fault: run until every query has read everything and applied the final watermark,
  then stop cleanly and exit 0.

A line ``reached <point>`` is printed before a kill. Without ``point`` the job runs until the nemesis kills it from
outside (or for 10 minutes). Any run drains and exits 0 once the nemesis asks it to (:data:`DRAIN_FLAG`, after the
fleet stopped): the run alive at the end of the plan drains, instead of a fresh run that first starts every task.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the support package

#: file points: the folder (under the query's checkpoint or the table) whose new files count
FILE_POINTS = {"offset_log": "offsets", "commit_log": "commits", "state_commit": "state", "delta_checkpoint": ""}
#: points inside a file's write: the folder (under the table or the query's checkpoint) and the name of the temporary
#: file written there before the rename (``.<name>.<uuid>.tmp``: Delta's ``HadoopFileSystemLogStore.createTempPath``,
#: Spark's ``CheckpointFileManager.RenameHelperMethods``; not their ``.crc`` companions)
IN_WRITE = {
    "in_delta_commit": ("_delta_log", re.compile(r"^\.\d{20}\.json\.[0-9a-f-]+\.tmp$")),
    "in_offset_log": ("offsets", re.compile(r"^\.\d+\.[0-9a-f-]+\.tmp$")),
    "in_commit_log": ("commits", re.compile(r"^\.\d+\.[0-9a-f-]+\.tmp$")),
    "in_delta_checkpoint": ("_delta_log", re.compile(r"^\.\d{20}\.checkpoint\.parquet\.[0-9a-f-]+\.tmp$")),
}
#: the :data:`IN_WRITE` points under a table (the others are under a query's checkpoint)
IN_TABLE = ("in_delta_commit", "in_delta_checkpoint")
#: the fault run's tables write a Delta checkpoint every 2 commits (Delta's default is 10): on a 2-core CI machine the
#: job commits bronze about 5 times in 4 minutes, so at 10 the point was not reached
CHECKPOINT_INTERVAL = 2
#: offset log entries a query keeps (Spark's default: 100); more than a fault run's queries ever plan
KEEP_BATCHES = 100_000
#: the file (beside the run's ``base_path``) by which the nemesis asks a run to drain and exit
DRAIN_FLAG = "drain-now"
#: the line a ``stop_alerts`` run prints when starting its alert query again failed (the thread that tried then ends)
RESTART_FAILED = "restart of alerts failed:"


def die(point: str) -> None:
    print(f"reached {point}", flush=True)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _files(root: Path, pattern: str) -> set[str]:
    return {str(p) for p in root.glob(pattern) if not p.name.startswith(".")} if root.exists() else set()


def watch_files(point: str, settings) -> None:
    """Kill the process as the K-th new file of a file point lands (polled every 2 ms from a thread)."""
    kind, name, k = point.split(":")
    if kind == "delta_checkpoint":
        root, pattern, suffixes = Path(settings.table_path(name)) / "_delta_log", "*.checkpoint*.parquet", None
    elif kind == "state_commit":  # a state store version: RocksDB's .zip / .changelog, HDFS-backed .delta / .snapshot
        root, pattern = Path(settings.checkpoint_path(name)) / "state", "**/[0-9]*.*"
        suffixes = {".zip", ".changelog", ".delta", ".snapshot"}
    else:
        root, pattern, suffixes = Path(settings.checkpoint_path(name)), f"{FILE_POINTS[kind]}/[0-9]*", None

    def files() -> set[str]:
        found = _files(root, pattern)
        return {f for f in found if Path(f).suffix in suffixes} if suffixes else found

    def run() -> None:
        seen = files()
        new = 0
        while True:
            now = files()
            new += len(now - seen)
            seen = now
            if new >= int(k):
                die(point)
            time.sleep(0.002)  # polling the checkpoint folder: the kill must follow the file closely

    threading.Thread(target=run, daemon=True).start()


def watch_writes(point: str, settings) -> None:
    """Kill the process inside the K-th write of an :data:`IN_WRITE` file: as its temporary file is created (inotify,
    from a thread that waits for the folder to exist: the job creates it up front or on the query's first batch)."""
    from inotify_simple import INotify, flags

    kind, name, k = point.split(":")
    folder, pattern = IN_WRITE[kind]
    root = Path(settings.table_path(name)) if kind in IN_TABLE else Path(settings.checkpoint_path(name))

    def run() -> None:
        while not (root / folder).is_dir():  # inotify watches a folder that exists: the job creates it at its start
            time.sleep(0.01)  # polling for the folder, not for the file: the file's creation is the inotify event
        watcher = INotify()
        watcher.add_watch(str(root / folder), flags.CREATE)
        seen = 0
        while True:
            for event in watcher.read():
                # a table's version 0 is its creation (the job creates every table up front): a data commit counts
                if pattern.match(event.name) and not event.name.startswith(".00000000000000000000."):
                    seen += 1
                    if seen == int(k):
                        print(f"inside {root / folder / event.name}", flush=True)
                        die(point)

    threading.Thread(target=run, daemon=True).start()


def arm_delivery(point: str) -> None:
    """Kill the process right after the notifier's K-th message of this run was delivered (its receiver answered):
    the sender the notifier query builds (:func:`sensorcep.pipeline.notifications.sender`) counts its deliveries."""
    from sensorcep.pipeline import notifications

    k, build, delivered = int(point.split(":")[2]), notifications.sender, 0

    def sender(*args, **kwargs):
        send = build(*args, **kwargs)

        def counted(message):
            nonlocal delivered
            outcome = send(message)
            if outcome.status == "delivered":
                delivered += 1
                print(f"delivered {message.notification_id} {delivered}", flush=True)
                if delivered == k:
                    die(point)
            return outcome

        return counted

    notifications.sender = sender


def arm(spark, point: str | None, on_write) -> None:
    """Wrap the Delta writes of :class:`sensorcep.io.lake.Tables` with progress lines and the write kill point: the
    query is the one whose micro-batch runs the write (Spark's ``sql.streaming.queryId`` of the calling thread)."""
    from sensorcep.io.lake import Tables

    where, armed_query, armed_table, k = "", "", "", 0
    if point and point.split(":")[0] in ("before", "after"):
        where, armed_query, armed_table, k = point.split(":")[0], *point.split(":")[1:3], int(point.split(":")[3])
    calls: dict[tuple[str, str], int] = {}
    nonempty: dict[tuple[str, str], int] = {}
    committed: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def query_of(df) -> str:
        """The query's name: its id is a local property of the micro-batch's thread; the query is registered with the
        session that started it (``spark``), not with the clone a micro-batch runs in."""
        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        found = spark.streams.get(query_id) if query_id else None
        return found.name if found is not None else "-"

    def wrap(method):
        def call(self, df, name, *args, **kwargs):
            query = query_of(df)
            key = (query, name)
            with lock:
                calls[key] = calls.get(key, 0) + 1
            print(f"write {query} {name} {calls[key]}", flush=True)
            on_write(query, name, calls[key])
            mine = query == armed_query and name == armed_table
            if mine and where == "before" and not df.isEmpty():
                nonempty[key] = nonempty.get(key, 0) + 1
                if nonempty[key] == k:
                    die(point)
            log = Path(self.settings.table_path(name)) / "_delta_log"
            before = len(list(log.glob("*.json"))) if log.exists() else 0
            result = method(self, df, name, *args, **kwargs)
            if log.exists() and len(list(log.glob("*.json"))) > before:
                with lock:
                    committed[key] = committed.get(key, 0) + 1
                print(f"committed {query} {name} {committed[key]}", flush=True)
                if mine and where == "after" and committed[key] == k:
                    die(point)
            return result

        return call

    Tables.append_batch = wrap(Tables.append_batch)
    Tables.merge_new_rows = wrap(Tables.merge_new_rows)
    Tables.write = wrap(Tables.write)


def drain_when_asked(spark, settings):
    """The run's stop condition: none until :data:`DRAIN_FLAG` appears, then :func:`support.streams.drained` over the
    topics' ends as they are then (the fleet has stopped), and over the queries running now (a ``stop_alerts`` run
    started its alert query again: the job's list still holds the stopped one)."""
    from support.streams import drained

    flag = Path(settings.base_path).parent / DRAIN_FLAG
    done = None

    def until(queries) -> bool:
        nonlocal done
        if done is None:
            if not flag.exists():
                return False
            done = drained(settings)
        running = {q.name: q for q in queries} | {q.name: q for q in spark.streams.active}
        return done(list(running.values()))

    return until


def main() -> None:
    from sensorcep.local import jobs
    from sensorcep.pipeline import registry
    from sensorcep.runtime import get_spark
    from sensorcep.settings import Settings

    params = json.loads(sys.argv[1])
    only = params.pop("only").split(",") if "only" in params else None  # the tasks to run: all by default
    only_queries = params.pop("queries").split(",") if "queries" in params else None  # of them, these queries
    point = sys.argv[2] if len(sys.argv) > 2 else None
    settings = Settings.from_mapping({k: v for k, v in params.items() if k != "task"})
    spark = get_spark()
    # a default for the tables this run creates (every table is created up front by the job's first run)
    spark.conf.set("spark.databricks.delta.properties.defaults.checkpointInterval", str(CHECKPOINT_INTERVAL))
    # every batch's offset log entry kept (Spark keeps the last 100): the verdict replays device activity over them
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(KEEP_BATCHES))
    restart_alerts_after = int(point.split(":")[1]) if point and point.startswith("stop_alerts:") else None

    def on_write(query: str, table: str, n: int) -> None:
        if table == "anomalies" and n == restart_alerts_after:
            threading.Thread(target=restart_alerts, daemon=True).start()

    def restart_alerts() -> None:
        try:
            running = [q for q in spark.streams.active if q.name == settings.query_name("alerts")]
            for query in running:
                query.stop()
            registry.query("alerts").start(spark, settings.replace(alerts_trigger=params["alerts_trigger"]), wait=False)
        except Exception as error:  # said at once: the nemesis fails on it instead of waiting out its timeout
            print(f"{RESTART_FAILED} {error!r}", flush=True)
            raise
        print("restarted alerts", flush=True)

    arm(spark, point, on_write)
    if point and point.startswith("delivery:"):
        arm_delivery(point)
    if point and point.split(":")[0] in FILE_POINTS:
        watch_files(point, settings)
    if point and point.split(":")[0] in IN_WRITE:
        watch_writes(point, settings)
    until = drain_when_asked(spark, settings)
    jobs.run_always_on(
        params=params,
        until=until,
        minutes=10,
        every_s=3600,
        out=lambda line: None,
        spark=spark,
        only=only,
        only_queries=only_queries,
    )
    for query in spark.streams.active:  # the alert query a stop_alerts run started again, which the job does not list
        query.stop()
    print("completed", flush=True)


if __name__ == "__main__":
    main()
