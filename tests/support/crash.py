"""Crash a pipeline run on purpose: ``kill -9`` its process once it has committed a first Delta batch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time


def _adds_files(path: str) -> bool:
    """A Delta commit file that adds rows (not the empty commit that creates the table): an ``add`` action whose
    statistics count records."""
    if not path.endswith(".json"):
        return False
    with open(path) as commit:
        return any(re.search(r'numRecords\\?":\s*[1-9]', line) for line in commit if line.startswith('{"add"'))


def kill_after_first_commit(call: str, settings, table: str, timeout_s: float = 120.0) -> None:
    """Run ``sensorcep.<call>(get_spark(), settings)`` in a new process; SIGKILL it after ``table``'s first commit of
    rows.

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
        if os.path.isdir(delta_log) and any(
            _adds_files(os.path.join(delta_log, name)) for name in os.listdir(delta_log)
        ):
            break  # the first commit that wrote rows (the table is created empty first; Delta writes .crc files too)
        time.sleep(0.05)
    assert proc.poll() is None, f"{call} finished before it could be killed; use more events"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
