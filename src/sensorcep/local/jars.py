"""The local twin's JVM dependencies: fetched once with Maven, pinned in ``jvm/pom.xml``.

* ``.jars/spark/``  Spark's Kafka connector and Delta Lake, on the local SparkSession's classpath;
* ``.jars/broker/`` Apache Kafka, the classpath of the local broker.

``python -m sensorcep jars`` (``make jars``, a step of ``make demo`` and ``make test``) copies them from Maven
Central through Maven's own
cache (``~/.m2``); a stamp (the hash of the poms) makes every later run a no-op without starting Maven.
On Databricks nothing here is used: the runtime ships both connectors.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark

from sensorcep.errors import SensorCepError
from sensorcep.settings import PROJECT_ROOT

JVM_DIR = PROJECT_ROOT / "jvm"
JARS_DIR = PROJECT_ROOT / ".jars"
STAMP = JARS_DIR / ".pom-sha256"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


class JarsError(SensorCepError, RuntimeError):
    """The JVM dependencies are missing or could not be fetched (one sentence on what to do)."""


def _poms_digest() -> str:
    digest = hashlib.sha256()
    for pom in sorted(JVM_DIR.rglob("*.xml")):
        digest.update(pom.relative_to(JVM_DIR).as_posix().encode() + b"\0" + pom.read_bytes())
    return digest.hexdigest()


def is_current() -> bool:
    return STAMP.exists() and STAMP.read_text().strip() == _poms_digest()


def fetch(quiet: bool = False) -> bool:
    """Copy the pinned jars into ``.jars/`` unless they are there already. Returns True if Maven ran."""
    if is_current():
        return False
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError(
            "Apache Maven (`mvn`) was not found: install Maven 3.8+ (e.g. `apt-get install maven`), "
            "it fetches the pinned Kafka connector, Delta Lake and Kafka broker jars once."
        )
    shutil.rmtree(JARS_DIR, ignore_errors=True)
    env = {**os.environ, "SENSORCEP_MAVEN_MIRROR": os.environ.get("SENSORCEP_MAVEN_MIRROR", MAVEN_CENTRAL)}
    command = [
        mvn,
        "-B",
        "-q",
        "-s",
        str(JVM_DIR / "settings.xml"),
        "-f",
        str(JVM_DIR / "pom.xml"),
        "dependency:copy-dependencies",
    ]
    if not quiet:
        print(f"fetching JVM dependencies (jvm/pom.xml) into {JARS_DIR} ...", flush=True)
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:3]
        raise JarsError(
            "Maven could not fetch the JVM dependencies of jvm/pom.xml: " + " ".join(errors or [result.stderr[-500:]])
        )
    STAMP.write_text(_poms_digest())
    if not quiet:
        print(f"JVM dependencies ready: {sum(1 for _ in JARS_DIR.rglob('*.jar'))} jars", flush=True)
    return True


def _require(folder: str) -> Path:
    path = JARS_DIR / folder
    if not is_current() or not any(path.glob("*.jar")):
        raise JarsError(
            f"the JVM dependencies in {path} are missing or older than jvm/pom.xml: "
            "run `make jars` (or `python -m sensorcep jars`)"
        )
    return path


def _artifact(jar: Path) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``: the name without its version."""
    parts = jar.stem.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def spark_jars() -> list[str]:
    """Connector jars for ``spark.jars``, minus libraries the pyspark wheel already ships (Spark's own win)."""

    bundled = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(jar) for jar in _require("spark").glob("*.jar") if _artifact(jar) not in bundled)


def broker_classpath() -> str:
    return str(_require("broker") / "*")


def pinned_version(name: str) -> str:
    """A version property of ``jvm/pom.xml`` (e.g. ``delta.version``)."""

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = ET.parse(JVM_DIR / "pom.xml").getroot().find(f"m:properties/m:{name}", ns)
    if found is None:
        raise KeyError(name)
    return found.text.strip()
