"""kill -9 the pipeline process at seeded random points, restart from the same checkpoints: Delta tables equal an
uninterrupted run exactly (as sets, no duplicates), and every anomaly reached the alerts topic at least once."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from streams import delta_frame, topic_records

from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import alerts, ingest, sampling

pytestmark = pytest.mark.integration
DRIVER = Path(__file__).with_name("crash_driver.py")
#: deterministic columns of each table (ingest_time, quarantined_at, detected_at are wall-clock stamps)
COMPARED = {
    "bronze_events": ["device_id", "sensor_freq", "event_time", "offset"],
    "quarantine_events": ["offset", "reason"],
    "duplicate_events": ["partition", "offset", "duplicate_of_partition", "duplicate_of_offset"],
    "late_events": ["query", "device_id", "sensor_freq", "event_time", "watermark"],
    "sensor_samples": ["device_id", "sensor_freq", "event_time", "window_start", "roles"],
    "anomalies": ["alert_id", "device_id", "sensor_freq", "event_time"],
}


def kill_points(seed: int, count: int) -> list[str]:
    """``count`` kill points: exact spots inside this process's Delta commits, and one random moment in time."""
    rng = random.Random(seed)
    points = [f"{rng.choice(['before_commit', 'after_commit'])}:{rng.randint(1, 4)}" for _ in range(count - 1)]
    points.insert(rng.randrange(count), f"after_seconds:{rng.uniform(6, 14):.1f}")
    return points


def run_driver(settings, point: str | None) -> int:
    """Run the driver (optionally to a kill point); its exit code, -9 when killed. A failure shows its stderr."""
    args = [sys.executable, str(DRIVER), json.dumps(asdict(settings))]
    timed = point is not None and point.startswith("after_seconds")
    if point and not timed:
        args.append(point)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    if timed:
        try:
            proc.wait(timeout=float(point.split(":")[1]))  # the run may end first: then it was not killed
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=600)
    errors = [line for line in stderr.decode().splitlines() if "Error" in line or "Exception" in line]
    assert proc.returncode in (0, -signal.SIGKILL), f"driver failed at {point}:\n" + "\n".join(errors[:8])
    return proc.returncode


def _rows(settings, table: str) -> list[tuple]:
    frame = delta_frame(settings.table_path(table), COMPARED[table])
    if "roles" in frame:
        frame["roles"] = frame["roles"].map(tuple)
    return sorted(map(tuple, frame.astype(object).where(frame.notna(), None).itertuples(index=False)), key=repr)


@pytest.fixture(scope="module")
def topic(bootstrap):
    name = "crash-events"
    create_topics(bootstrap, [name, "crash-alerts-reference", "crash-alerts"])
    sim = simulator.generate(
        simulator.SimulationConfig(
            events=3_000, devices=30, seed=11, rate=50, malformed_share=0.03, duplicate_share=0.03
        )
    )
    simulator.produce(sim, bootstrap, name)
    return name


def test_kill_9_at_random_points_then_restart_equals_an_uninterrupted_run(spark, bootstrap, topic, tmp_path):
    from sensorcep.settings import Settings

    common = dict(
        kafka_bootstrap_servers=bootstrap,
        events_topic=topic,
        max_offsets_per_trigger=600,
        trigger="availableNow",
        alerts_trigger="availableNow",
    )
    reference = Settings(
        base_path=str(tmp_path / "reference"), schema="crash_reference", alerts_topic="crash-alerts-reference", **common
    )
    ingest.start_ingest(spark, reference)
    sampling.start_sampling(spark, reference)
    alerts.run_alert_path(spark, reference)

    crashed = Settings(
        base_path=str(tmp_path / "crashed"), schema="crash_crashed", alerts_topic="crash-alerts", **common
    )
    outcomes = []
    started = time.monotonic()
    for point in kill_points(seed=20261122, count=5):
        outcomes.append((point, run_driver(crashed, point)))
    assert [code for _, code in outcomes] == [-signal.SIGKILL] * 5, outcomes  # every point was reached
    assert run_driver(crashed, None) == 0  # the restart completes
    print(f"5 kills + restart in {time.monotonic() - started:.0f} s: {outcomes}")

    for table in COMPARED:
        got, want = _rows(crashed, table), _rows(reference, table)
        assert len(got) == len(set(got)), f"{table} has duplicates"
        assert got == want, f"{table} differs from the uninterrupted run"
    assert len(_rows(reference, "sensor_samples")) > 0 and len(_rows(reference, "anomalies")) > 0
    assert len(_rows(reference, "duplicate_events")) > 0

    kept = [
        (p, o)
        for table in ("bronze_events", "quarantine_events", "duplicate_events")
        for p, o in delta_frame(crashed.table_path(table), ["partition", "offset"]).itertuples(index=False)
    ]
    read = [(p, o) for p, o, _, _ in topic_records(bootstrap, topic)]
    assert sorted(kept) == sorted(read), "every record of the topic is in exactly one of ingest's tables"

    alert_ids = [json.loads(value)["alert_id"] for _, _, _, value in topic_records(bootstrap, "crash-alerts")]
    anomaly_ids = {row[0] for row in _rows(reference, "anomalies")}
    assert set(alert_ids) == anomaly_ids  # every anomaly alerted at least once, nothing else alerted
