"""The local Kafka broker: ``noida-db`` (PyPI) as a background process, data under ``.broker/``."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .settings import PROJECT_ROOT

DEFAULT_DATA_DIR = PROJECT_ROOT / ".broker"


class BrokerError(RuntimeError):
    pass


def _noida() -> str:
    exe = Path(sys.executable).with_name("noida-db")
    found = str(exe) if exe.exists() else shutil.which("noida-db")
    if not found:
        raise BrokerError("noida-db is not installed in this environment: run `make venv` first")
    return found


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _split(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host or "127.0.0.1", int(port)


def _run(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_noida(), *args, "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60)


def is_running(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    """Is our broker (the one whose data lives in ``data_dir``) up?"""
    if not (Path(data_dir) / "noida.control.json").exists():
        return False
    out = _run("status", data_dir=Path(data_dir)).stdout
    return any("kafka" in line and "✔" in line for line in out.splitlines())


def wait_until_ready(bootstrap: str, timeout: float = 30.0) -> None:
    """Block until the broker answers a metadata request."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
            return
        except Exception as exc:  # KafkaException while the broker starts
            last = exc
            time.sleep(0.2)
    raise BrokerError(f"the Kafka broker at {bootstrap} did not answer within {timeout:.0f} s ({last})")


def up(bootstrap: str = "127.0.0.1:9092", data_dir: Path = DEFAULT_DATA_DIR) -> str:
    """Start the broker (or reuse ours if it is already up); return its bootstrap address."""
    host, port = _split(bootstrap)
    data_dir = Path(data_dir)
    if is_running(data_dir):
        wait_until_ready(bootstrap)
        return bootstrap
    if _port_open(host, port):
        raise BrokerError(
            f"port {port} on {host} is already in use by another process; stop it or pick another "
            f"address with kafka_bootstrap_servers / SENSORCEP_KAFKA_BOOTSTRAP_SERVERS"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    result = _run("up", "--only", "kafka", "--host", host, "--kafka-port", str(port), data_dir=data_dir)
    if result.returncode != 0:
        log = data_dir / "noida.log"
        tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
        raise BrokerError(f"noida-db failed to start (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()} {' '.join(tail)}")
    wait_until_ready(bootstrap)
    return bootstrap


def down(data_dir: Path = DEFAULT_DATA_DIR) -> None:
    if (Path(data_dir) / "noida.control.json").exists():
        _run("down", data_dir=Path(data_dir))


def status(data_dir: Path = DEFAULT_DATA_DIR) -> str:
    if not (Path(data_dir) / "noida.control.json").exists():
        return "kafka: not running"
    lines = [l.strip() for l in _run("status", data_dir=Path(data_dir)).stdout.splitlines() if "kafka" in l]
    return "\n".join(lines) or "kafka: not running"


def create_topics(bootstrap: str, topics: dict[str, int] | list[str], config: dict | None = None) -> None:
    """Create topics that do not exist yet (a list: one partition each, or name -> partitions).

    Locally use one partition: noida-db 0.2.3 misplaces records of a multi-partition topic once a
    second producer session writes to it (reads split a partition instead, see ``minPartitions``).
    """
    if not isinstance(topics, dict):
        topics = {name: 1 for name in topics}
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka import KafkaError

    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    existing = set(admin.list_topics(timeout=10).topics)
    # simulated events carry old Kafka timestamps: keep them (no time-based retention)
    wanted = [NewTopic(name, n, 1, config={"retention.ms": "-1"}) for name, n in topics.items() if name not in existing]
    if not wanted:
        return
    for name, future in admin.create_topics(wanted).items():
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
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = [name for name in topics if name in admin.list_topics(timeout=10).topics]
    for future in (admin.delete_topics(doomed, operation_timeout=30).values() if doomed else []):
        future.result(timeout=30)


@contextmanager
def scratch_topics(bootstrap: str, topics: list[str]):
    """Topics for one run (benchmarks): created on entry, deleted on exit, so repeated runs leave the broker as
    they found it (a local broker holding dozens of old benchmark topics was measured using ~30% of a core idle)."""
    create_topics(bootstrap, topics)
    try:
        yield topics
    finally:
        delete_topics(bootstrap, topics)
