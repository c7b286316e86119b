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


def key() -> str:
    """What the archive is bound to: the JDK (``java -version``), the pyspark wheel and its jars."""
    jdk = subprocess.run([check_java(), "-version"], capture_output=True, text=True).stderr.strip()
    jars = sorted(jar.name for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    digest = hashlib.sha256("\n".join([jdk, pyspark.__version__, *jars]).encode())
    return digest.hexdigest()


def is_current() -> bool:
    return ARCHIVE.exists() and KEY.exists() and KEY.read_text().strip() == key()


def java_options() -> str:
    """The JVM options that start a local session from the archive; empty when there is none or it is switched off."""
    if os.environ.get(SWITCH_ENV) == "off" or not ARCHIVE.exists():
        return ""
    return USE.format(archive=ARCHIVE)


def build(quiet: bool = False) -> bool:
    """Build the archive unless the current one fits this JDK and wheel. Returns True if it was built."""
    if is_current():
        return False
    if not quiet:
        print(f"building the Spark JVM's class archive ({ARCHIVE.name}, once: about a minute) ...", flush=True)
    ARCHIVE.unlink(missing_ok=True)
    made = ARCHIVE.with_suffix(".jsa.part")
    made.unlink(missing_ok=True)
    options = f"{os.environ.get('SENSORCEP_JVM_OPTIONS', '')} -XX:ArchiveClassesAtExit={made} -Xlog:cds=off"
    env = {**os.environ, SWITCH_ENV: "off", "SENSORCEP_JVM_OPTIONS": options.strip()}
    result = subprocess.run(
        [sys.executable, "-m", "sensorcep.local.class_archive"], env=env, capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0 or not made.exists():
        # an optimisation only: say why, and let every session start without it
        print(f"the class archive was not built (sessions start without it): {result.stderr.strip()[-500:]}")
        return False
    made.replace(ARCHIVE)
    KEY.write_text(key())
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
