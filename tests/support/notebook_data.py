"""The events the notebooks run on in the test session: produced once by ``tests/conftest.py`` to the notebooks'
topic, and generated again (the simulator is deterministic for a seed) by the tests that check what the notebooks
wrote (``tests/e2e/test_notebook_tables.py``)."""

from datetime import datetime, timezone

NOTEBOOK_START = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def notebook_simulation():
    from sensorcep.local import simulator

    return simulator.generate(
        simulator.SimulationConfig(events=6_000, devices=50, seed=7, start=NOTEBOOK_START, rate=50)
    )
