"""A notebook job's run as browsable HTML, written into its run folder beside the executed notebooks.

* ``<notebook>.html`` for every saved ``<notebook>.ipynb``: the notebook with its outputs (tables, plots, tracebacks),
  rendered by nbconvert. The pages are self-contained: plots are embedded, and the scripts nbconvert's template
  would fetch from a CDN (require.js, MathJax, Mermaid; none of this project's notebooks needs them) are left out,
  so the report opens offline.
* ``index.html``: each task (status, duration, links to its page, notebook and console) and the health verdicts
  (:mod:`sensorcep.observability.health`) of the streaming queries the run recorded in ``stream_progress``; when that
  table cannot be read, one sentence saying why.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from sensorcep.io.tables import table
from sensorcep.local.session import jvm_console_to
from sensorcep.observability.health import Verdict, check_health, health_line, health_table
from sensorcep.observability.reports import read_progress
from sensorcep.pipeline.registry import trigger_intervals
from sensorcep.runtime import get_spark
from sensorcep.settings import Settings

INDEX = "index.html"
#: nbconvert's JupyterLab template without the blocks that load scripts from a CDN
OFFLINE_TEMPLATE = "sensorcep_offline.html.j2"
OFFLINE_TEMPLATE_SOURCE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


@dataclass(frozen=True)
class TaskRun:
    """One task of the run, as the index lists it."""

    key: str
    notebook: Path  # the executed notebook's place in the run folder (absent for a task that did not run)
    status: str  # "succeeded", "failed" or "not run"
    seconds: float | None = None


@dataclass(frozen=True)
class RunHealth:
    """The health verdicts of the run's queries, or the sentence saying why there are none."""

    verdicts: list[Verdict] = field(default_factory=list)
    problem: str | None = None


#: reads the verdicts of the queries that ran since a moment, under a task's settings
HealthReader = Callable[[Settings, datetime], list[Verdict]]


def render_notebook(notebook: Path) -> Path:
    """``<notebook>.ipynb`` -> ``<notebook>.html`` beside it, with its outputs; returns the page."""
    import nbformat  # noqa: PLC0415 - the notebook runner only
    from jinja2 import DictLoader  # noqa: PLC0415 - the notebook runner only (nbconvert's template engine)
    from nbconvert import HTMLExporter  # noqa: PLC0415 - the notebook runner only

    exporter = HTMLExporter(
        template_name="lab", extra_loaders=[DictLoader({OFFLINE_TEMPLATE: OFFLINE_TEMPLATE_SOURCE})]
    )
    exporter.template_file = OFFLINE_TEMPLATE
    exporter.embed_images = True
    body, _ = exporter.from_notebook_node(
        nbformat.read(notebook, as_version=4), resources={"metadata": {"name": notebook.stem}}
    )
    page = notebook.with_suffix(".html")
    page.write_text(body, encoding="utf-8")
    return page


def read_health(settings: Settings, since: datetime) -> list[Verdict]:
    """The health verdicts of every query run that recorded progress at or after ``since``, read from
    ``stream_progress`` under ``settings`` and judged by the health rules with the queries' declared triggers.
    Raises when there is nothing to read or it cannot be read."""
    location = table(settings, "stream_progress").location
    if location and not os.path.isdir(os.path.join(location, "_delta_log")):
        raise FileNotFoundError(f"no stream_progress table at {location}")
    with jvm_console_to(Path(settings.base_path) / "logs" / "report-spark.log"):  # its start-up lines are not news
        spark = get_spark()
    progress = read_progress(spark, settings)
    if len(progress):
        progress = progress[pd.to_datetime(progress.timestamp, utc=True) >= pd.Timestamp(since)]
    return check_health(progress, trigger_intervals(settings))


def run_health(read: Callable[[], list[Verdict]]) -> RunHealth:
    """The verdicts ``read`` returns (e.g. :func:`read_health` for a run's settings); a failure becomes the one
    sentence the index shows instead, never the run's end."""
    try:
        return RunHealth(read())
    except Exception as exc:  # a report without verdicts beats a run that ends in a traceback
        first_line = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        reason = first_line if len(first_line) <= 300 else first_line[:299] + "…"
        return RunHealth(problem=f"Health verdicts unavailable: stream_progress could not be read ({reason}).")


def write_report(run_dir: Path, tasks: Sequence[TaskRun], health: RunHealth, title: str | None = None) -> Path:
    """Render every executed notebook of the run and write ``index.html``; returns the index."""
    for task in tasks:
        if task.status != "not run" and task.notebook.exists():
            render_notebook(task.notebook)
    index = run_dir / INDEX
    index.write_text(index_page(title or f"sensor-cep run {run_dir.name}", tasks, health), encoding="utf-8")
    return index


# ------------------------------------------------------------------------------ the index page
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border-bottom: 1px solid #ddd; padding: .35em .8em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.succeeded, .healthy { color: #1a7f37; }
.failed, .unhealthy { color: #cf222e; font-weight: bold; }
.not-run, .note { color: #777; }
"""


def index_page(title: str, tasks: Sequence[TaskRun], health: RunHealth) -> str:
    """The index: the tasks in run order, then the health verdicts (unhealthy first) or why there are none."""
    esc = html.escape
    rows = "\n".join(
        "<tr>"
        f"<td>{esc(t.key)}</td>"
        f"<td>{_task_links(t)}</td>"
        f'<td class="{t.status.replace(" ", "-")}">{esc(t.status)}</td>'
        f"<td>{'' if t.seconds is None else f'{t.seconds:,.1f} s'}</td>"
        "</tr>"
        for t in tasks
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>{esc(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{esc(title)}</h1>
<h2>Tasks</h2>
<table id="tasks">
<tr><th>task</th><th>notebook</th><th>status</th><th>duration</th></tr>
{rows}
</table>
<h2>Health of the streaming queries</h2>
{_health_section(health)}
<p class="note">Written {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC by the local job runner.</p>
</body>
</html>
"""


def _task_links(task: TaskRun) -> str:
    page, notebook = task.notebook.with_suffix(".html"), task.notebook
    if task.status == "not run" or not notebook.exists():
        return html.escape(notebook.name)
    console = notebook.parent / f"{task.key}.log"
    links = [f'<a href="{_href(page)}">{html.escape(notebook.stem)}</a>', f'<a href="{_href(notebook)}">ipynb</a>']
    if console.exists():
        links.append(f'<a href="{_href(console)}">console</a>')
    return " · ".join(links)


def _href(path: Path) -> str:
    return html.escape(path.name, quote=True)


def _health_section(health: RunHealth) -> str:
    if health.problem is not None:
        return f'<p id="health-problem" class="note">{html.escape(health.problem)}</p>'
    if not health.verdicts:
        return '<p id="health-line" class="note">No streaming query recorded progress during this run.</p>'
    rows = "\n".join(
        "<tr>"
        f"<td>{html.escape(str(row.query_name))}</td>"
        f"<td>{html.escape(row.rule)}</td>"
        f'<td class="{"healthy" if row.healthy else "unhealthy"}">{"healthy" if row.healthy else "unhealthy"}</td>'
        f"<td>{html.escape(row.summary)}</td>"
        "</tr>"
        for row in health_table(health.verdicts).itertuples()
    )
    return (
        f'<p id="health-line">{html.escape(health_line(health.verdicts))}</p>\n'
        '<table id="health">\n<tr><th>query</th><th>rule</th><th>verdict</th><th>summary</th></tr>\n'
        f"{rows}\n</table>"
    )
