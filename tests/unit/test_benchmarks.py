"""Every benchmark at least starts: a layout change that breaks one's imports fails here, not months later."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parents[2] / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found():
    assert {b.stem for b in BENCHMARKS} >= {"alert_latency", "ingest", "sampling", "soak", "state_tuning"}


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_each_benchmark_imports_and_explains_its_options(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: "), done.stdout[:200]


def _ingest_benchmark():
    path = Path(__file__).parents[2] / "benchmarks" / "ingest.py"
    spec = importlib.util.spec_from_file_location("ingest_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ingest_steps_attribute_each_spark_job_to_its_batch_and_step(tmp_path):
    """--steps' second table: Spark's event log, with the batch and step each job was started in (local properties);
    a job of no step counts for the ranking, and jobs of other queries (no batch property) do not count."""
    bench = _ingest_benchmark()

    def job(job_id, start_ms, end_ms, **properties):
        return [
            {"Event": "SparkListenerJobStart", "Job ID": job_id, "Submission Time": start_ms, "Properties": properties},
            {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": end_ms},
        ]

    batch = {bench.BATCH_PROPERTY: "0"}
    events = [
        *job(1, 1_000, 3_000, **batch, **{bench.STEP_PROPERTY: "read+parse+cache"}),
        *job(2, 3_100, 3_400, **batch, **{bench.STEP_PROPERTY: "append bronze_events"}),
        *job(3, 3_500, 3_750, **batch, **{bench.STEP_PROPERTY: "append bronze_events"}),
        *job(4, 3_800, 4_300, **batch),  # no step: the ranking
        *job(5, 0, 900),  # the noop query's job: no batch
        *job(6, 5_000, 5_500, **{bench.BATCH_PROPERTY: "1", bench.STEP_PROPERTY: "append quarantine_events"}),
        {"Event": "SparkListenerStageCompleted"},
    ]
    (tmp_path / "local-1.inprogress").write_text("\n".join(json.dumps(e) for e in events))

    spent = bench.job_seconds(tmp_path)
    assert spent.keys() == {0, 1}
    assert spent[0] == pytest.approx({"read+parse+cache": 2.0, "append bronze_events": 0.55, "ranking+other": 0.5})
    assert spent[1] == pytest.approx({"append quarantine_events": 0.5})


def test_full_batch_rate_leaves_out_the_first_batch_and_the_short_last_one():
    """Both queries' steady rate: records from each batch's offsets over its duration, full batches after the first."""
    bench = _ingest_benchmark()

    def batch(start: int, end: int, ms: int) -> dict:
        offsets = lambda n: {"t": {"0": n // 2, "1": n // 2}}  # noqa: E731
        return {
            "batchDuration": ms,
            "sources": [{"startOffset": offsets(start) if start else None, "endOffset": offsets(end)}],
        }

    batches = [batch(0, 100, 9_000), batch(100, 200, 1_000), batch(200, 300, 3_000), batch(300, 310, 10)]
    assert bench.full_batch_rate(batches, 100) == pytest.approx(200 / 4.0)
    assert bench.full_batch_rate(batches[:1], 100) is None


def test_a_first_batch_that_starts_at_none_is_counted_from_the_earliest_offsets():
    """A query's first progress may name its start offsets ``None`` (a Python repr, not JSON)."""
    bench = _ingest_benchmark()
    progress = {"sources": [{"startOffset": "None", "endOffset": "{'t': {'0': 5, '1': 7}}"}]}
    assert bench.records_of(progress) == 12
