"""The fault test's plans (``tests/support/nemesis.py``): what ``make test``'s run and ``make nightly``'s visit, checked
before a JVM starts (the fault test itself then fails on a planned point not reached)."""

from collections import Counter

import pytest
from support.nemesis import RESET, SUITE, WRITES, suite_plan

SEEDS = [20261126, 7, 1, 2, 3]


def _writes(actions) -> list[tuple[str, str, str]]:
    points = [action.arg.split(":") for action in actions if action.kind == "point"]
    return [(side, query, table) for side, query, table, *_ in points if side in ("before", "after")]


@pytest.mark.parametrize("seed", SEEDS)
def test_make_tests_plan_kills_each_writing_query_once_in_a_write_of_its_own_on_both_sides(seed):
    writes = _writes(suite_plan(seed))
    assert sorted(query for _, query, _ in writes) == sorted({query for query, _ in WRITES})
    assert {side for side, _, _ in writes} == {"before", "after"}
    assert all((query, table) in WRITES for _, query, table in writes)


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
