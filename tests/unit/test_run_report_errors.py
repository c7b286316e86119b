"""The run report's health section without a browser or Spark: a run that recorded no progress gets one sentence
saying why there are no verdicts, and starts no Spark session."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sensorcep.local import run_report
from sensorcep.settings import Settings


def test_a_run_that_recorded_no_progress_has_no_table_to_judge_and_starts_no_spark(tmp_path, monkeypatch):
    monkeypatch.setattr(run_report, "get_spark", lambda: pytest.fail("started Spark with no table to read"))
    settings = Settings(base_path=str(tmp_path))
    health = run_report.run_health(lambda: run_report.read_health(settings, datetime.now(timezone.utc)))
    assert health.verdicts == []
    assert health.problem == (
        "Health verdicts unavailable: stream_progress could not be read "
        f"(no stream_progress table at {tmp_path}/tables/stream_progress)."
    )
