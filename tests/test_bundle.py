"""The bundle is the single source of truth for the job: validated offline, paths and widgets checked.

A real `databricks bundle validate` needs a workspace login; the typed models of
`databricks-bundles` stand in for it here (they reject unknown fields).
"""
import ast
import json

import nbformat
import pytest
import yaml
from databricks.bundles.jobs import Job

from sensorcep import jobs
from sensorcep.settings import PROJECT_ROOT, parameter_names

ROOT_YAML = yaml.safe_load((PROJECT_ROOT / "databricks.yml").read_text())


def _job_yaml():
    found = jobs.load_job()
    return found["path"], found["job"]


def _widgets_read(notebook) -> set[str]:
    names = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "settings_from_widgets":
                names |= {elt.value for elt in node.args[1].elts}
    return names


def test_job_definition_parses_with_the_databricks_models():
    _, job = _job_yaml()
    model = Job.from_dict(job)
    assert [t.task_key for t in model.tasks][0] == "ingest"


def test_always_on_job_parses_and_runs_continuously_with_a_real_time_mode_cluster():
    found = jobs.load_job(jobs.ALWAYS_ON_JOB_KEY)
    model = Job.from_dict(found["job"])
    assert model.continuous is not None and model.schedule is None
    clusters = {c["job_cluster_key"]: c["new_cluster"] for c in found["job"]["job_clusters"]}
    alerts_task = next(t for t in found["job"]["tasks"] if t["task_key"] == "alerts")
    realtime = clusters[alerts_task["job_cluster_key"]]
    # Databricks' "Set up real-time mode": classic compute, dedicated access mode, fixed size, no Photon, no spot
    assert realtime["data_security_mode"] == "SINGLE_USER" and "autoscale" not in realtime
    assert realtime["runtime_engine"] == "STANDARD" and realtime["aws_attributes"]["availability"] == "ON_DEMAND"
    assert realtime["spark_conf"]["spark.databricks.streaming.realTimeMode.enabled"] == "true"
    assert alerts_task["python_wheel_task"]["named_parameters"]["alerts_trigger"] == "${var.alerts_trigger}"
    assert ROOT_YAML["variables"]["alerts_trigger"]["default"] == "realtime"
    assert all(c.get("data_security_mode") for c in clusters.values()), "an access mode on every cluster"
    assert all(t["libraries"] == [{"whl": "../dist/*.whl"}] for t in found["job"]["tasks"])
    assert ROOT_YAML["artifacts"]["sensorcep_wheel"]["type"] == "whl"


def test_pipeline_job_is_scheduled_and_dev_pauses_schedule_and_always_on_job():
    _, job = _job_yaml()
    assert Job.from_dict(job).schedule.quartz_cron_expression
    assert job["schedule"]["pause_status"] == "${var.pipeline_schedule_pause_status}"
    dev = ROOT_YAML["targets"]["dev"]["variables"]
    assert dev["pipeline_schedule_pause_status"] == dev["streaming_pause_status"] == "PAUSED"
    assert ROOT_YAML["variables"]["streaming_pause_status"]["default"] == "UNPAUSED"


def test_databricks_yml_has_dev_default_and_prod_targets():
    assert ROOT_YAML["include"] == ["bundles/*.yml"]
    assert ROOT_YAML["targets"]["dev"]["mode"] == "development" and ROOT_YAML["targets"]["dev"]["default"] is True
    assert ROOT_YAML["targets"]["prod"]["mode"] == "production"


def test_every_variable_used_is_declared_and_a_setting_or_a_deployment_knob():
    used = {name for path in (PROJECT_ROOT / "bundles").glob("*.yml") for name in jobs.VAR.findall(path.read_text())}
    declared = set(ROOT_YAML["variables"])
    assert used <= declared
    deployment = {"node_type_id", "realtime_workers", "streaming_pause_status", "pipeline_schedule_pause_status",
                  "streaming_trigger"}
    assert used - deployment <= set(parameter_names())


@pytest.mark.parametrize("task", jobs.tasks(), ids=lambda t: t.key)
def test_task_notebook_exists_and_reads_every_base_parameter(task):
    assert task.notebook.exists(), task.notebook
    assert set(task.parameters) <= _widgets_read(task.notebook)


def test_tasks_run_in_dependency_order_with_local_values(monkeypatch):
    monkeypatch.delenv("SENSORCEP_BASE_PATH", raising=False)
    ordered = jobs.tasks(params={"base_path": "/tmp/x"})
    seen = set()
    for task in ordered:
        assert set(task.depends_on) <= seen
        seen.add(task.key)
    assert ordered[0].parameters["base_path"] == "/tmp/x"
    assert "${" not in json.dumps([t.parameters for t in ordered])


def test_unknown_variable_is_a_clear_error():
    with pytest.raises(jobs.JobError, match=r"\$\{var.nope\}"):
        jobs.resolve("${var.nope}", {})


def test_prod_cluster_carries_the_tuning_recommendation_with_databricks_names():
    from sensorcep import tuning

    prod = ROOT_YAML["targets"]["prod"]["resources"]["jobs"]["sensor_cep_pipeline"]["job_clusters"][0]
    _, job = _job_yaml()
    assert prod["job_cluster_key"] == job["job_clusters"][0]["job_cluster_key"]  # merged by key on deploy
    expected = tuning.databricks_conf(tuning.presets()[tuning.RECOMMENDED])
    assert expected.items() <= prod["new_cluster"]["spark_conf"].items()
    assert "com.databricks" in expected[tuning.PROVIDER]


def test_every_state_store_setting_in_the_bundle_is_a_real_key():
    from sensorcep import tuning

    _, job = _job_yaml()
    confs = [c["new_cluster"]["spark_conf"] for c in job["job_clusters"]]
    confs.append(ROOT_YAML["targets"]["prod"]["resources"]["jobs"]["sensor_cep_pipeline"]["job_clusters"][0]
                 ["new_cluster"]["spark_conf"])
    for key in (k for conf in confs for k in conf):
        if key.startswith(tuning.ROCKSDB_PREFIX):
            assert key[len(tuning.ROCKSDB_PREFIX):] in tuning.ROCKSDB_OPTIONS, key
        if "asyncCheckpoint" in key:
            assert key == tuning.ASYNC_CHECKPOINT, key
