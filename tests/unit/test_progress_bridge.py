"""The progress listener's bridge on a classic session: what the JVM hands the listener, without PySpark's
field-by-field conversion (decision 0021). The Java event is a stand-in here: these are the two calls the bridge makes
on py4j's proxy of it (a real session feeds it in tests/spark/test_monitoring.py)."""

import json
import threading

from sensorcep.observability.monitoring import DeltaProgressListener, _JsonProgressBridge
from sensorcep.settings import Settings


class _JavaUUID:
    def __init__(self, text: str):
        self.text = text

    def toString(self) -> str:  # noqa: N802 - the Java method's name
        return self.text


class _JavaProgress:
    def __init__(self, progress: dict):
        self.progress_json = json.dumps(progress)

    def json(self) -> str:
        return self.progress_json


class _JavaEvent:
    def __init__(self, run_id: str, progress: dict | None = None):
        self._run_id, self._progress = run_id, progress

    def runId(self) -> _JavaUUID:  # noqa: N802
        return _JavaUUID(self._run_id)

    def progress(self) -> _JavaProgress:
        return _JavaProgress(self._progress)


def _listener() -> DeltaProgressListener:
    """The listener without a session or its writer thread (nothing here flushes)."""
    listener = DeltaProgressListener.__new__(DeltaProgressListener)
    listener._routes, listener._buffers, listener._terminated = {}, {}, {}
    listener._lock, listener._wake = threading.Lock(), threading.Event()
    return listener


def test_the_bridge_hands_the_listener_the_progress_json_and_the_run_id():
    listener = _listener()
    settings = Settings(base_path="/tmp/bridge")
    listener.route(settings.query_name("ingest"), settings)
    bridge = _JsonProgressBridge(listener)
    run_id = "8a7c9f9e-3b1d-4a55-9d0e-2f1f6f0b7c11"

    bridge.onQueryStarted(_JavaEvent(run_id))
    progress = {
        "id": "q",
        "runId": run_id,
        "name": settings.query_name("ingest"),
        "batchId": 3,
        "timestamp": "2026-01-05T12:00:00.000Z",
        "numInputRows": 7,
        "durationMs": {"triggerExecution": 12},
    }
    bridge.onQueryProgress(_JavaEvent(run_id, progress))
    bridge.onQueryTerminated(_JavaEvent(run_id))

    [row] = listener._buffers[settings]
    assert (row["query_name"], row["batch_id"], row["num_input_rows"]) == (settings.query_name("ingest"), 3, 7)
    assert listener._terminated[run_id].is_set(), "the run's end reaches the listener by its id"
    assert listener._wake.is_set()
