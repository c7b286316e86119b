"""The fault test's plans (``tests/support/nemesis.py``): what ``make extended``'s run and ``make nightly``'s visit,
checked before a JVM starts (the fault test itself then fails on a planned point not reached)."""

from collections import Counter

import pytest
from support.nemesis import RESET, STATEFUL, SUITE, WRITES, killed_query, suite_plan

SEEDS = [20261126, 7, 1, 2, 3]


def _writes(actions) -> list[tuple[str, str, str]]:
    points = [action.arg.split(":") for action in actions if action.kind == "point"]
    return [(side, query, table) for side, query, table, *_ in points if side in ("before", "after")]


@pytest.mark.parametrize("seed", SEEDS)
def test_make_tests_plan_visits_each_kind_once_and_kills_each_writing_query_at_a_point_of_its_own(seed):
    points = [action.arg for action in suite_plan(seed) if action.kind == "point"]
    assert Counter(point.split(":")[0] for point in points) == Counter(["before", "after", *SUITE]), "each kind once"
    assert {query for query, _ in WRITES} <= {killed_query(point) for point in points}
    assert all((query, table) in WRITES for _, query, table in _writes(suite_plan(seed)))
    [state] = [point for point in points if point.startswith("state_commit:")]
    assert killed_query(state) in STATEFUL


def test_a_point_kills_the_query_it_names_or_the_one_writing_the_table_it_names():
    assert killed_query("before:anomalies:anomalies:1") == "anomalies"
    assert killed_query("in_offset_log:device_activity:1") == "device_activity"
    assert killed_query("in_delta_commit:alert_events:1") == "alert_lifecycle"
    assert killed_query("in_delta_checkpoint:bronze_events:1") == "ingest"
    assert killed_query("delta_checkpoint:late_events:1") == "sampling"


@pytest.mark.parametrize("seed", SEEDS)
def test_make_nightlys_plan_kills_every_table_before_and_after_its_commit(seed):
    writes = _writes(suite_plan(seed, every_table=True))
    tables = {table for _, table in WRITES}
    assert Counter((side, table) for side, _, table in writes) == Counter(
        (side, table) for side in ("before", "after") for table in tables
    )


@pytest.mark.parametrize("every_table", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_both_plans_visit_every_other_kind_once_and_reset_sampling_right_after_its_first_sample_commit(
    seed, every_table
):
    actions = suite_plan(seed, every_table)
    points = [action.arg for action in actions if action.kind == "point"]
    assert len(points) == len(set(points)), "no point twice"
    assert Counter(point.split(":")[0] for point in points if point.split(":")[0] in SUITE) == Counter(SUITE.keys())
    reset = next(i for i, action in enumerate(actions) if action.kind == "reset")
    assert actions[reset - 1].arg == f"after:{RESET}:sensor_samples:1" and actions[reset].arg == RESET
    assert [str(action) for action in actions[-4:]] == ["sink", "stop_alerts:1", "second_writer", "broker"]
