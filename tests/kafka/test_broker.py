"""The local Kafka broker: one that cannot start is one clear error, and leaves no process behind."""

import socket

import pytest

from sensorcep.local import broker


def test_a_broker_that_cannot_start_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SENSORCEP_BROKER_HEAP", "not-a-size")  # the JVM refuses to start
    with socket.socket() as probe:  # a free port: not the session's broker, nor the fault test's beside it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(broker.BrokerError, match="could not format|exited during start"):
        broker.up(f"127.0.0.1:{port}", tmp_path / "broker")
    assert not broker.is_running(tmp_path / "broker")
