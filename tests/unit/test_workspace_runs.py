"""``recent_runs`` against a local HTTP server that stands in for a Databricks workspace.

A real workspace cannot run here, so a ``ThreadingHTTPServer`` on 127.0.0.1 answers the Jobs API GET
call databricks-sdk 0.70 makes (``/api/2.2/jobs/runs/list``)
with canned JSON, answers anything else with a 404, and records every request so the tests can check
what the SDK asked for and with which token.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

from sensorcep.observability.workspace_runs import recent_runs, task_duration_plot

JOB_ID = 123
T = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC in epoch ms


def _task(key, run_id, start, execution_ms, result, end=0, life_cycle="TERMINATED"):
    return {
        "task_key": key,
        "run_id": run_id,
        "start_time": start,
        "end_time": end,
        "execution_duration": execution_ms,
        "state": {"life_cycle_state": life_cycle, "result_state": result},
    }


NEWER_RUN = {  # failed: sampling_state failed, so anomaly_alerts never started
    "job_id": JOB_ID,
    "run_id": 902,
    "run_name": "sensor-cep pipeline",
    "start_time": T + 3_600_000,
    "state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"},
    "tasks": [
        _task("ingest", 9021, T + 3_610_000, 80_000, "SUCCESS"),
        _task("sampling_state", 9022, T + 3_700_000, 45_500, "FAILED"),
        _task("anomaly_alerts", 9023, 0, 0, "UPSTREAM_FAILED", life_cycle="SKIPPED"),
    ],
}
OLDER_RUN = {  # succeeded; one task without execution_duration, one with only the newer `status`
    "job_id": JOB_ID,
    "run_id": 901,
    "run_name": "sensor-cep pipeline",
    "start_time": T,
    "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
    "tasks": [
        _task("ingest", 9011, T + 10_000, 95_000, "SUCCESS"),
        _task("sampling_state", 9012, T + 110_000, 0, "SUCCESS", end=T + 230_250),
        {
            "task_key": "anomaly_alerts",
            "run_id": 9013,
            "start_time": T + 235_000,
            "execution_duration": 61_500,
            "status": {"state": "TERMINATED", "termination_details": {"code": "SUCCESS", "type": "SUCCESS"}},
        },
    ],
}


class FakeJobsApi(BaseHTTPRequestHandler):
    """Jobs API 2.2 list calls with canned answers; two pages of runs, one run each."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        self.server.requests.append((url.path, query, self.headers.get("Authorization")))
        if url.path == "/api/2.2/jobs/runs/list" and query.get("job_id") == [str(JOB_ID)]:
            if query.get("page_token") == ["page-2"]:
                self._answer(200, {"runs": [OLDER_RUN], "has_more": False})
            else:
                self._answer(200, {"runs": [NEWER_RUN], "has_more": True, "next_page_token": "page-2"})
        elif url.path == "/api/2.2/jobs/runs/list":
            self._answer(
                404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": f"Job {query['job_id'][0]} does not exist."}
            )
        else:
            self._answer(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": f"no fake for {url.path}"})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def workspace(monkeypatch, tmp_path):
    """(client, server) with a client that can only reach the fake server, with a test token."""
    from databricks.sdk import WorkspaceClient

    for name in [n for n in os.environ if n.startswith("DATABRICKS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no-such.databrickscfg"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeJobsApi)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = WorkspaceClient(host=f"http://127.0.0.1:{server.server_port}", token="test-token", auth_type="pat")
        yield client, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def utc(epoch_ms: int) -> pd.Timestamp:
    return pd.Timestamp(datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc))


def records(frame: pd.DataFrame) -> list[dict]:
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def test_recent_runs_one_row_per_task_run(workspace):
    client, server = workspace
    runs = recent_runs(client, str(JOB_ID))  # as the job_id parameter arrives: text

    common = {"job_id": JOB_ID, "run_name": "sensor-cep pipeline", "run_state": "TERMINATED"}
    newer = {**common, "run_id": 902, "run_start": utc(T + 3_600_000), "run_result": "FAILED"}
    older = {**common, "run_id": 901, "run_start": utc(T), "run_result": "SUCCESS"}
    assert records(runs) == [
        {
            **newer,
            "task_key": "ingest",
            "task_run_id": 9021,
            "task_start": utc(T + 3_610_000),
            "task_seconds": 80.0,
            "task_result": "SUCCESS",
        },
        {
            **newer,
            "task_key": "sampling_state",
            "task_run_id": 9022,
            "task_start": utc(T + 3_700_000),
            "task_seconds": 45.5,
            "task_result": "FAILED",
        },
        {
            **newer,
            "task_key": "anomaly_alerts",
            "task_run_id": 9023,
            "task_start": None,
            "task_seconds": None,
            "task_result": "UPSTREAM_FAILED",
        },
        {
            **older,
            "task_key": "ingest",
            "task_run_id": 9011,
            "task_start": utc(T + 10_000),
            "task_seconds": 95.0,
            "task_result": "SUCCESS",
        },
        {
            **older,
            "task_key": "sampling_state",
            "task_run_id": 9012,
            "task_start": utc(T + 110_000),
            "task_seconds": 120.25,
            "task_result": "SUCCESS",
        },
        {
            **older,
            "task_key": "anomaly_alerts",
            "task_run_id": 9013,
            "task_start": utc(T + 235_000),
            "task_seconds": 61.5,
            "task_result": "SUCCESS",
        },
    ]
    assert str(runs.run_start.dtype) == str(runs.task_start.dtype) == "datetime64[ns, UTC]"
    assert runs.run_start.iloc[0] == pd.Timestamp("2026-01-05 13:00:00", tz="UTC")

    assert [(path, query) for path, query, _ in server.requests] == [  # by id: no lookup by (renamed) name
        ("/api/2.2/jobs/runs/list", {"job_id": ["123"], "limit": ["10"], "expand_tasks": ["true"]}),
        (
            "/api/2.2/jobs/runs/list",
            {"job_id": ["123"], "limit": ["10"], "expand_tasks": ["true"], "page_token": ["page-2"]},
        ),
    ]
    assert {auth for _, _, auth in server.requests} == {"Bearer test-token"}


def test_limit_stops_paging(workspace):
    client, server = workspace
    runs = recent_runs(client, JOB_ID, limit=1)
    assert runs.run_id.tolist() == [902, 902, 902]
    assert runs.task_key.tolist() == ["ingest", "sampling_state", "anomaly_alerts"]
    runs_calls = [query for path, query, _ in server.requests if path == "/api/2.2/jobs/runs/list"]
    assert runs_calls == [{"job_id": ["123"], "limit": ["1"], "expand_tasks": ["true"]}]  # no second page
    with pytest.raises(ValueError, match="limit"):
        recent_runs(client, JOB_ID, limit=0)


def test_unknown_job_raises_lookup_error_naming_it(workspace):
    client, server = workspace
    with pytest.raises(LookupError, match=r"no job 999 in this workspace"):
        recent_runs(client, 999)
    assert [(path, query["job_id"]) for path, query, _ in server.requests] == [("/api/2.2/jobs/runs/list", ["999"])]
    with pytest.raises(ValueError, match=r"job_id must be a job's numeric id"):
        recent_runs(client, "")  # a local run: no job id


def test_task_duration_plot_draws_one_bar_per_finished_task(workspace):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    client, _ = workspace
    fig = task_duration_plot(recent_runs(client, JOB_ID))
    try:
        bars = fig.axes[0].patches
        assert len(bars) == 5  # the skipped task has no duration
        red = [bar for bar in bars if bar.get_facecolor() == matplotlib.colors.to_rgba("tab:red")]
        assert [(bar.get_x(), bar.get_width()) for bar in red] == [(100.0, 45.5)]
    finally:
        plt.close(fig)


def test_runs_report_lists_the_job_passed_by_id_and_says_why_when_it_cannot(workspace, monkeypatch, tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from sensorcep.observability.workspace_runs import runs_report
    from sensorcep.settings import Settings

    monkeypatch.setenv("SENSORCEP_RUN_DIR", str(tmp_path))
    client, _ = workspace
    assert runs_report(Settings()).empty  # locally, no client: nothing asked
    assert "local run" in capsys.readouterr().out
    assert runs_report(Settings(), client).empty  # no job_id parameter
    assert "no job_id parameter" in capsys.readouterr().out
    runs = runs_report(Settings(job_id=str(JOB_ID)), client)
    assert set(runs.run_id) == {901, 902} and (tmp_path / "job_task_durations.png").exists()
