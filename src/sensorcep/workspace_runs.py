"""Recent runs of the bundle's job in a Databricks workspace, one row per task run (databricks-sdk).

The job is the one ``bundles/sensor_cep_pipeline.yml`` deploys. In a ``mode: development`` target the
bundle prefixes its name (``[dev <user>] sensor-cep pipeline``), so pass that name to look at a dev
deployment. Credentials come from the environment or the notebook context, never from code.
"""
from __future__ import annotations

from datetime import datetime, timezone
from itertools import islice

import pandas as pd

JOB_NAME = "sensor-cep pipeline"
#: the Jobs API accepts a runs page size of 1..24
MAX_PAGE = 24
RUN_COLUMNS = ["job_id", "run_id", "run_name", "run_start", "run_state", "run_result",
               "task_key", "task_run_id", "task_start", "task_seconds", "task_result"]


def workspace_client():
    """A ``WorkspaceClient`` configured by the SDK's unified auth (env vars, ``~/.databrickscfg`` or the
    notebook's own context)."""
    from databricks.sdk import WorkspaceClient

    return WorkspaceClient()


def recent_runs(client, job_name: str = JOB_NAME, limit: int = 10) -> pd.DataFrame:
    """The last ``limit`` runs of the job called ``job_name`` (newest first), one row per task run
    with its start time (UTC), duration in seconds and result.

    Job names are not unique: if several jobs carry the name, the most recently created one is used
    (its id is in the ``job_id`` column). Raises :class:`LookupError` when there is none.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    jobs = list(client.jobs.list(name=job_name))
    if not jobs:
        raise LookupError(f"no job named {job_name!r} in this workspace (is the bundle deployed, "
                          f"and under which name? development targets prefix it with '[dev <user>] ')")
    job = max(jobs, key=lambda j: j.created_time or 0)
    runs = client.jobs.list_runs(job_id=job.job_id, limit=min(limit, MAX_PAGE), expand_tasks=True)
    rows = [_task_row(job.job_id, run, task) for run in islice(runs, limit) for task in (run.tasks or [None])]
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    for column in ("run_start", "task_start"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def _task_row(job_id: int, run, task) -> dict:
    run_state, run_result = _state(run)
    row = {"job_id": job_id, "run_id": run.run_id, "run_name": run.run_name,
           "run_start": _utc(run.start_time), "run_state": run_state, "run_result": run_result}
    if task is not None:
        row.update(task_key=task.task_key, task_run_id=task.run_id, task_start=_utc(task.start_time),
                   task_seconds=_seconds(task), task_result=_state(task)[1])
    return row


def _state(run) -> tuple[str | None, str | None]:
    """(life-cycle state, result) of a run or task run: from ``state``, which the 0.70 SDK marks
    deprecated, else from its successor ``status`` (state + termination code)."""
    if run.state is not None:
        return _value(run.state.life_cycle_state), _value(run.state.result_state)
    if run.status is not None:
        details = run.status.termination_details
        return _value(run.status.state), _value(details.code) if details else None
    return None, None


def _value(enum) -> str | None:
    return enum.value if enum is not None else None


def _utc(epoch_ms: int | None) -> datetime | None:
    """Jobs API times are epoch milliseconds; 0 means "not yet" (e.g. ``end_time`` while running)."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc) if epoch_ms else None


def _seconds(task) -> float | None:
    """A task run's duration: ``execution_duration``, else end - start once it has ended."""
    if task.execution_duration:
        return task.execution_duration / 1000
    if task.start_time and task.end_time:
        return (task.end_time - task.start_time) / 1000
    return None


def task_duration_plot(runs: pd.DataFrame, title: str = "Task durations of recent job runs"):
    """:func:`recent_runs` rows -> horizontal bars, one per task run, placed at the task's start
    offset within its run and coloured by result (failures red)."""
    import matplotlib.pyplot as plt

    runs = runs.dropna(subset=["task_key", "task_seconds"]).sort_values(["run_start", "task_start"])
    colors = {"SUCCESS": "tab:green", "FAILED": "tab:red"}
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(runs) + 1.2))
    labels = [f"{row.run_start:%m-%d %H:%M} #{row.run_id} {row.task_key}" for row in runs.itertuples()]
    offsets = (runs.task_start - runs.run_start).dt.total_seconds().fillna(0)
    ax.barh(labels, runs.task_seconds, left=offsets,
            color=[colors.get(result, "tab:grey") for result in runs.task_result])
    ax.invert_yaxis()
    ax.set(title=title, xlabel="seconds since the run started")
    fig.tight_layout()
    return fig
