"""Spark's own test of a foreachBatch error, run in the JVM: the one line :func:`stops_cleanly` raises on a stop reads
as a stop; the Java stack trace a stop mid-batch used to carry overflows the thread's stack (the suite's JVMs run
with a 4 MB stack; the query thread of a local run with 1 MB overflows sooner). When Spark's expression stops
recursing per character, this test fails and the wrapper can go."""

import traceback

import pytest
from support.interrupted import interrupted, raising

from sensorcep.pipeline.interruptions import QueryStopping, stops_cleanly


def spark_reads_as_a_stop(spark, text: str) -> bool:
    runtime = spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.runtime
    return runtime.StreamExecution.PROXY_ERROR().findFirstIn(text).isDefined()


def test_spark_reads_the_one_line_as_a_stop_and_overflows_on_the_stack_trace(spark):
    error = interrupted()
    with pytest.raises(QueryStopping) as raised:
        stops_cleanly(raising(error))(None, 7)
    assert spark_reads_as_a_stop(spark, "".join(traceback.format_exception(raised.value)))
    with pytest.raises(Exception, match="StackOverflowError"):
        spark_reads_as_a_stop(spark, "".join(traceback.format_exception(error)))
