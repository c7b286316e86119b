"""A foreachBatch function's error when its query's stop interrupts it mid-batch, as Py4J raises it: the unit tests
of :mod:`sensorcep.pipeline.interruptions` and the spark tier's check against Spark's own expression share it."""


class Py4JJavaError(Exception):
    """Stands in for py4j's own (whose text comes from the JVM): the same name in a traceback."""


Py4JJavaError.__module__ = "py4j.protocol"

#: a Java stack trace as a Delta write interrupted by a stop prints it: about 150 KB
JAVA_TRACE = "".join(f"\tat org.apache.spark.sql.delta.Frame{i}.write(Frame{i}.scala:{i})\n" for i in range(2_500))


def interrupted() -> Py4JJavaError:
    """The error of a foreachBatch function whose Delta write a stop interrupted."""
    return Py4JJavaError("An error occurred while calling o123.save.\n: java.lang.InterruptedException\n" + JAVA_TRACE)


def raising(error: Exception):
    """A foreachBatch function that raises ``error``."""

    def function(batch, batch_id):
        raise error

    return function
