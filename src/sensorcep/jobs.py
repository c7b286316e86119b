"""The local job runner: executes the bundle's pipeline job like Databricks would.

``bundles/*.yml`` is the single source of truth: tasks run in ``depends_on`` order with their
``base_parameters`` (``${var.x}`` resolves to the local default of setting ``x`` unless given with
``--param x=value``). Each executed notebook is saved with its outputs under ``runs/<stamp>/``.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from graphlib import TopologicalSorter
from pathlib import Path

import yaml

from .runtime import PARAMS_ENV
from .settings import PROJECT_ROOT, defaults

BUNDLE_DIR = PROJECT_ROOT / "bundles"
JOB_KEY = "sensor_cep_pipeline"
VAR = re.compile(r"\$\{var\.([a-zA-Z0-9_]+)\}")


class JobError(RuntimeError):
    pass


@dataclass
class Task:
    key: str
    notebook: Path
    parameters: dict[str, str]
    depends_on: list[str] = field(default_factory=list)


def load_job(job_key: str = JOB_KEY, bundle_dir: Path = BUNDLE_DIR) -> dict:
    for path in sorted(bundle_dir.glob("*.yml")):
        doc = yaml.safe_load(path.read_text()) or {}
        job = (doc.get("resources", {}).get("jobs", {}) or {}).get(job_key)
        if job is not None:
            return {"path": path, "job": job}
    raise JobError(f"job {job_key!r} not found in {bundle_dir}/*.yml")


def resolve(value: str, variables: dict[str, str]) -> str:
    def sub(match):
        name = match.group(1)
        if name not in variables:
            raise JobError(f"${{var.{name}}} has no local value (not a setting and not given with --param)")
        return str(variables[name])

    return VAR.sub(sub, str(value))


def tasks(job_key: str = JOB_KEY, params: dict[str, str] | None = None, bundle_dir: Path = BUNDLE_DIR) -> list[Task]:
    """The job's notebook tasks in dependency order, parameters resolved for a local run."""
    found = load_job(job_key, bundle_dir)
    variables = {**defaults(), **(params or {})}
    by_key = {}
    for t in found["job"].get("tasks", []):
        nb = t.get("notebook_task")
        if nb is None:
            raise JobError(f"task {t['task_key']!r} is not a notebook task; the local runner runs notebooks only")
        path = (found["path"].parent / nb["notebook_path"]).resolve()
        if path.suffix != ".ipynb":
            path = path.with_suffix(".ipynb")
        base = {k: resolve(v, variables) for k, v in (nb.get("base_parameters") or {}).items()}
        base.update({k: v for k, v in (params or {}).items() if k in base})
        by_key[t["task_key"]] = Task(t["task_key"], path, base, [d["task_key"] for d in t.get("depends_on", [])])
    order = TopologicalSorter({k: t.depends_on for k, t in by_key.items()}).static_order()
    return [by_key[k] for k in order]


def run(selected: list[str] | None = None, params: dict[str, str] | None = None,
        runs_dir: Path | None = None, timeout: int = 1800) -> Path:
    """Execute the (selected) tasks in order; returns the folder holding the executed notebooks."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    all_tasks = tasks(params=params)
    if selected:
        unknown = set(selected) - {t.key for t in all_tasks}
        if unknown:
            raise JobError(f"unknown task(s) {sorted(unknown)}; the job has {[t.key for t in all_tasks]}")
        all_tasks = [t for t in all_tasks if t.key in selected]
    out_dir = runs_dir or PROJECT_ROOT / "runs" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    for task in all_tasks:
        if not task.notebook.exists():
            raise JobError(f"task {task.key}: notebook {task.notebook} does not exist")
        print(f"▶ {task.key}: {task.notebook.name} {json.dumps(task.parameters)}", flush=True)
        nb = nbformat.read(task.notebook, as_version=4)
        os.environ[PARAMS_ENV] = json.dumps(task.parameters)
        os.environ["SENSORCEP_RUN_DIR"] = str(out_dir)
        started = time.monotonic()
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(task.notebook.parent)}})
        saved = out_dir / task.notebook.name
        try:
            client.execute()
        except CellExecutionError as exc:
            nbformat.write(nb, saved)
            raise JobError(f"task {task.key} failed (notebook with outputs: {saved}):\n{exc}") from None
        finally:
            os.environ.pop(PARAMS_ENV, None)
        nbformat.write(nb, saved)
        print(f"✔ {task.key} in {time.monotonic() - started:.1f} s -> {saved}", flush=True)
    return out_dir
