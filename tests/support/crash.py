"""Crash a pipeline run on purpose: ``kill -9`` its process once it has committed a first Delta batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def kill_after_first_commit(call: str, settings, table: str, timeout_s: float = 120.0) -> None:
    """Run ``sensorcep.<call>(get_spark(), settings)`` in a new process; SIGKILL it after ``table``'s first commit.

    ``call`` is e.g. ``"pipeline.ingest.start_ingest"``. Fails if the run ends before it could be killed.
    """
    module, function = call.rsplit(".", 1)
    code = (
        f"from sensorcep.{module} import {function}; from sensorcep.runtime import get_spark; "
        f"from sensorcep.settings import Settings; {function}(get_spark(), Settings(**{settings.__dict__!r}))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    delta_log = os.path.join(settings.table_path(table), "_delta_log")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:  # polling a file, not sleeping as synchronisation
        if os.path.isdir(delta_log) and any(name.endswith(".json") for name in os.listdir(delta_log)):
            break  # the first commit file (Delta writes _staged_commits/ and .crc files too)
        time.sleep(0.05)
    assert proc.poll() is None, f"{call} finished before it could be killed; use more events"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
