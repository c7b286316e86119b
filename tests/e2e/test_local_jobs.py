"""The local job runner's notebook tasks: what it saves, and what a failing cell tells its user."""

import nbformat
import pytest
from support.ports import CONNECT_PORT

from sensorcep.local import jobs


def _notebook(path, *cells):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)


def test_each_notebook_is_saved_with_its_outputs_and_its_console_beside_it(bundle, tmp_path):
    console = "import subprocess; subprocess.run(['sh', '-c', 'echo a JVM would say this >&2'])"
    params = "from sensorcep.runtime import get_dbutils; print(get_dbutils().widgets.get('events_topic'))"
    _notebook(bundle / "notebooks" / "first.ipynb", console, params)
    _notebook(bundle / "notebooks" / "second.ipynb", "print('second ran')")
    out = jobs.run(job_key="tiny", bundle_dir=bundle / "bundles", runs_dir=tmp_path / "runs", timeout=120)
    first = nbformat.read(out / "first.ipynb", as_version=4)
    assert first.cells[1].outputs[0]["text"] == "tiny-events\n"  # the job's parameter reached the notebook
    assert "a JVM would say this" in (out / "first.log").read_text()  # the console: in the log, not the terminal
    assert nbformat.read(out / "second.ipynb", as_version=4).cells[0].outputs[0]["text"] == "second ran\n"


def test_a_failing_cell_stops_the_job_and_names_the_saved_notebook_and_console(bundle, tmp_path):
    _notebook(bundle / "notebooks" / "first.ipynb", "raise ValueError('no such device')")
    _notebook(bundle / "notebooks" / "second.ipynb", "print('never')")
    with pytest.raises(
        jobs.JobError, match=r"task first failed \(notebook with outputs: .*first.ipynb; console: .*first.log\)"
    ):
        jobs.run(job_key="tiny", bundle_dir=bundle / "bundles", runs_dir=tmp_path / "runs", timeout=120)
    assert (tmp_path / "runs" / "first.ipynb").exists() and not (tmp_path / "runs" / "second.ipynb").exists()


def test_the_notebooks_of_a_run_are_spark_connect_clients_of_the_runs_spark(spark, bundle, tmp_path):
    """``sensorcep run`` serves one Spark application (the worker's session plays it here) and each kernel connects."""
    remote = f"sc://localhost:{CONNECT_PORT}"
    joined = "from sensorcep.runtime import get_spark, is_connect; spark = get_spark()\n" + (
        "print(is_connect(spark), spark.range(3).count())"
    )
    _notebook(bundle / "notebooks" / "first.ipynb", joined)
    _notebook(bundle / "notebooks" / "second.ipynb", "import os; print(os.environ.get('SPARK_REMOTE'))")
    out = jobs.run(job_key="tiny", bundle_dir=bundle / "bundles", runs_dir=tmp_path / "runs", spark_remote=remote)
    assert nbformat.read(out / "first.ipynb", as_version=4).cells[0].outputs[0]["text"] == "True 3\n"
    assert nbformat.read(out / "second.ipynb", as_version=4).cells[0].outputs[0]["text"] == f"{remote}\n"
