"""The local job runner: executes the bundle's jobs like Databricks would.

``bundles/*.yml`` is the single source of truth. Every task receives its job's job-level ``parameters`` (as
Databricks pushes them down to notebook widgets and wheel tasks' named parameters), plus its own. Locally
``${var.x}`` resolves to the local default of setting ``x`` (else the variable's default in ``databricks.yml``);
a value that names workspace resources (``${resources...}``, ``${workspace...}``, e.g. the volume behind
``base_path``) takes the local default of the setting the parameter is named after; ``{{job.id}}``-style
dynamic values are empty; ``--param x=value`` overrides any of them.

* the pipeline and tuning jobs (notebook tasks): tasks run in ``depends_on`` order with their job's
  parameters, each kernel a Spark Connect client of the run's one Spark application when one is given (``sensorcep
  run`` serves it: :func:`sensorcep.local.session.serve_connect`); each executed notebook is saved with its outputs
  under ``runs/<stamp>/``, beside ``<task>.log`` with its kernel's console output;
  then the run is rendered as HTML there (:mod:`sensorcep.local.run_report`: a page per notebook, ``index.html``
  with the tasks and the health verdicts), also when a task fails, and the last line names ``index.html``;
* the always-on job (python_wheel_task tasks calling the ``sensorcep-stream`` entry point): every task's
  queries start in this one Spark application and run until Ctrl-C, ``minutes`` or a stop condition, with a
  live line per query; then they are stopped cleanly and resume from their checkpoints next time.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from graphlib import TopologicalSorter
from importlib.metadata import entry_points
from pathlib import Path

import yaml

from sensorcep.errors import SensorCepError
from sensorcep.local import run_report
from sensorcep.local.session import PARAMS_ENV
from sensorcep.observability.live import RealtimeAlertsLine, progress_line
from sensorcep.pipeline import always_on, notifications, registry
from sensorcep.pipeline.streaming import explain_failure, stop_queries
from sensorcep.rules import catalog
from sensorcep.runtime import get_spark
from sensorcep.settings import PROJECT_ROOT, Settings, defaults, is_realtime, parameter_names, parse_duration

BUNDLE_DIR = PROJECT_ROOT / "bundles"
JOB_KEY = "sensor_cep_pipeline"
ALWAYS_ON_JOB_KEY = "sensor_cep_streaming"
TUNING_JOB_KEY = "sensor_cep_tuning"
WORKSPACE_ONLY = re.compile(r"\$\{(resources|workspace)\.[^}]*\}")
DYNAMIC_VALUE = re.compile(r"\{\{[^}]*\}\}")
VAR = re.compile(r"\$\{var\.([a-zA-Z0-9_]+)\}")


class JobError(SensorCepError, RuntimeError):
    pass


@dataclass
class Task:
    key: str
    notebook: Path | None  # a notebook task's notebook; None for a python_wheel_task
    parameters: dict[str, str]
    depends_on: list[str] = field(default_factory=list)
    entry_point: str | None = None  # a python_wheel_task's entry point


def load_job(job_key: str = JOB_KEY, bundle_dir: Path = BUNDLE_DIR) -> dict:
    for path in sorted(bundle_dir.glob("*.yml")):
        doc = yaml.safe_load(path.read_text()) or {}
        job = (doc.get("resources", {}).get("jobs", {}) or {}).get(job_key)
        if job is not None:
            return {"path": path, "job": job}
    raise JobError(f"job {job_key!r} not found in {bundle_dir}/*.yml")


def bundle_variables(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """The defaults of ``databricks.yml``'s variables (for the variables that are not settings)."""
    doc = yaml.safe_load((root / "databricks.yml").read_text()) or {}
    return {name: str(spec.get("default", "")) for name, spec in (doc.get("variables") or {}).items()}


def resolve(value: str, variables: dict[str, str]) -> str:
    def sub(match):
        name = match.group(1)
        if name not in variables:
            raise JobError(f"${{var.{name}}} has no local value (not a setting and not given with --param)")
        return str(variables[name])

    return VAR.sub(sub, str(value))


def local_value(name: str, value: str, variables: dict[str, str], setting_defaults: dict[str, str]) -> str:
    """A parameter's value for a local run (see the module docstring)."""
    text = str(value)
    if DYNAMIC_VALUE.search(text):
        return ""
    if WORKSPACE_ONLY.search(text):
        if name not in setting_defaults:
            raise JobError(
                f"parameter {name!r} = {text!r} names workspace resources and is not a setting: it has no local value"
            )
        return setting_defaults[name]
    return resolve(text, variables)


def job_parameters(job: dict, variables: dict[str, str], setting_defaults: dict[str, str]) -> dict[str, str]:
    """The job-level ``parameters`` with their local values."""
    return {
        p["name"]: local_value(p["name"], p.get("default", ""), variables, setting_defaults)
        for p in job.get("parameters") or []
    }


def tasks(job_key: str = JOB_KEY, params: dict[str, str] | None = None, bundle_dir: Path = BUNDLE_DIR) -> list[Task]:
    """The job's tasks in dependency order, parameters resolved for a local run."""
    found = load_job(job_key, bundle_dir)
    setting_defaults = defaults()
    variables = {**bundle_variables(bundle_dir.parent), **setting_defaults, **(params or {})}
    shared = job_parameters(found["job"], variables, setting_defaults)
    by_key = {}
    for t in found["job"].get("tasks", []):
        nb, wheel = t.get("notebook_task"), t.get("python_wheel_task")
        depends_on = [d["task_key"] for d in t.get("depends_on", [])]
        if nb is not None:
            path = (found["path"].parent / nb["notebook_path"]).resolve()
            if path.suffix != ".ipynb":
                path = path.with_suffix(".ipynb")
            raw, entry_point = nb.get("base_parameters") or {}, None
        elif wheel is not None:
            path, raw, entry_point = None, wheel.get("named_parameters") or {}, wheel["entry_point"]
        else:
            raise JobError(f"task {t['task_key']!r} is neither a notebook nor a python wheel task")
        base = {**shared, **{k: local_value(k, v, variables, setting_defaults) for k, v in raw.items()}}
        base.update({k: v for k, v in (params or {}).items() if k in base and k != "task"})
        by_key[t["task_key"]] = Task(t["task_key"], path, base, depends_on, entry_point)
    unknown = set(params or {}) - {"task"} - {k for t in by_key.values() for k in t.parameters} - _variables_used(found)
    if unknown:
        raise JobError(
            f"job {job_key!r} has no parameter {', '.join(sorted(unknown))} (a value for it would reach no task); "
            f"its parameters: {', '.join(sorted(shared))}"
        )
    order = TopologicalSorter({k: t.depends_on for k, t in by_key.items()}).static_order()
    return [by_key[k] for k in order]


def _variables_used(found: dict) -> set[str]:
    """The bundle variables (``${var.name}``) the job's definition reads: a value given for one is used."""
    return set(VAR.findall(json.dumps(found["job"])))


def run(
    selected: list[str] | None = None,
    params: dict[str, str] | None = None,
    runs_dir: Path | None = None,
    timeout: int = 1800,
    job_key: str = JOB_KEY,
    bundle_dir: Path = BUNDLE_DIR,
    read_health: run_report.HealthReader = run_report.read_health,
    spark_remote: str | None = None,
) -> Path:
    """Execute the (selected) tasks in order, then write the run's HTML report (``read_health`` gives its verdicts);
    returns the folder holding the executed notebooks and the report.

    ``spark_remote``: the run's Spark application (:func:`sensorcep.local.session.serve_connect`); each notebook's
    kernel is its Spark Connect client, but for a task that needs a session of its own (:func:`own_session`)."""
    import nbformat  # noqa: PLC0415 - the notebook runner only
    from nbclient import NotebookClient  # noqa: PLC0415 - the notebook runner only
    from nbclient.exceptions import CellExecutionError  # noqa: PLC0415 - the notebook runner only

    all_tasks = tasks(job_key, params=params, bundle_dir=bundle_dir)
    if any(t.notebook is None for t in all_tasks):
        raise JobError(f"job {job_key!r} runs streaming tasks: run it with run_always_on (--job {job_key})")
    if selected:
        unknown = set(selected) - {t.key for t in all_tasks}
        if unknown:
            raise JobError(f"unknown task(s) {sorted(unknown)}; the job has {[t.key for t in all_tasks]}")
        all_tasks = [t for t in all_tasks if t.key in selected]
    if not all_tasks:
        raise JobError(f"job {job_key!r} has no tasks")
    out_dir = runs_dir or PROJECT_ROOT / "runs" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    for task in all_tasks:
        if not task.notebook.exists():
            raise JobError(f"task {task.key}: notebook {task.notebook} does not exist")
    since = datetime.now(timezone.utc)
    ran = {t.key: run_report.TaskRun(t.key, out_dir / t.notebook.name, "not run") for t in all_tasks}

    def report(last: Task) -> Path:
        health = run_report.run_health(lambda: read_health(task_settings(last), since))
        return run_report.write_report(out_dir, list(ran.values()), health, title=f"{job_key} · run {out_dir.name}")

    for task in all_tasks:
        print(task_line(task), flush=True)
        nb = nbformat.read(task.notebook, as_version=4)
        os.environ[PARAMS_ENV] = json.dumps(task.parameters)
        os.environ["SENSORCEP_RUN_DIR"] = str(out_dir)
        if spark_remote and not own_session(task):  # the kernel nbclient starts inherits it
            os.environ["SPARK_REMOTE"] = spark_remote
        started = time.monotonic()
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(task.notebook.parent)}}
        )
        saved, log = out_dir / task.notebook.name, out_dir / f"{task.key}.log"
        try:
            with log.open("w") as kernel_output:  # the kernel's, Spark's and its Python workers' console output
                client.execute(stdout=kernel_output, stderr=kernel_output)
        except CellExecutionError as exc:
            nbformat.write(nb, saved)
            ran[task.key] = run_report.TaskRun(task.key, saved, "failed", time.monotonic() - started)
            index = report(task)
            raise JobError(
                f"task {task.key} failed (notebook with outputs: {saved}; console: {log}); the run as HTML: {index}"
                f":\n{exc}"
            ) from None
        finally:
            os.environ.pop(PARAMS_ENV, None)
            if spark_remote:
                os.environ.pop("SPARK_REMOTE", None)
        nbformat.write(nb, saved)
        seconds = time.monotonic() - started
        ran[task.key] = run_report.TaskRun(task.key, saved, "succeeded", seconds)
        print(f"✔ {task.key} in {seconds:.1f} s -> {saved} (console: {log.name})", flush=True)
    index = report(all_tasks[-1])
    print(f"the run as HTML (each notebook with its outputs, the health verdicts): {index}", flush=True)
    return out_dir


def task_settings(task: Task) -> Settings:
    """The settings a task's notebook reads: its parameters over the widget defaults."""
    names = set(parameter_names())
    return Settings.from_mapping({**defaults(), **{k: v for k, v in task.parameters.items() if k in names}})


def own_session(task: Task) -> bool:
    """Whether a notebook task starts a classic session of its own instead of joining the run's Spark application:
    when it is given a real-time ``alerts_trigger`` (open-source Spark Connect cannot ask for the real-time trigger:
    :func:`sensorcep.runtime.set_trigger`). A notebook reads only widgets that are its job's parameters (a test in
    ``tests/unit/test_bundle.py``), so a task without that parameter never starts the alert query."""
    return is_realtime(task.parameters.get("alerts_trigger", "availableNow"))


def task_line(task: Task) -> str:
    """``▶ ingest: 01_ingest.ipynb (trigger=10 seconds)``: the task, its notebook and only the parameters that differ
    from the defaults (the settings' own, or the ``SENSORCEP_*`` environment's), on one line."""  # noqa: PLC0415 - the notebook runner only
    plain = defaults()
    changed = {k: v for k, v in task.parameters.items() if plain.get(k) != str(v)}
    shown = ", ".join(f"{k}={' '.join(str(v).split())}" for k, v in changed.items())
    what = task.notebook.name if task.notebook else task.entry_point
    return f"▶ {task.key}: {what}" + (f" ({shown})" if shown else "")


# ------------------------------------------------------------------------------ the always-on job
def entry_point_function(name: str):
    """The function a python_wheel_task's ``entry_point`` names in the installed package's metadata."""

    found = [ep for ep in entry_points(group="console_scripts", name=name) if ep.dist and ep.dist.name == "sensorcep"]
    if not found:
        raise JobError(f"entry point {name!r} is not declared by the installed sensorcep package (pyproject.toml)")
    return found[0].load()


def run_always_on(
    job_key: str = ALWAYS_ON_JOB_KEY,
    params: dict[str, str] | None = None,
    minutes: float | None = None,
    until=None,
    every_s: float = 10.0,
    out=print,
    spark=None,
    only: Iterable[str] | None = None,
    only_queries: Iterable[str] | None = None,
) -> list:
    """Start every task of the always-on job in this Spark application; run until Ctrl-C, ``minutes``, or
    ``until(queries)`` is true; print a line per query every ``every_s`` seconds; stop the queries cleanly.

    ``only``: these task keys, not every task: what one of the job's clusters runs on Databricks (the real-time
    ``alerts`` task has a cluster of its own), e.g. to restart one task while another application runs the rest.
    ``only_queries``: of those tasks, only these queries (the tasks that hold none of them do not start): to look
    at one query and what feeds it, or a fault run that needs no other (``tests/support/nemesis.py``).

    Each task's ``named_parameters`` become its :class:`Settings`; its ``entry_point`` must be the package's
    always-on entry point (what the wheel task calls on Databricks). A query that fails stops the others and
    raises, as the job run would fail there. Returns the (stopped) queries.
    """

    spark = spark or get_spark()
    running_tasks, triggers, settings_of = [], {}, {}
    queries = []  # every task's queries, as they run now (a refresh replaces a restarted one)
    try:
        job_tasks = tasks(job_key, params=params)
        if only is not None:
            unknown = set(only) - {task.key for task in job_tasks}
            if unknown:
                known = ", ".join(task.key for task in job_tasks)
                raise JobError(f"job {job_key!r} has no task {', '.join(sorted(unknown))}; its tasks: {known}")
            job_tasks = [task for task in job_tasks if task.key in set(only)]
        wanted = None if only_queries is None else set(only_queries)
        if wanted is not None and wanted - set(known := registry.registry()):
            raise JobError(f"no query {', '.join(sorted(wanted - set(known)))}; the queries: {', '.join(known)}")
        with catalog.one_read():  # every task's rule queries start from one read of alert_rules
            for task in job_tasks:
                if task.entry_point is None or entry_point_function(task.entry_point) is not always_on.main:
                    raise JobError(f"task {task.key!r} does not call the always-on entry point (sensorcep-stream)")
                task_name, values = always_on.parse_arguments([f"--{k}={v}" for k, v in task.parameters.items()])
                if wanted is not None and not wanted & {query.name for query in registry.tasks()[task_name]}:
                    continue
                settings = Settings.from_mapping(values)
                running = always_on.start_task(spark, task_name, settings, wanted)
                for declared, query in running.started():
                    triggers[query.name] = declared.trigger(settings)
                    settings_of[query.name] = settings
                running_tasks.append(running)
                queries += running.queries
                out(f"▶ {task.key}: {', '.join(q.name for q in running.queries)}")
        deadline = time.monotonic() + minutes * 60 if minutes else None
        realtime_lines: dict[str, RealtimeAlertsLine] = {}
        next_line = time.monotonic()
        reloading = [running for running in running_tasks if running.reloads]
        # the tasks' rule queries are refreshed together, from one read of alert_rules (the shortest rules_refresh)
        refresh_s = min((parse_duration(r.settings.rules_refresh) for r in reloading), default=math.inf)
        next_refresh = time.monotonic() + refresh_s
        while True:
            if time.monotonic() >= next_refresh:
                with catalog.one_read():
                    for running in reloading:
                        for name in running.refresh():
                            out(f"↻ {name}: alert_rules changed, (re)started with the rules in force")
                        for declared, query in running.started():
                            triggers.setdefault(query.name, declared.trigger(running.settings))
                            settings_of.setdefault(query.name, running.settings)
                next_refresh = time.monotonic() + refresh_s
            for running in running_tasks:
                for name in running.retry_worker_start_failures():
                    out(f"↻ {name}: a Python worker did not start in time (a busy machine); started again")
            queries[:] = [q for running in running_tasks for q in running.queries]
            failed = [q for running in running_tasks for q in running.failed()]
            if failed:
                raise JobError(f"query {failed[0].name} failed: {explain_failure(failed[0], failed[0].exception())}")
            if until is not None and until(queries):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            if time.monotonic() >= next_line:
                stamp = datetime.now().strftime("%H:%M:%S")

                for query in queries:
                    trigger = triggers[query.name]
                    line = progress_line(query)
                    if query.isActive and is_realtime(trigger):  # progress only at checkpoints: ask the topic
                        line = realtime_lines.setdefault(query.name, RealtimeAlertsLine(settings_of[query.name]))(
                            query.name
                        )
                    out(f"{stamp} {trigger:<20} {line}")
                next_line = time.monotonic() + every_s
            time.sleep(0.2)  # the loop's tick (Ctrl-C lands here)
    except KeyboardInterrupt:
        out("Ctrl-C: stopping the queries (they resume from their checkpoints)")
    finally:
        stop_queries(spark, queries)  # quietly: an interrupted task of a clean stop is not an error
        for running in running_tasks:  # the notifier's ledger appends behind its passes: its last rows, before exit
            notifications.flush_ledger(running.settings)
    out(f"✔ stopped {len(queries)} queries: {', '.join(q.name for q in queries)}")
    return queries
