"""Small platform pieces: Java check, broker start errors, simulator determinism, idempotent Delta writes."""

import pytest

from sensorcep.local import broker


def test_a_broker_that_cannot_start_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SENSORCEP_BROKER_HEAP", "not-a-size")  # the JVM refuses to start
    with pytest.raises(broker.BrokerError, match="could not format|exited during start"):
        broker.up("127.0.0.1:19094", tmp_path / "broker")
    assert not broker.is_running(tmp_path / "broker")
