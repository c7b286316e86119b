"""One writer per checkpoint, and one writer per query and tables: exclusive locks a running query holds.

* The **checkpoint claim** (``<checkpoint>.lock``): two runs on one checkpoint corrupt it (Databricks and Spark both
  say: never share a checkpoint).
* The **writer claim** (``<base_path>/writers/<tables>/<query>.lock``, one per project query whatever its
  ``query_suffix``): a second run of a query through another checkpoint (another suffix, or the hourly job beside
  the always-on one on one machine) would write the same tables again from its own start, doubling what the first
  wrote. ``<tables>`` names where the tables live (``<catalog>.<schema>`` with ``tables=catalog``, ``paths``
  otherwise), so a run against another schema is another writer.

Both are ``flock`` locks, held while the query runs and dropped by the operating system when the process ends, however
it ends (kill -9 included). They hold where the folders are local or FUSE-mounted on one machine (the laptop, a
single-node cluster). A lock on a ``/Volumes`` FUSE mount is not known to hold across clusters, so on Databricks the
guard is the deployment's: each set of tables is written by one job (``tests/unit/test_bundle.py``: no target unpauses
both the hourly and the always-on job; a continuous job runs one run at a time, the hourly job one at most), and the
prod target grants MODIFY on the schema to the jobs' service principal (docs/deploy-checklist.md). A lease written to
a Delta table would hold across clusters, but needs each running query to renew it every minute (a Delta commit per
query per minute at idle, the fixed cost the job is being rid of) and a clock every cluster agrees on; see
docs/reliability.md.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
from dataclasses import dataclass, field

from pyspark.sql.streaming import StreamingQuery

from sensorcep.errors import SensorCepError
from sensorcep.settings import Settings


class ConcurrentWriterError(SensorCepError, RuntimeError):
    """A query was started while another run writes its checkpoint or, through another checkpoint, its tables."""


@dataclass
class CheckpointClaim:
    """This process's claims for one running query: its checkpoint's lock and its writer lock (open files holding an
    exclusive ``flock``)."""

    path: str
    handle: object
    query: StreamingQuery | None = None
    others: list = field(default_factory=list)  # further locked files, released with it
    released: bool = False

    def release(self) -> None:
        """Let the locks go; once (a later call, from any thread, does nothing)."""
        with _claiming:
            if self.released:
                return
            self.released = True
            if _claims.get(self.path) is self:
                del _claims[self.path]
            for handle in [self.handle, *self.others]:
                try:
                    fcntl.flock(handle, fcntl.LOCK_UN)
                finally:
                    handle.close()


_claims: dict[str, CheckpointClaim] = {}
#: claims are taken and released by whichever thread starts a query: the always-on job's loop, and a task restarted
#: from another thread (two threads releasing one stopped query's claim: the second unlocked a closed file)
_claiming = threading.RLock()


def writer_lock_path(settings: Settings, query: str) -> str:
    """The writer lock of the project query ``query`` (no suffix) over the tables ``settings`` names."""
    tables = f"{settings.catalog or 'spark_catalog'}.{settings.schema}" if settings.tables == "catalog" else "paths"
    return f"{settings.base_path.rstrip('/')}/writers/{tables}/{query}.lock"


def _stamp() -> str:
    return f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"


def _lock(path: str, holder: str):
    """The locked open file; None where no lock can be taken (not a local folder); the holder's text when another
    holds it (``str``)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held open for as long as the query runs
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        said = handle.read().strip() or "another process"
        handle.close()
        return said
    handle.seek(0)
    handle.truncate()
    handle.write(holder)
    handle.flush()
    return handle


def claim_checkpoint(settings: Settings, query: str, *, realtime: bool = False) -> CheckpointClaim:
    """Claim the query's checkpoint and its writer lock for this process, or raise :class:`ConcurrentWriterError`
    naming the run that holds either. Where the folders are not local, the claim is a no-op (see the module)."""
    with _claiming:
        return _claim(settings, query, realtime)


def _claim(settings: Settings, query: str, realtime: bool) -> CheckpointClaim:
    release_checkpoints()
    checkpoint = settings.checkpoint_path(query, realtime=realtime)
    path = checkpoint.rstrip("/") + ".lock"
    name = settings.query_name(query)
    held = _claims.get(path)
    if held is not None and held.query is not None and not held.query.isActive:
        held.query = None  # it failed and is started again (a task retry): its claim was never let go
        return held
    if held is not None:  # this process: a query of this checkpoint still runs
        raise ConcurrentWriterError(
            f"query {name} is already running in this process; stop it before starting it again (one writer per "
            "checkpoint)"
        )
    handle = _lock(path, _stamp())
    if handle is None:
        return CheckpointClaim(path, open(os.devnull))  # noqa: SIM115 - not a local folder: nothing to lock
    if isinstance(handle, str):
        raise ConcurrentWriterError(
            f"query {name} is already running: {handle} writes its checkpoint {checkpoint}; stop that run first "
            "(one writer per checkpoint)"
        )
    claim = CheckpointClaim(path, handle)
    writer = _lock(writer_lock_path(settings, query), f"{_stamp()}, query {name} on checkpoint {checkpoint}")
    if isinstance(writer, str):
        claim.release()
        raise ConcurrentWriterError(
            f"query {name} would write the tables {writer} writes (through another checkpoint, so both would write "
            f"everything): stop that run first, or give this one its own tables (another schema or base_path)"
        )
    if writer is not None:
        claim.others.append(writer)
    _claims[path] = claim
    return claim


def release_checkpoints() -> None:
    """Release this process's claims whose query was stopped. A query that failed keeps its claim: the always-on task
    starts it again on its checkpoint (a Python worker that did not start in time), and no other run may take its
    checkpoint meanwhile; the claim goes with that start (:func:`claim_checkpoint`) or with the process."""
    with _claiming:
        for claim in list(_claims.values()):
            if claim.query is not None and not claim.query.isActive and claim.query.exception() is None:
                claim.release()
