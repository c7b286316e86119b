"""The run's HTML report, as a browser shows it: the local runner renders each executed notebook (tables, plots,
tracebacks) and an index with the tasks and the health verdicts; headless Chromium loads the pages and the tests
read the DOM it built."""

from __future__ import annotations

import shutil
import subprocess
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from support.streams import batch_stream, events, write_batches

from sensorcep.local import jobs, run_report
from sensorcep.observability.health import Verdict
from sensorcep.pipeline import streaming

TABLE_CELL = "import pandas as pd\npd.DataFrame({'device': ['d-1', 'd-2'], 'events': [3, 5]})"
PLOT_CELL = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('tiny plot');"
VERDICTS = [
    Verdict("falling_behind", "sensor_samples", "run-1", False, "processing rate below input rate for 4 batches"),
    Verdict("state_growth", "sensor_samples", "run-1", True, "state stayed bounded: 100 rows at the end"),
]
BROWSERS = ("chromium", "chromium-browser")


class Page(HTMLParser):
    """What a test asks of a DOM: each table's rows (by id, else by class) as cell texts, images, script sources,
    links, the text of elements with an id, and the body's whole text."""

    def __init__(self, dom: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[str] = []
        self.scripts: list[str] = []
        self.by_id: dict[str, str] = {}
        self.links: list[str] = []
        self.text = ""
        self._skip = 0  # inside <script> or <style>
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._ids: list[tuple[str, str, list[str]]] = []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("id") or attrs.get("class") or f"table-{len(self.tables)}"
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(attrs.get("src", ""))
        elif tag == "script" and attrs.get("src"):
            self.scripts.append(attrs["src"])
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "a":
            self.links.append(attrs.get("href", ""))
        if attrs.get("id") and tag not in ("table", "img", "script"):
            self._ids.append((tag, attrs["id"], []))

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None
        if self._ids and self._ids[-1][0] == tag:
            _, element_id, text = self._ids.pop()
            self.by_id[element_id] = " ".join("".join(text).split())

    def handle_data(self, data):
        if not self._skip:
            self.text += data
        if self._cell is not None:
            self._cell.append(data)
        for _, _, text in self._ids:
            text.append(data)


def rendered(page: Path) -> Page:
    """The DOM headless Chromium builds for ``page``."""
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    assert browser, "Chromium is not installed: apt-get install chromium (make test and make unit check for it first)"
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
    return Page(done.stdout)


def _notebook(path, *cells):
    heading = nbformat.v4.new_markdown_cell(f"# The {path.stem} step")
    nbformat.write(nbformat.v4.new_notebook(cells=[heading, *map(nbformat.v4.new_code_cell, cells)]), path)


def test_a_run_is_rendered_as_pages_a_browser_shows_with_the_tasks_outputs_and_health_verdicts(
    bundle, tmp_path, capsys
):
    _notebook(bundle / "notebooks" / "first.ipynb", TABLE_CELL)
    _notebook(bundle / "notebooks" / "second.ipynb", PLOT_CELL)
    asked = []

    def health(settings, since):
        asked.append((settings, since))
        return VERDICTS

    started = datetime.now(timezone.utc)
    out = jobs.run(job_key="tiny", bundle_dir=bundle / "bundles", runs_dir=tmp_path / "runs", read_health=health)
    index = out / "index.html"
    assert capsys.readouterr().out.rstrip().splitlines()[-1].endswith(str(index))  # the last line names the report
    [(settings, since)] = asked  # judged once, under the run's settings, from the run's start
    assert settings.events_topic == "tiny-events" and started <= since <= datetime.now(timezone.utc)

    page = rendered(index)
    tasks = page.tables["tasks"]
    assert [row[0] for row in tasks[1:]] == ["first", "second"]
    assert [row[2] for row in tasks[1:]] == ["succeeded", "succeeded"]
    assert all(row[3].endswith(" s") for row in tasks[1:])  # a duration each
    assert {"first.html", "second.html", "first.ipynb", "first.log"} <= set(page.links)
    assert page.by_id["health-line"] == "1 unhealthy verdict(s) of 2: sensor_samples / falling_behind"
    assert page.tables["health"][1] == [
        "sensor_samples",
        "falling_behind",
        "unhealthy",
        "processing rate below input rate for 4 batches",
    ]

    first = rendered(out / "first.html")
    assert ["device", "events"] == first.tables["dataframe"][0][1:]  # pandas' table, rendered from the output
    assert [row[1:] for row in first.tables["dataframe"][1:]] == [["d-1", "3"], ["d-2", "5"]]
    second = rendered(out / "second.html")
    assert [src for src in second.images if src.startswith("data:image/png;base64,")]  # the plot, embedded
    assert not first.scripts and not second.scripts  # self-contained: nothing fetched from a CDN


def test_a_failed_run_is_reported_with_the_failing_notebook_and_the_tasks_that_did_not_run(bundle, tmp_path):
    _notebook(bundle / "notebooks" / "first.ipynb", "raise ValueError('no such device')")
    _notebook(bundle / "notebooks" / "second.ipynb", "print('never')")
    with pytest.raises(jobs.JobError, match=r"the run as HTML: .*index\.html"):
        jobs.run(job_key="tiny", bundle_dir=bundle / "bundles", runs_dir=tmp_path / "runs", read_health=lambda s, t: [])
    page = rendered(tmp_path / "runs" / "index.html")
    assert [(row[0], row[2]) for row in page.tables["tasks"][1:]] == [("first", "failed"), ("second", "not run")]
    assert page.by_id["health-line"] == "No streaming query recorded progress during this run."
    assert "ValueError: no such device" in rendered(tmp_path / "runs" / "first.html").text  # the traceback


def _count(batch, batch_id):
    batch.count()


def test_read_health_judges_the_query_runs_recorded_since_the_run_began(spark, settings, tmp_path):
    write_batches(tmp_path / "in", [events(("d1", 1.0, s), ("d2", 2.0, s + 1)) for s in (10, 50, 90)])
    since = datetime.now(timezone.utc)
    streaming.run_available_now(
        batch_stream(spark, tmp_path / "in").withWatermark("event_time", "30 seconds"),
        settings,
        "report_probe",
        foreach_batch=_count,
    )
    verdicts = run_report.read_health(settings, since)
    assert {v.query_name for v in verdicts} == {settings.query_name("report_probe")}
    assert {v.rule for v in verdicts} == {
        "falling_behind",
        "slow_batches",
        "state_growth",
        "watermark_stalled",
        "late_rows",
    }
    assert run_report.read_health(settings, datetime.now(timezone.utc)) == []  # nothing recorded after the run


def test_health_that_cannot_be_read_is_one_sentence_in_the_index_not_a_crash(tmp_path):
    def unreadable():
        raise RuntimeError("DELTA_LOG_CORRUPTED: the log of stream_progress is broken\n\tat org.apache.spark...")

    index = run_report.write_report(tmp_path, [], run_report.run_health(unreadable))
    assert rendered(index).by_id["health-problem"] == (
        "Health verdicts unavailable: stream_progress could not be read "
        "(DELTA_LOG_CORRUPTED: the log of stream_progress is broken)."
    )
