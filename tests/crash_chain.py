"""More kill -9 points than the test suite runs: a seeded chain of N kills against an uninterrupted run.

    make broker-up
    .venv/bin/python tests/crash_chain.py --kills 20 --seed 7

Same driver, kill points and comparison as ``tests/test_crash_recovery.py`` (both runs are driver processes
here), on a fresh topic of the local broker; prints each kill and the per-table verdict, exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from streams import topic_records  # noqa: E402
from test_crash_recovery import COMPARED, _rows, kill_points, run_driver  # noqa: E402

from sensorcep import simulator  # noqa: E402
from sensorcep.local.broker import create_topics  # noqa: E402
from sensorcep.settings import env_settings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--events", type=int, default=6_000)
    args = parser.parse_args()

    run, base = uuid.uuid4().hex[:8], Path(tempfile.mkdtemp(prefix="crash-chain-"))
    common = dict(
        events_topic=f"chain-events-{run}",
        max_offsets_per_trigger=300,
        trigger="availableNow",
        alerts_trigger="availableNow",
    )
    reference = env_settings(
        base_path=str(base / "reference"), schema="chain_reference", alerts_topic=f"chain-alerts-ref-{run}", **common
    )
    crashed = env_settings(
        base_path=str(base / "crashed"), schema="chain_crashed", alerts_topic=f"chain-alerts-{run}", **common
    )
    bootstrap = reference.kafka_bootstrap_servers
    create_topics(bootstrap, [reference.events_topic, reference.alerts_topic, crashed.alerts_topic])
    simulator.produce(
        simulator.generate(
            simulator.SimulationConfig(
                events=args.events, devices=30, seed=args.seed, rate=50, malformed_share=0.03, duplicate_share=0.03
            )
        ),
        bootstrap,
        reference.events_topic,
    )
    assert run_driver(reference, None) == 0
    for i, point in enumerate(kill_points(args.seed, args.kills), 1):
        print(f"kill {i:>2}/{args.kills} at {point:20} -> exit {run_driver(crashed, point)}", flush=True)
    assert run_driver(crashed, None) == 0
    failed = False
    for table in COMPARED:
        got, want = _rows(crashed, table), _rows(reference, table)
        same = got == want and len(got) == len(set(got))
        failed |= not same
        print(f"{table:18} {len(got):>6} rows  {'equal to the uninterrupted run' if same else 'DIFFERENT'}")
    alerted = {json.loads(value)["alert_id"] for _, _, _, value in topic_records(bootstrap, crashed.alerts_topic)}
    missing = {row[0] for row in _rows(reference, "anomalies")} - alerted
    print(f"alerts: {len(alerted)} distinct ids, {len(missing)} anomalies never alerted")
    sys.exit(1 if failed or missing else 0)


if __name__ == "__main__":
    main()
