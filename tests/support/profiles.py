"""How long the suite looks: ``make test`` runs a few examples of each streaming property (each example is a
streaming query of its own, seconds each), ``make nightly`` (``SENSORCEP_NIGHTLY=1``) the full counts; and the
JVM options the suite's JVMs run with (``tests/conftest.py`` sets them, ``benchmarks/fault_points.py`` measures with
them)."""

import os

NIGHTLY = os.environ.get("SENSORCEP_NIGHTLY") == "1"
#: ``make extended`` (``SENSORCEP_EXTENDED=1``): only the tests ``make test`` leaves out (decision 0063)
EXTENDED = os.environ.get("SENSORCEP_EXTENDED") == "1"


def examples(nightly: int, suite: int = 2) -> int:
    """Hypothesis ``max_examples`` for a streaming property: ``nightly`` in ``make nightly``, ``suite`` otherwise."""
    return nightly if NIGHTLY else min(suite, nightly)


#: the tests' Spark JVMs start quicker with the first JIT tier only and the serial collector (two spark tests: 114 s
#: -> 90 s). That mode shrinks the JIT's code cache to the client VM's 48 MB, which a long run of the job (the fault
#: test's drain) filled: the JVM then fails to link a method handle ("NoSuchMethodException: ... linkToStatic"), so
#: the cache is given Spark's room again; and a larger thread stack for the first tier's larger frames
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m -Xss4m"
#: ``make test`` evaluates Spark's expressions and plans interpreted, as Spark's own suites run each expression test in
#: that mode too (``spark.sql.codegen.factoryMode=NO_CODEGEN``): the tests' data is small, so compiling generated code
#: (Janino: 22% of a test JVM's CPU) costs more than it saves (the spark tier's sampling and device-activity tests:
#: 227 s -> 181 s). Spark reads ``spark.*`` Java system properties as confs, so every test JVM (notebook kernels, job
#: subprocesses, the fault test's job) gets them. ``make nightly``, ``make demo`` and the benchmarks run generated code,
#: the product's default, but ``benchmarks/fault_points.py``, which measures what the suite pays (decision 0022)
INTERPRETED = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"
#: the workers' own sessions live the whole run (about 25 minutes): they keep the JIT's optimising tier (C2), whose
#: code pays back over that time; the short-lived JVMs (job subprocesses, the notebooks' kernels) start quicker with C1
WORKER_JVM_OPTIONS = TEST_JVM_OPTIONS.replace("-XX:TieredStopAtLevel=1 ", "")
#: the brokers too: the first JIT tier, the serial collector (the broker's defaults: G1 and the full JIT)
BROKER_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
