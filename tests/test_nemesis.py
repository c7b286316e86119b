"""The seeded fault test over the always-on job (``tests/nemesis.py``): 20 kill points (kill -9 of Spark inside Delta
writes, the anomalies MERGE and the Kafka sink, at seeded moments; kill -9 of the broker), a stop of the real-time
alert query and a second writer, under a fleet whose clocks disagree; then exact equality with what the producer got
acknowledged and with the sampling oracle. A longer run for release checks: ``make nemesis SEED=7 KILLS=60``."""

from collections import Counter

import pytest
from nemesis import KILLS, Nemesis, verify

from sensorcep.local import broker

pytestmark = pytest.mark.integration
OWN_BROKER = "127.0.0.1:19094"  # killed by the nemesis: not the session's broker


@pytest.mark.timeout(1800)
def test_twenty_kills_of_spark_and_the_broker_lose_nothing_and_double_nothing(spark, tmp_path):
    nemesis = Nemesis(seed=20261124, kills=20, workdir=tmp_path, bootstrap=OWN_BROKER)
    try:
        outcomes = nemesis.run()
        counts = verify(nemesis.settings, nemesis.acknowledged)
    finally:
        broker.down(nemesis.broker_dir)
    print("\n".join(f"{action:40} {outcome}" for action, outcome in outcomes), counts)
    kinds = Counter(action.split(":")[0] for action, _ in outcomes)
    assert sum(kinds[kind] for kind in KILLS) >= 20 and all(kinds[kind] for kind in KILLS), kinds
    assert kinds["stop_alerts"] == 1 and kinds["second_writer"] == 1
    assert counts["acknowledged"] == counts["records"], "every record in the topic was acknowledged to the producer"
    # the run exercised every path the verdict covers
    assert all(counts[table] > 0 for table in ("quarantine", "duplicates", "late", "samples", "escalations")), counts
