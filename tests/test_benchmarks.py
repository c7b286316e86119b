"""Every benchmark at least starts: a layout change that breaks one's imports fails here, not months later."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parents[1] / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found():
    assert {b.stem for b in BENCHMARKS} >= {"alert_latency", "ingest", "sampling", "soak", "state_tuning"}


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_each_benchmark_imports_and_explains_its_options(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: "), done.stdout[:200]
