"""A query's progress as data, from a classic session's ``StreamingQueryProgress`` or a Spark Connect client's."""

import json
from types import SimpleNamespace

from sensorcep.observability.progress import progress_dict, progress_row

#: a progress as a Spark Connect client's ``StreamingQueryProgress.json`` gives it (measured on Spark 4.1.4): no
#: top-level numInputRows or rates, though the object has them as attributes and the source its rows; an observed
#: metric as its values and their schema
CONNECT_JSON = {
    "id": "q",
    "runId": "r",
    "name": "sampling",
    "timestamp": "2026-11-27T03:17:20.278Z",
    "batchId": 0,
    "batchDuration": 2848,
    "durationMs": {"triggerExecution": 2843, "addBatch": 1717},
    "sources": [{"description": "FileStreamSource", "numInputRows": 50}],
    "observedMetrics": {"out": {"values": [50], "schema": {"type": "struct", "fields": [{"name": "rows"}]}}},
}


def test_a_connect_clients_progress_gets_the_rows_and_rates_its_json_leaves_out():
    connect = SimpleNamespace(
        json=json.dumps(CONNECT_JSON), numInputRows=50, inputRowsPerSecond=0.0, processedRowsPerSecond=17.6
    )
    progress = progress_dict(connect)
    row = progress_row(progress)
    assert (row["num_input_rows"], row["input_rows_per_second"], row["processed_rows_per_second"]) == (50, 0.0, 17.6)
    assert progress["observedMetrics"] == {"out": {"rows": 50}}, "an observed metric in the classic form"


def test_a_classic_progress_keeps_its_own_figures():
    classic = {
        **CONNECT_JSON,
        "numInputRows": 50,
        "inputRowsPerSecond": 3.0,
        "processedRowsPerSecond": 4.0,
        "observedMetrics": {"out": {"rows": 50}},
    }
    progress = SimpleNamespace(json=json.dumps(classic), numInputRows=-1, inputRowsPerSecond=-1.0)
    assert progress_dict(progress) == classic
