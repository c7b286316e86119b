"""A foreachBatch function stopped mid-batch, said so Spark can read it.

``query.stop()`` interrupts the JVM call a running foreachBatch function is in (PySpark's pinned threads). Py4J raises
that in Python as a ``Py4JJavaError`` whose text holds the whole Java stack trace, and Spark tells a stop from a
failure by matching the function's error text with a regular expression (``StreamExecution.PROXY_ERROR``, from
SPARK-39218: ``An error occurred while calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|...)``). Java's
regex engine recurses once per character of that group: a few KB of text overflow the query thread's stack, and every
stop mid-batch (the always-on job restarting a query for new rules, a job cancelled) printed a
``java.lang.StackOverflowError`` of a thousand lines instead of stopping quietly. :func:`stops_cleanly` raises such an
error again in one line, which the same expression reads as a stop.
"""

from __future__ import annotations

import functools
import re
import traceback
from collections.abc import Callable

#: the Java exceptions Spark reads as a stop in a foreachBatch function's error (``StreamExecution.IO_EXCEPTION_NAMES``)
INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)
#: what Spark's ``PROXY_ERROR`` finds in an error's text (Python's engine does not recurse per character)
PROXY_ERROR = re.compile(
    r"py4j\.protocol\.Py4JJavaError: An error occurred while calling.*?"
    f"({'|'.join(map(re.escape, INTERRUPTIONS))})",
    re.DOTALL,
)


class QueryStopping(RuntimeError):
    """A foreachBatch function's JVM call was interrupted: its query is being stopped."""


def stops_cleanly(function: Callable) -> Callable:
    """``function``, a foreachBatch function, whose error when its query's stop interrupts it is one line that Spark
    reads as a stop (``QueryStopping``, with the interruption's Java name); every other error is raised as it was."""

    @functools.wraps(function)
    def run(batch, batch_id):
        try:
            return function(batch, batch_id)
        except Exception as error:
            found = PROXY_ERROR.search("".join(traceback.format_exception(error)))
            if found is None:
                raise
            raise QueryStopping(
                f"py4j.protocol.Py4JJavaError: An error occurred while calling the JVM: {found.group(1)} "
                "(the query is being stopped)"
            ) from None

    return run
