"""What a user reads in the terminal: the project's own lines, not the JVM's start-up chatter."""

import os
import subprocess
import sys
from pathlib import Path


def test_summary_prints_its_tables_not_the_jvms_start_up_warnings(settings, tmp_path):
    env = {**os.environ, "SENSORCEP_BASE_PATH": settings.base_path, "SENSORCEP_SCHEMA": settings.schema}
    done = subprocess.run(
        [sys.executable, "-m", "sensorcep", "summary", "--runs", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "Delta tables" in done.stdout and "bronze_events" in done.stdout
    assert done.stderr.strip() == "", done.stderr
    kept = (Path(settings.base_path) / "logs" / "summary-spark.log").read_text()
    assert "Using incubator modules" in kept  # the chatter is kept, in its log
