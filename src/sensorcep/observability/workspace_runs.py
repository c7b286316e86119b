"""Recent runs of the bundle's job in a Databricks workspace, one row per task run (databricks-sdk).

The job is named by its id: the pipeline job passes ``{{job.id}}`` as its ``job_id`` parameter, so a dev
deployment (whose job development mode renames ``[dev <user>] ...``) shows its own runs, never prod's.
Credentials come from the environment or the notebook context, never from code.
"""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import islice

import pandas as pd

from sensorcep.observability.reports import save_figure
from sensorcep.runtime import is_databricks

#: the Jobs API accepts a runs page size of 1..24
MAX_PAGE = 24
RUN_COLUMNS = [
    "job_id",
    "run_id",
    "run_name",
    "run_start",
    "run_state",
    "run_result",
    "task_key",
    "task_run_id",
    "task_start",
    "task_seconds",
    "task_result",
]


def workspace_client():
    """A ``WorkspaceClient`` configured by the SDK's unified auth (env vars, ``~/.databrickscfg`` or the
    notebook's own context)."""
    from databricks.sdk import WorkspaceClient  # noqa: PLC0415 - heavy: only with a workspace or a plot

    return WorkspaceClient()


def recent_runs(client, job_id: int | str, limit: int = 10) -> pd.DataFrame:
    """The last ``limit`` runs of job ``job_id`` (newest first), one row per task run with its start time (UTC),
    duration in seconds and result. Raises :class:`LookupError` when the workspace has no such job, and
    :class:`PermissionError` (one sentence) when the caller may not view it."""
    from databricks.sdk.errors import NotFound, PermissionDenied  # noqa: PLC0415 - heavy: only with a workspace or a plot

    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if not str(job_id).strip().isdigit():
        raise ValueError(f"job_id must be a job's numeric id, not {job_id!r} (the pipeline job passes {{{{job.id}}}})")
    job_id = int(job_id)
    try:
        runs = client.jobs.list_runs(job_id=job_id, limit=min(limit, MAX_PAGE), expand_tasks=True)
        rows = [_task_row(job_id, run, task) for run in islice(runs, limit) for task in (run.tasks or [None])]
    except NotFound:
        raise LookupError(f"no job {job_id} in this workspace (is the bundle deployed to it?)") from None
    except PermissionDenied:
        # prod: a person deployed, so owns the job, and 05 runs as the service principal, which may not view it
        raise PermissionError(
            f"this identity may not view job {job_id}'s runs: grant it CAN_VIEW on the job (in prod the service "
            "principal the jobs run as, through the prod_permissions variable), or deploy as that service principal"
        ) from None
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    for column in ("run_start", "task_start"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def _task_row(job_id: int, run, task) -> dict:
    run_state, run_result = _state(run)
    row = {
        "job_id": job_id,
        "run_id": run.run_id,
        "run_name": run.run_name,
        "run_start": _utc(run.start_time),
        "run_state": run_state,
        "run_result": run_result,
    }
    if task is not None:
        row.update(
            task_key=task.task_key,
            task_run_id=task.run_id,
            task_start=_utc(task.start_time),
            task_seconds=_seconds(task),
            task_result=_state(task)[1],
        )
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
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy: only with a workspace or a plot

    runs = runs.dropna(subset=["task_key", "task_seconds"]).sort_values(["run_start", "task_start"])
    colors = {"SUCCESS": "tab:green", "FAILED": "tab:red"}
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(runs) + 1.2))
    labels = [f"{row.run_start:%m-%d %H:%M} #{row.run_id} {row.task_key}" for row in runs.itertuples()]
    offsets = (runs.task_start - runs.run_start).dt.total_seconds().fillna(0)
    ax.barh(
        labels, runs.task_seconds, left=offsets, color=[colors.get(result, "tab:grey") for result in runs.task_result]
    )
    ax.invert_yaxis()
    ax.set(title=title, xlabel="seconds since the run started")
    fig.tight_layout()
    return fig


def runs_report(settings, client=None, limit: int = 10) -> pd.DataFrame:
    """05's last section: this job's recent runs and a task-duration plot (saved as PNG), or an empty frame and
    one sentence saying why there is nothing to ask or show (a local run, no ``job_id`` parameter, or an identity that
    may not view the job's runs: a report section, not a reason to fail the job)."""

    if client is None and not is_databricks():
        print("local run: no workspace to ask (tests check this part against a stand-in HTTP server)")
        return pd.DataFrame(columns=RUN_COLUMNS)
    if not str(settings.job_id).strip():
        print("no job_id parameter (an interactive run, not the bundle job): nothing to list")
        return pd.DataFrame(columns=RUN_COLUMNS)
    try:
        runs = recent_runs(client or workspace_client(), settings.job_id, limit)
    except PermissionError as denied:
        print(denied)
        return pd.DataFrame(columns=RUN_COLUMNS)
    print(
        "saved",
        save_figure(
            task_duration_plot(runs, f"Task durations of job {settings.job_id}'s recent runs"),
            "job_task_durations",
            settings,
        ),
    )
    return runs
