"""Small platform pieces: the Java and Maven checks, broker start and stop errors, simulator determinism, and the
one-sentence refusals where the runtime lacks a feature (the state reader, transformWithState, real-time mode,
interval triggers on serverless)."""

import socket
from datetime import datetime, timezone

import pytest

from sensorcep.local import broker, simulator
from sensorcep.local.java import JavaMissingError, check_java


def test_missing_java_is_one_clear_sentence(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jdk")
    with pytest.raises(JavaMissingError, match=r"^Java 17 was not found: .*run the command again\.$"):
        check_java()


def test_busy_port_is_a_clear_broker_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(broker.BrokerError, match=f"port {port} .* already in use"):
            broker.up(f"127.0.0.1:{port}", tmp_path / "broker")


def test_simulator_is_deterministic_for_a_seed_and_has_every_kind():
    config = simulator.SimulationConfig(
        events=20_000, devices=100, seed=5, start=datetime(2026, 1, 1, tzinfo=timezone.utc)
    )
    a, b = simulator.generate(config), simulator.generate(config)
    assert a.records.value.tolist() == b.records.value.tolist()
    assert a.records.timestamp_ms.is_monotonic_increasing  # produced in arrival order
    assert {"ontime", "late", "too_late", "duplicate", "malformed"} <= set(a.records.kind)
    assert (a.valid.sensor_freq < 0).any() and len(a.distinct_valid) < len(a.valid)
    other = simulator.generate(simulator.SimulationConfig(events=20_000, devices=100, seed=6, start=config.start))
    assert other.records.value.tolist() != a.records.value.tolist()


def test_broker_down_leaves_a_process_alone_whose_pid_was_recycled(tmp_path):
    import os

    (tmp_path / "broker.pid").write_text(f"{os.getpid()} 12345.0")  # our pid, another start time
    assert broker.pid(tmp_path) is None
    assert broker.down(tmp_path) is False  # and this test process is still alive to say so


def test_missing_maven_is_one_clear_sentence(monkeypatch):
    from sensorcep.local import jars

    monkeypatch.setattr(jars, "is_current", lambda: False)  # the jars would have to be fetched
    monkeypatch.setattr(jars.shutil, "which", lambda name: None)
    with pytest.raises(jars.JarsError, match=r"^Apache Maven \(`mvn`\) was not found: install Maven 3\.8\+"):
        jars.fetch(quiet=True)


# ------------------------------------------------------------------------------ compute kinds (no JVM)
class FakeConf:
    def __init__(self, values: dict[str, str], refuse: bool = False):
        self.values, self.refuse = values, refuse

    def get(self, key, default=None):
        if self.refuse:  # serverless refuses the cluster usage tags (CONFIG_NOT_AVAILABLE)
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")
        return self.values.get(key, default)


class FakeSession:
    """Stands in for the SparkSession of a Databricks workspace, which cannot run here: only ``conf.get``."""

    def __init__(self, conf: dict[str, str] | None = None, refuse: bool = False):
        self.conf = FakeConf(conf or {}, refuse)


class FakeConnectSession(FakeSession):
    """The same, as a Spark Connect session (standard access mode and serverless run user code over Spark Connect)."""

    __module__ = "pyspark.sql.connect.session"


class FakeWriter:
    """Stands in for a Spark Connect ``DataStreamWriter`` (its session is ``_session``): records the trigger it gets;
    open-source Spark Connect 4.1 takes no ``realTime`` keyword."""

    def __init__(self, session):
        self._session, self.triggered = session, None

    def trigger(self, *, processingTime=None, once=None, continuous=None, availableNow=None):
        self.triggered = {"processingTime": processingTime, "availableNow": availableNow}
        return self


def on_databricks(monkeypatch, version: str, serverless_flag: str | None = None) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", version)
    if serverless_flag is None:
        monkeypatch.delenv("IS_SERVERLESS", raising=False)
    else:
        monkeypatch.setenv("IS_SERVERLESS", serverless_flag)


MODE = "spark.databricks.clusterUsageTags.dataSecurityMode"


def test_compute_kind_is_read_from_the_runtime_version_the_access_mode_and_the_session(monkeypatch):
    """Each signal of runtime.compute_kind, on fake sessions standing in for a workspace, which cannot run here."""
    from sensorcep.runtime import compute_kind

    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    assert compute_kind(FakeSession()) == "local"
    on_databricks(monkeypatch, "client.4.9")  # a serverless environment version
    assert compute_kind(FakeConnectSession(refuse=True)) == "serverless"
    on_databricks(monkeypatch, "17.3", serverless_flag="TRUE")
    assert compute_kind(FakeConnectSession(refuse=True)) == "serverless"
    on_databricks(monkeypatch, "17.3")
    assert compute_kind(FakeConnectSession({MODE: "USER_ISOLATION"})) == "standard"
    assert compute_kind(FakeSession({MODE: "DATA_SECURITY_MODE_STANDARD"})) == "standard"  # the tag wins
    assert compute_kind(FakeConnectSession({MODE: "SINGLE_USER"})) == "dedicated"
    assert compute_kind(FakeConnectSession(refuse=True)) == "standard"  # no readable tag: Spark Connect
    assert compute_kind(FakeSession()) == "dedicated"  # no tag: the classic architecture


def test_the_state_reader_on_serverless_stops_05_with_one_sentence(monkeypatch, tmp_path):
    """05's state cells (reports.state_metadata, sampling.state_chunks) on a fake serverless session, standing in for
    a Databricks workspace, which cannot run here: the sentence comes before Spark is asked (the fake has no read)."""
    from sensorcep.observability import reports
    from sensorcep.pipeline import sampling
    from sensorcep.runtime import ComputeFeatureError
    from sensorcep.settings import Settings

    on_databricks(monkeypatch, "client.4.9")
    settings = Settings(base_path=str(tmp_path))
    sentence = (
        r"^the state reader \(Spark's state-metadata and statestore sources\) is not available on serverless "
        r"compute: read the operator state on the bundle's job clusters \(dedicated, Databricks Runtime 17\.3\) or "
        r"other classic compute, or skip these cells\.$"
    )
    with pytest.raises(ComputeFeatureError, match=sentence):
        reports.state_metadata(FakeConnectSession(refuse=True), settings, "sampling")
    with pytest.raises(ComputeFeatureError, match=sentence):
        sampling.state_chunks(FakeConnectSession(refuse=True), settings)


def test_the_state_reader_on_standard_access_mode_before_16_3_is_one_sentence(monkeypatch, tmp_path):
    """A fake standard-access-mode session on Databricks Runtime 16.2 stands in for a workspace, which cannot run
    here."""
    from sensorcep.observability import reports
    from sensorcep.runtime import ComputeFeatureError
    from sensorcep.settings import Settings

    on_databricks(monkeypatch, "16.2")
    with pytest.raises(
        ComputeFeatureError,
        match=r"^the state reader \(Spark's state-metadata and statestore sources\) needs Databricks Runtime 16\.3 "
        r"or above on standard access mode compute, and this one runs 16\.2: use a newer runtime, e\.g\. the "
        r"bundle's job clusters \(dedicated, Databricks Runtime 17\.3\)\.$",
    ):
        reports.state_variable(
            FakeConnectSession({MODE: "USER_ISOLATION"}), Settings(base_path=str(tmp_path)), "s", "v"
        )


def test_transform_with_state_on_an_old_runtime_stops_sampling_and_device_activity_with_one_sentence(monkeypatch):
    """02's two stateful queries on a fake dedicated session of Databricks Runtime 15.4 (standing in for a workspace,
    which cannot run here) stop before their plan is built (the fake events frame has nothing but its session)."""
    from types import SimpleNamespace

    from sensorcep.pipeline import device_activity, sampling
    from sensorcep.runtime import ComputeFeatureError
    from sensorcep.settings import Settings

    on_databricks(monkeypatch, "15.4")
    events = SimpleNamespace(sparkSession=FakeSession({MODE: "SINGLE_USER"}))
    sentence = (
        r"^transformWithStateInPandas \(02's sampling and device activity\) needs Databricks Runtime 16\.2 or above "
        r"on dedicated compute, and this one runs 15\.4: use a newer runtime, e\.g\. the bundle's job clusters "
        r"\(dedicated, Databricks Runtime 17\.3\)\.$"
    )
    with pytest.raises(ComputeFeatureError, match=sentence):
        sampling.sample_stream(events, Settings())
    with pytest.raises(ComputeFeatureError, match=sentence):
        device_activity.status_stream(events, Settings())
    on_databricks(monkeypatch, "client.4.9")  # serverless has it
    from sensorcep.runtime import TRANSFORM_WITH_STATE, missing

    assert missing(TRANSFORM_WITH_STATE, FakeConnectSession(refuse=True)) is None


def test_an_interval_trigger_on_serverless_is_one_sentence_and_available_now_runs(monkeypatch):
    """runtime.set_trigger, where every query's trigger is applied, on a fake serverless session and writer (standing
    in for a Databricks workspace, which cannot run here)."""
    from sensorcep.runtime import ComputeFeatureError, set_trigger

    on_databricks(monkeypatch, "client.4.9")
    writer = FakeWriter(FakeConnectSession(refuse=True))
    with pytest.raises(
        ComputeFeatureError,
        match=r"^a processing-time trigger \(an interval such as trigger='10 seconds'; only availableNow runs there\) "
        r"is not available on serverless compute: set trigger and alerts_trigger to availableNow, or run the "
        r"always-on job \(sensor_cep_streaming\) on the bundle's job clusters \(dedicated, Databricks Runtime "
        r"17\.3\)\.$",
    ):
        set_trigger(writer, {"processingTime": "10 seconds"})
    assert writer.triggered is None
    assert set_trigger(writer, {"availableNow": True}).triggered["availableNow"] is True


def test_real_time_mode_where_it_is_missing_off_or_too_old_is_one_sentence(monkeypatch):
    """The alert query's real-time trigger on fake serverless, standard and dedicated sessions (standing in for a
    Databricks workspace, which cannot run here)."""
    from sensorcep.runtime import RealTimeUnavailableError, set_trigger

    realtime = {"realTime": "5 seconds"}
    on_databricks(monkeypatch, "client.4.9")
    with pytest.raises(
        RealTimeUnavailableError,
        match=r"^real-time mode \(alerts_trigger=realtime\) is not available on serverless compute: set alerts_trigger "
        r"to availableNow \(serverless runs no interval triggers either\), or run the alert query on the always-on "
        r"job's realtime_cluster\.$",
    ):
        set_trigger(FakeWriter(FakeConnectSession(refuse=True)), realtime)
    on_databricks(monkeypatch, "17.3")
    with pytest.raises(
        RealTimeUnavailableError,
        match=r"^real-time mode \(alerts_trigger=realtime\) is off on this standard access mode compute "
        r"\(spark\.databricks\.streaming\.realTimeMode\.enabled is not true\): set alerts_trigger to availableNow "
        r"or an interval, or run the alert query on the always-on job's realtime_cluster, which turns it on\.$",
    ):
        set_trigger(FakeWriter(FakeConnectSession({MODE: "USER_ISOLATION"})), realtime)
    on_databricks(monkeypatch, "16.3")
    with pytest.raises(
        RealTimeUnavailableError,
        match=r"^real-time mode \(alerts_trigger=realtime\) needs Databricks Runtime 16\.4 or above on dedicated "
        r"compute, and this one runs 16\.3: use a newer runtime, e\.g\. the bundle's job clusters \(dedicated, "
        r"Databricks Runtime 17\.3\)\.$",
    ):
        set_trigger(FakeWriter(FakeSession({MODE: "SINGLE_USER", REALTIME: "true"})), realtime)


REALTIME = "spark.databricks.streaming.realTimeMode.enabled"


def test_locally_no_feature_is_refused_and_open_source_connect_real_time_is_one_sentence(monkeypatch):
    """Locally every feature is there; real-time mode through an open-source Spark Connect writer (no ``realTime``
    keyword, session kept as ``_session``) is the sentence, not an AttributeError."""
    from sensorcep import runtime

    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    features = [runtime.REAL_TIME_MODE, runtime.PROCESSING_TIME_TRIGGERS, runtime.STATE_READER]
    assert [runtime.missing(f, FakeConnectSession()) for f in [*features, runtime.TRANSFORM_WITH_STATE]] == [None] * 4
    with pytest.raises(runtime.RealTimeUnavailableError, match=r"open-source Spark Connect session has neither"):
        runtime.set_trigger(FakeWriter(FakeConnectSession()), {"realTime": "5 seconds"})
