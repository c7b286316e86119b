"""A foreachBatch function stopped mid-batch raises one line that Spark reads as a stop; any other error is raised as
it was."""

import traceback

import pytest
from support.interrupted import JAVA_TRACE, Py4JJavaError, interrupted, raising

from sensorcep.pipeline.interruptions import PROXY_ERROR, QueryStopping, stops_cleanly


def test_a_stop_mid_batch_is_one_line_that_spark_reads_as_a_stop():
    error = interrupted()
    with pytest.raises(QueryStopping) as raised:
        stops_cleanly(raising(error))(None, 7)
    text = "".join(traceback.format_exception(raised.value))
    assert len("".join(traceback.format_exception(error))) > 100_000
    assert len(text) < 1_000, text
    assert PROXY_ERROR.search(text).group(1) == "java.lang.InterruptedException"
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # the long text is not chained


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a bad batch"),
        Py4JJavaError("An error occurred while calling o9.save.\n: java.lang.IllegalStateException: no\n" + JAVA_TRACE),
        RuntimeError("java.lang.InterruptedException, but not from a call into the JVM"),
    ],
    ids=["python", "java failure", "not py4j"],
)
def test_any_other_error_is_raised_as_it_was(error):
    with pytest.raises(type(error)) as raised:
        stops_cleanly(raising(error))(None, 7)
    assert raised.value is error


def test_a_batch_that_ends_returns_what_the_function_returns():
    assert stops_cleanly(lambda batch, batch_id: (batch, batch_id))("rows", 3) == ("rows", 3)
