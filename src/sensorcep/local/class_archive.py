"""A class-data-sharing archive of the local Spark JVM: every fresh local session starts from classes already parsed
and verified, instead of reading them again out of the ~300 jars of the pyspark wheel.

Each notebook kernel, job run, crash test and fault-test run starts a JVM of its own; ``benchmarks/cold_start.py``
measures what that costs with and without this archive (the JDK's AppCDS, ``-XX:SharedArchiveFile``:
docs/decisions/0021-cold-starts-and-py4j.md). ``python -m sensorcep jars`` (``make jars``) builds it once
into ``.jars/``: a JVM runs a small warm-up (a session, a Spark job, a Delta write and read, a streaming query) and
dumps the classes it loaded as it exits. The archive is bound to the JDK and to the pyspark wheel it was built with
(their names are its key); with another JDK or wheel the JVM ignores it (``-Xshare:auto``) and only starts slower, and
the next ``make jars`` builds it again. On Databricks nothing here is used.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from sensorcep.local.jars import JARS_DIR
from sensorcep.local.java import check_java
from sensorcep.runtime import get_spark

ARCHIVE = JARS_DIR / "spark-classes.jsa"
KEY = JARS_DIR / "spark-classes.key"
#: the archive, if the JVM takes it (else it runs without: a warning it would print is switched off)
USE = "-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
#: ``off``: sessions start without the archive (the JVM that dumps it; ``benchmarks/cold_start.py``'s baseline)
SWITCH_ENV = "SENSORCEP_CLASS_ARCHIVE"
#: what the JVM that dumps the archive does not inherit: it must start a classic local session
NOT_INHERITED = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SENSORCEP_CONNECT_SERVER_PORT")


def key() -> str:
    """What the archive is bound to: the JDK (``java -version``), the pyspark wheel and each of its jars' name, size
    and modification time (the JVM refuses an archive whose class path jars changed, e.g. in a recreated ``.venv``)."""
    jdk = subprocess.run([check_java(), "-version"], capture_output=True, text=True).stderr.strip()
    jars = sorted(
        f"{jar.name} {jar.stat().st_size} {jar.stat().st_mtime_ns}"
        for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    )
    digest = hashlib.sha256("\n".join([jdk, pyspark.__version__, *jars]).encode())
    return digest.hexdigest()


def is_current() -> bool:
    return ARCHIVE.exists() and KEY.exists() and KEY.read_text().strip() == key()


def usable_path(path: Path) -> bool:
    """Spark's launcher splits the driver's JVM options on white space: a path with a space cannot be one."""
    return not any(c.isspace() for c in str(path))


def java_options() -> str:
    """The JVM options that start a local session from the archive; empty when there is none, it is switched off, or
    its path holds a space. They go before the user's own (``SENSORCEP_JVM_OPTIONS``), whose flags then win."""
    if os.environ.get(SWITCH_ENV) == "off" or not ARCHIVE.exists() or not usable_path(ARCHIVE):
        return ""
    return USE.format(archive=ARCHIVE)


def build(quiet: bool = False) -> bool:
    """Build the archive unless the current one fits this JDK and wheel. Returns True if it was built. It is an
    optimisation only: when it cannot be built, one line says why and every session starts without it."""
    if is_current():
        return False
    if not usable_path(ARCHIVE):
        print(f"no class archive: its folder's path holds a space, which a JVM option cannot ({ARCHIVE.parent})")
        return False
    if not quiet:
        print(f"building the Spark JVM's class archive ({ARCHIVE.name}, once: about a minute) ...", flush=True)
    ARCHIVE.unlink(missing_ok=True)
    made = ARCHIVE.with_suffix(f".jsa.{os.getpid()}.part")  # two builds at once each dump a file of their own
    options = f"-XX:ArchiveClassesAtExit={made} {os.environ.get('SENSORCEP_JVM_OPTIONS', '')}"
    # a classic session of its own: not a Spark Connect client, not a Connect server
    env = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    env |= {SWITCH_ENV: "off", "SENSORCEP_JVM_OPTIONS": options.strip()}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sensorcep.local.class_archive"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0 or not made.exists():
            raise RuntimeError(result.stderr.strip()[-500:] or f"exit {result.returncode}, no archive written")
        made.replace(ARCHIVE)
        KEY.write_text(key())
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        made.unlink(missing_ok=True)
        print(f"the class archive was not built (sessions start without it): {exc}")
        return False
    if not quiet:
        print(f"class archive ready: {ARCHIVE} ({ARCHIVE.stat().st_size / 1e6:.0f} MB)", flush=True)
    return True


def _warm_up() -> None:
    """What every local session does first: start, run a job, write and read Delta, run a streaming query."""
    spark = get_spark()
    with tempfile.TemporaryDirectory(prefix="sensorcep-class-archive-") as folder:
        table, copy = f"{folder}/table", f"{folder}/copy"
        frame = spark.createDataFrame([("d1", 1.0), ("d2", -1.0)], "device_id string, sensor_freq double")
        frame.write.format("delta").save(table)
        spark.read.format("delta").load(table).groupBy("device_id").count().collect()
        query = (
            spark.readStream.format("delta")
            .load(table)
            .writeStream.format("delta")
            .option("checkpointLocation", f"{folder}/checkpoint")
            .trigger(availableNow=True)
            .start(copy)
        )
        query.awaitTermination()
    spark.stop()  # the JVM dumps the archive as it exits


if __name__ == "__main__":
    _warm_up()
