"""A query whose Python worker was late to start is started again; any other failure to start is the user's."""

import pytest

from sensorcep.pipeline import streaming

LATE = "SparkException: Python worker failed to connect back.\nJVM stacktrace: ... StreamingPythonRunner.init"


class Writer:
    """A ``DataStreamWriter`` stand-in whose ``start()`` raises the given errors in turn, then returns a query."""

    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.starts = 0

    def start(self):
        self.starts += 1
        if self.errors:
            raise self.errors.pop(0)
        return "the query"


def test_a_start_whose_python_worker_was_late_is_tried_again_and_said(caplog):
    writer = Writer(RuntimeError(LATE), RuntimeError(LATE))
    assert streaming._start(writer, "sampling") == "the query"
    assert writer.starts == 3
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "query sampling: its Python worker did not start in time; starting the query again (1 of 3)",
        "query sampling: its Python worker did not start in time; starting the query again (2 of 3)",
    ]


def test_a_worker_late_every_time_fails_after_the_retries():
    writer = Writer(*[RuntimeError(LATE)] * (streaming.WORKER_START_RETRIES + 1))
    with pytest.raises(RuntimeError, match="failed to connect back"):
        streaming._start(writer, "sampling")
    assert writer.starts == streaming.WORKER_START_RETRIES + 1


def test_any_other_failure_to_start_is_raised_at_once():
    writer = Writer(ValueError("checkpoint belongs to another query"))
    with pytest.raises(ValueError, match="another query"):
        streaming._start(writer, "sampling")
    assert writer.starts == 1
