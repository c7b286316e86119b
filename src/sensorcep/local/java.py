"""The JDK the local twin runs on: Spark 4 and the local broker need Java 17 or newer."""

from __future__ import annotations

import os
import shutil
import subprocess

from sensorcep.errors import SensorCepError


class JavaMissingError(SensorCepError, RuntimeError):
    pass


def check_java() -> str:
    """Return the java executable or raise one clear sentence."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaMissingError(
            "Java 17 was not found: install a JDK 17 (e.g. `apt-get install openjdk-17-jre-headless`) "
            "or set JAVA_HOME, then run the command again."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    if '"1.' in out or not any(f'"{v}' in out for v in ("17", "18", "19", "20", "21", "22", "23", "24", "25")):
        raise JavaMissingError(f"Spark 4 needs Java 17 or newer; {java} reports: {out.splitlines()[0] if out else '?'}")
    return java
