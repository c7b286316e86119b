"""The local Kafka broker: Apache Kafka itself, one KRaft node (broker + controller) as a background JVM.

Everything lives under one folder (default ``.broker/``): ``server.properties``, the log directory
``data/`` (formatted with Kafka's storage tool on first start), ``broker.out`` (the JVM's console),
``broker.pid``. ``down`` stops exactly the process recorded there (pid *and* start time must match).
The jars come from ``jvm/pom.xml`` (``.jars/broker``), the heap is bounded (``SENSORCEP_BROKER_HEAP``,
default 512 MB): Spark and the broker share two cores here.

The local broker keeps records until the folder is deleted (``log.retention.ms=-1``): simulated and test
events carry historic Kafka timestamps (``CreateTime``), which time-based retention would delete at its
next check. A production cluster keeps its own retention; nothing here sets topic configs on it.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import psutil
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from sensorcep.errors import SensorCepError
from sensorcep.local.jars import broker_classpath
from sensorcep.local.java import check_java
from sensorcep.settings import LOCAL_BROKER, PROJECT_ROOT

DEFAULT_DATA_DIR = PROJECT_ROOT / ".broker"
DEFAULT_PARTITIONS = 2
START_TIMEOUT_S = 90.0


class BrokerError(SensorCepError, RuntimeError):
    pass


def _split(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host or "127.0.0.1", int(port)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _java() -> str:

    return check_java()


def _properties(data_dir: Path, host: str, port: int, controller_port: int) -> str:
    return "\n".join(
        [
            "# written by `python -m sensorcep broker up`: a one-node KRaft cluster for the local twin",
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers={host}:{controller_port}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={data_dir / 'data'}",
            f"num.partitions={DEFAULT_PARTITIONS}",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "# historic CreateTime timestamps (simulated data) must not be deleted by time retention (see the module)",
            "log.retention.ms=-1",
            "# two cores shared with Spark: few threads",
            "num.network.threads=2",
            "num.io.threads=2",
            "background.threads=2",
            "num.recovery.threads.per.data.dir=1",
            "log.cleaner.threads=1",
            "",
        ]
    )


def _log4j(data_dir: Path) -> Path:
    path = data_dir / "log4j2.properties"
    path.write_text(
        "\n".join(
            [
                "rootLogger.level = WARN",
                "rootLogger.appenderRef.console.ref = console",
                "appender.console.type = Console",
                "appender.console.name = console",
                "appender.console.layout.type = PatternLayout",
                "appender.console.layout.pattern = [%d] %p %m (%c)%n",
                "logger.server.name = kafka.server.KafkaRaftServer",
                "logger.server.level = INFO",
                "",
            ]
        )
    )
    return path


#: the broker JVM's collector and JIT options (``SENSORCEP_BROKER_JVM_OPTIONS`` replaces them: the test suite's
#: brokers run the first JIT tier only with the serial collector, as its short-lived Spark JVMs do)
BROKER_JVM_OPTIONS = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20"


def _java_command(data_dir: Path, main: str, *args: str) -> list[str]:
    heap = os.environ.get("SENSORCEP_BROKER_HEAP", "512m")
    return [
        _java(),
        f"-Xmx{heap}",
        "-Xms128m",
        *(os.environ.get("SENSORCEP_BROKER_JVM_OPTIONS") or BROKER_JVM_OPTIONS).split(),
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={_log4j(data_dir)}",
        "-cp",
        broker_classpath(),
        main,
        *args,
    ]


def _format_storage(data_dir: Path, properties: Path) -> None:
    """Kafka's storage tool, once: a new cluster id, this node as the standalone controller."""
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    result = subprocess.run(
        _java_command(
            data_dir,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",  # one argument: a random id may start with "-" (argparse: a flag)
            "--config",
            str(properties),
            "--standalone",
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise BrokerError(
            f"Kafka's storage tool could not format {data_dir / 'data'}: "
            f"{(result.stderr or result.stdout).strip()[-500:]}"
        )


# ------------------------------------------------------------------------------ our process
def _pid_file(data_dir: Path) -> Path:
    return Path(data_dir) / "broker.pid"


def _started_at(pid: int) -> float | None:

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def pid(data_dir: Path = DEFAULT_DATA_DIR) -> int | None:
    """The pid of the broker started from ``data_dir``, if that very process is still alive."""
    path = _pid_file(data_dir)
    if not path.exists():
        return None
    try:
        recorded, started = path.read_text().split()
        recorded_pid, started_at = int(recorded), float(started)
    except ValueError:
        return None
    now = _started_at(recorded_pid)
    return recorded_pid if now is not None and abs(now - started_at) < 1.0 else None  # not a recycled pid


def is_running(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    return pid(data_dir) is not None


def _console_tail(data_dir: Path, lines: int = 6) -> str:
    out = Path(data_dir) / "broker.out"
    if not out.exists():
        return ""
    wanted = [line for line in out.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(wanted[-lines:])


def wait_until_ready(
    bootstrap: str,
    timeout: float = START_TIMEOUT_S,
    process: subprocess.Popen | None = None,
    data_dir: Path | None = None,
) -> None:
    """Block until the broker answers a metadata request (or its process has died: then say why)."""

    deadline = time.monotonic() + timeout
    last = None
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000, "log_level": 0}
    )  # "connection refused" is expected while the broker starts
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(
                f"the Kafka broker exited during start (code {process.returncode}): "
                f"{_console_tail(data_dir) if data_dir else ''}"
            )
        try:
            metadata = admin.list_topics(timeout=2)
            if metadata.brokers:
                return
        except Exception as exc:  # KafkaException while the broker starts
            last = exc
        time.sleep(0.2)
    raise BrokerError(f"the Kafka broker at {bootstrap} did not answer within {timeout:.0f} s ({last})")


def up(bootstrap: str = LOCAL_BROKER, data_dir: Path = DEFAULT_DATA_DIR) -> str:
    """Start the broker (or reuse ours if it is already up); return its bootstrap address."""
    host, port = _split(bootstrap)
    data_dir = Path(data_dir).resolve()
    if is_running(data_dir):
        wait_until_ready(bootstrap)
        return bootstrap
    if _port_open(host, port):
        raise BrokerError(
            f"port {port} on {host} is already in use by another process; stop it or pick another "
            f"address with kafka_bootstrap_servers / SENSORCEP_KAFKA_BOOTSTRAP_SERVERS"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    properties = data_dir / "server.properties"
    formatted = (data_dir / "data" / "meta.properties").exists()
    if formatted:  # keep the controller port the storage was formatted with
        controller_port = int(
            properties.read_text().split("controller.quorum.bootstrap.servers=")[1].split()[0].rpartition(":")[2]
        )
    else:
        controller_port = _free_port(host)
    properties.write_text(_properties(data_dir, host, port, controller_port))
    if not formatted:
        _format_storage(data_dir, properties)
    with open(data_dir / "broker.out", "ab") as console:
        process = subprocess.Popen(
            _java_command(data_dir, "kafka.Kafka", str(properties)),
            stdout=console,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _pid_file(data_dir).write_text(f"{process.pid} {_started_at(process.pid)}")
    try:
        wait_until_ready(bootstrap, process=process, data_dir=data_dir)
    except BrokerError:
        if process.poll() is None:
            process.kill()
        _pid_file(data_dir).unlink(missing_ok=True)
        raise
    return bootstrap


def down(data_dir: Path = DEFAULT_DATA_DIR, timeout: float = 60.0) -> bool:
    """Stop our broker (SIGTERM, a clean shutdown; SIGKILL after ``timeout``). False if it was not running."""
    found = pid(data_dir)
    if found is None:
        _pid_file(data_dir).unlink(missing_ok=True)  # a stale record (the process is gone or the pid was reused)
        return False

    process = psutil.Process(found)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(10)
    _pid_file(data_dir).unlink(missing_ok=True)
    return True


def kill(data_dir: Path = DEFAULT_DATA_DIR) -> None:
    """``kill -9`` our broker (crash tests): no clean shutdown, the next ``up`` recovers its logs."""
    found = pid(data_dir)
    if found is None:
        raise BrokerError(f"no broker of ours runs from {data_dir}")

    process = psutil.Process(found)
    process.kill()
    process.wait(10)


def status(data_dir: Path = DEFAULT_DATA_DIR) -> str:
    found = pid(data_dir)
    if found is None:
        return "kafka: not running"
    props = (Path(data_dir) / "server.properties").read_text()
    listener = props.split("listeners=PLAINTEXT://")[1].split(",")[0]
    return f"kafka: running (pid {found}) at {listener}, data in {Path(data_dir).resolve() / 'data'}"


# ------------------------------------------------------------------------------ topics
def create_topics(
    bootstrap: str, topics: dict[str, int] | list[str], config: dict | None = None, partitions: int = DEFAULT_PARTITIONS
) -> None:
    """Create topics that do not exist yet (a list: ``partitions`` each, or name -> partitions)."""
    if not isinstance(topics, dict):
        topics = {name: partitions for name in topics}

    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = [NewTopic(name, n, 1) for name, n in topics.items() if name not in existing]
    if not wanted:
        return
    for future in admin.create_topics(wanted).values():
        try:
            future.result(timeout=30)
        except Exception as exc:
            if getattr(exc.args[0], "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not set(topics) <= set(admin.list_topics(timeout=5).topics):
        time.sleep(0.1)


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Delete topics (those that do not exist are ignored)."""

    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = [name for name in topics if name in admin.list_topics(timeout=10).topics]
    for future in admin.delete_topics(doomed, operation_timeout=30).values() if doomed else []:
        future.result(timeout=30)


@contextmanager
def scratch_topics(bootstrap: str, topics: list[str], partitions: int = DEFAULT_PARTITIONS):
    """Topics for one run (benchmarks): created on entry, deleted on exit, so repeated runs leave the broker as
    they found it."""
    create_topics(bootstrap, topics, partitions=partitions)
    try:
        yield topics
    finally:
        delete_topics(bootstrap, topics)
