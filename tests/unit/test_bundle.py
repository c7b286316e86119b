"""The bundle is the single source of truth for the jobs: validated offline, paths and widgets checked.

A real `databricks bundle validate` needs a workspace login; the typed models of `databricks-bundles` stand in
for it here (they reject unknown fields), and :func:`resolved` merges a target and substitutes its variables the
way `bundle deploy` does, for the points that can be checked without a workspace.
"""

import ast
import dataclasses
import inspect
import json
import re

import nbformat
import pytest
from databricks.bundles.jobs import Job
from databricks.bundles.schemas import Schema
from databricks.bundles.volumes import Volume
from support.bundle import GIVEN, JOB_KEYS, ROOT_YAML, job_yaml, resolved

from sensorcep.local import jobs
from sensorcep.pipeline import registry
from sensorcep.settings import PROJECT_ROOT, Settings, parameter_names


def _widgets_of_task(task) -> set[str]:
    return _widgets_read(task.notebook) if task.notebook is not None else set()


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
    _, job = job_yaml()
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
    assert realtime["runtime_engine"] == "STANDARD" and "aws_attributes" not in realtime, "each target's cloud"
    for target in ("dev", "prod"):  # no spot nodes: the target's override, merged by job_cluster_key
        streaming = resolved(target)["resources"]["jobs"][jobs.ALWAYS_ON_JOB_KEY]
        (merged,) = [c["new_cluster"] for c in streaming["job_clusters"] if c["job_cluster_key"] == "realtime_cluster"]
        assert merged["aws_attributes"]["availability"] == "ON_DEMAND" and merged["num_workers"] == 2, target
    assert realtime["spark_conf"]["spark.databricks.streaming.realTimeMode.enabled"] == "true"
    assert alerts_task["python_wheel_task"]["named_parameters"] == {"task": "alerts"}
    assert {"name": "alerts_trigger", "default": "${var.alerts_trigger}"} in found["job"]["parameters"]
    assert ROOT_YAML["variables"]["alerts_trigger"]["default"] == "realtime"
    assert all(c.get("data_security_mode") for c in clusters.values()), "an access mode on every cluster"
    assert all(t["libraries"] == [{"whl": "../dist/*.whl"}] for t in found["job"]["tasks"])
    assert ROOT_YAML["artifacts"]["sensorcep_wheel"]["type"] == "whl"


def test_pipeline_job_is_scheduled_and_dev_pauses_schedule_and_always_on_job():
    _, job = job_yaml()
    assert Job.from_dict(job).schedule.quartz_cron_expression
    assert job["schedule"]["pause_status"] == "${var.pipeline_schedule_pause_status}"
    dev = ROOT_YAML["targets"]["dev"]["variables"]
    assert dev["pipeline_schedule_pause_status"] == dev["streaming_pause_status"] == "PAUSED"
    assert ROOT_YAML["variables"]["streaming_pause_status"]["default"] == "UNPAUSED"
    assert ROOT_YAML["variables"]["pipeline_schedule_pause_status"]["default"] == "PAUSED"


def _writers(job: dict) -> bool:
    """Whether a deployed job starts runs by itself (an unpaused schedule or continuous run)."""
    trigger = job.get("schedule") or job.get("continuous") or {}
    return bool(trigger) and trigger.get("pause_status", "UNPAUSED") == "UNPAUSED"


def _query_starters(job_key: str) -> set[str]:
    """The ``start_*`` functions a job's tasks call (its notebooks' cells, its wheel tasks' always-on functions)."""
    found = set()
    for task in jobs.tasks(job_key):
        if task.notebook is not None:
            sources = [c.source for c in nbformat.read(task.notebook, as_version=4).cells if c.cell_type == "code"]
        else:
            sources = [inspect.getsource(q.start) for q in registry.tasks()[task.parameters["task"]]]
        found |= {name for source in sources for name in re.findall(r"\b(start_\w+)\(", source)}
    return found


@pytest.mark.parametrize("target", ["dev", "prod"])
@pytest.mark.parametrize(
    "choice",
    [{}, {"streaming_pause_status": "PAUSED", "pipeline_schedule_pause_status": "UNPAUSED"}],
    ids=["default", "hourly-instead"],
)
def test_no_two_jobs_that_run_by_themselves_share_a_checkpoint(target, choice):
    bundle_jobs = resolved(target, {**GIVEN, **choice})["resources"]["jobs"]
    bases = {next(p["default"] for p in job["parameters"] if p["name"] == "base_path") for job in bundle_jobs.values()}
    assert len(bases) == 1, "every job keeps its checkpoints under the same base_path"
    running = [key for key, job in bundle_jobs.items() if _writers(job)]
    writing = [key for key in running if _query_starters(key)]
    assert len(writing) <= 1, f"{target}: {writing} all run by themselves and start queries on the same checkpoints"
    assert len(running) == (0 if target == "dev" and not choice else 1)  # dev pauses both unless told


def test_a_required_variable_without_a_value_is_refused():
    """The CLI refuses `bundle validate` and `deploy` while a declared variable has no default, no lookup and no value
    from the target, --var or BUNDLE_VAR_* ("no value assigned to required variable", its
    ``bundle/config/mutator/set_variables.go``): the bundle leaves exactly these to the deployer."""
    required = {name for name, v in ROOT_YAML["variables"].items() if "default" not in v and "lookup" not in v}
    unset = {target: sorted(required - set(spec.get("variables", {}))) for target, spec in ROOT_YAML["targets"].items()}
    assert unset == {
        "dev": ["catalog", "kafka_bootstrap_servers"],  # dev runs as the deploying user: no service principal
        "prod": ["catalog", "kafka_bootstrap_servers", "service_principal_id"],
    }
    assert sorted(GIVEN) == unset["prod"], "the tests' deployer gives exactly these"


def test_databricks_yml_has_dev_default_and_prod_targets():
    assert ROOT_YAML["include"] == ["bundles/*.yml"]
    assert ROOT_YAML["targets"]["dev"]["mode"] == "development" and ROOT_YAML["targets"]["dev"]["default"] is True
    assert ROOT_YAML["targets"]["prod"]["mode"] == "production"


def test_every_variable_used_is_declared_and_a_setting_or_a_deployment_knob():
    texts = [(PROJECT_ROOT / "databricks.yml").read_text()] + [
        p.read_text() for p in (PROJECT_ROOT / "bundles").glob("*.yml")
    ]
    used = {name for text in texts for name in jobs.VAR.findall(text)}
    declared = set(ROOT_YAML["variables"])
    assert used <= declared
    deployment = {
        "node_type_id",
        "realtime_workers",
        "streaming_pause_status",
        "pipeline_schedule_pause_status",
        "streaming_trigger",
        "catalog",
        "schema",
        "notification_email",
        "service_principal_id",
        "prod_permissions",
    }
    assert used - deployment <= set(parameter_names())


def test_every_variable_the_docs_tell_a_deployer_to_set_is_declared():
    """``--var name=...`` in the docs is what a deployer types; the CLI refuses a variable the bundle lacks."""
    texts = [PROJECT_ROOT / "README.md", PROJECT_ROOT / "databricks.yml", *(PROJECT_ROOT / "docs").glob("*.md")]
    told = {name for path in texts for name in re.findall(r"--var[ =]([a-z_]+)=", path.read_text())}
    assert {"catalog", "schema", "incident_page_url"} <= told
    assert told <= set(ROOT_YAML["variables"]), told - set(ROOT_YAML["variables"])


#: bundle variables that are settings but deliberately differ from the laptop's default, and why
DEPLOYED_DIFFERENTLY = {
    "kafka_secret_scope": "the workspace reads SASL credentials from a secret scope; the laptop's broker has none",
    "tuning_preset": "04 on a cluster runs the full matrix; the laptop's default is the quick one",
    "kafka_bootstrap_servers": "required: no placeholder broker (bundle validate names it)",
    "catalog": "required: newer workspaces have no `main` catalog",
    "records_trigger": "the always-on job keeps tables at 1 minute to idle cheaply; a laptop's run goes at `trigger`",
    "min_batch_records": "the always-on ingest waits for records while the fleet is quiet; a laptop's run batches at "
    "every trigger",
}


def test_the_bundle_restates_no_settings_default_it_does_not_mean_to_change():
    """A variable that is a setting carries the setting's own default, or is listed above with the reason it differs:
    the two cannot drift apart silently."""
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}

    def text(value) -> str:  # as a job parameter gives it: a bool as "true" / "false"
        return str(value).lower() if isinstance(value, bool) else str(value)

    differ = {
        name: (spec.get("default"), defaults[name])
        for name, spec in ROOT_YAML["variables"].items()
        if name in defaults and str(spec.get("default")) != text(defaults[name])
    }
    assert set(differ) == set(DEPLOYED_DIFFERENTLY), differ


#: job parameters whose literal default differs from the setting's on purpose: (job, parameter) and why
JOB_DEFAULTS_DIFFER = {
    (jobs.JOB_KEY, "alerts_trigger"): "a batch job: real-time mode is the always-on job's",
}


@pytest.mark.parametrize("job_key", JOB_KEYS)
def test_a_job_parameter_written_out_carries_the_settings_default(job_key):
    """A literal default in a job's ``parameters`` is the setting's own (or listed above with its reason): the
    always-on job and the scheduled one cannot run with windows or timeouts that drifted apart."""
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    differ = {
        p["name"]: (p["default"], defaults[p["name"]])
        for p in jobs.load_job(job_key)["job"]["parameters"]
        if p["name"] in defaults
        and "${" not in str(p["default"])
        and "{{" not in str(p["default"])
        and str(p["default"]) != str(defaults[p["name"]])
    }
    assert set(differ) == {name for job, name in JOB_DEFAULTS_DIFFER if job == job_key}, differ


def test_settings_given_to_the_always_on_job_reach_every_task():
    """The lifecycle's and device activity's timeouts are job parameters of the always-on job: a value given for a
    local run (or a job run's parameters on Databricks) reaches each task's settings."""
    given = {"ack_timeout": "2 minutes", "device_timeout": "3 minutes", "window_duration": "2 minutes"}
    tasks = jobs.tasks(jobs.ALWAYS_ON_JOB_KEY, params=given)
    assert [task.key for task in tasks] == ["ingest", "sampling_state", "alerts", "alert_records"]
    for task in tasks:
        assert {k: task.parameters[k] for k in given} == given, task.key
        assert Settings.from_mapping({k: v for k, v in task.parameters.items() if k != "task"}).ack_timeout == (
            "2 minutes"
        )


def test_a_value_for_a_parameter_the_job_does_not_have_is_a_clear_error():
    """Before, a misspelt or undeclared parameter was dropped silently and the job ran on the default."""
    with pytest.raises(jobs.JobError, match=r"job 'sensor_cep_streaming' has no parameter ack_timout .*ack_timeout"):
        jobs.tasks(jobs.ALWAYS_ON_JOB_KEY, params={"ack_timout": "2 minutes"})
    # a bundle variable the job's definition reads is a value it uses
    tasks = jobs.tasks(jobs.ALWAYS_ON_JOB_KEY, params={"streaming_trigger": "7 seconds"})
    assert {t.parameters["trigger"] for t in tasks} == {"7 seconds"}


@pytest.mark.parametrize("task", jobs.tasks() + jobs.tasks(jobs.TUNING_JOB_KEY), ids=lambda t: t.key)
def test_every_widget_a_task_notebook_reads_is_a_parameter_of_its_job(task):
    assert task.notebook.exists(), task.notebook
    assert _widgets_read(task.notebook) <= set(task.parameters)


@pytest.mark.parametrize("notebook", sorted((PROJECT_ROOT / "notebooks").rglob("*.ipynb")), ids=lambda p: p.name)
def test_a_notebook_that_reads_the_rules_reads_the_extra_fields_they_may_name(notebook):
    """A rule may read a field kept through ``extra_fields`` (docs/rules.md): a notebook that loads the rules without
    that widget checks them against no extra field, and refuses such a rule whatever the job's parameter says."""
    read = _widgets_read(notebook)
    assert "rules_file" not in read or "extra_fields" in read


@pytest.mark.parametrize("job_key", JOB_KEYS)
def test_every_job_parameter_is_declared_once_and_read_by_a_task(job_key):
    job = jobs.load_job(job_key)["job"]
    names = [p["name"] for p in job["parameters"]]
    assert len(names) == len(set(names)) and set(names) <= set(parameter_names())
    tasks = jobs.tasks(job_key)
    read = set().union(*(_widgets_of_task(t) for t in tasks)) if tasks[0].notebook else set(parameter_names())
    assert set(names) <= read
    for task in job["tasks"]:  # no task repeats a job parameter
        own = (
            (task.get("notebook_task") or {}).get("base_parameters")
            or task.get("python_wheel_task", {}).get("named_parameters")
            or {}
        )
        assert not set(own) & set(names), task["task_key"]


def test_tasks_run_in_dependency_order_with_local_values(monkeypatch):
    monkeypatch.delenv("SENSORCEP_BASE_PATH", raising=False)
    ordered = jobs.tasks(params={"base_path": "/tmp/x"})
    seen = set()
    for task in ordered:
        assert set(task.depends_on) <= seen
        seen.add(task.key)
    assert ordered[0].parameters["base_path"] == "/tmp/x"
    assert "${" not in json.dumps([t.parameters for t in ordered])


def test_local_values_of_workspace_references_and_dynamic_values(monkeypatch):
    monkeypatch.setenv("SENSORCEP_BASE_PATH", "/tmp/local-data")
    by_key = {t.key: t for t in jobs.tasks()}
    assert by_key["ingest"].parameters["base_path"] == "/tmp/local-data"  # the volume: a local folder instead
    assert by_key["monitoring"].parameters["job_id"] == ""  # {{job.id}}: no job locally
    # the deployed schema (dev_<user>_sensor_cep), the workspace catalog: locally the same names in Spark's catalog
    names = {k: by_key["ingest"].parameters[k] for k in ("tables", "catalog", "schema")}
    assert names == {"tables": "catalog", "catalog": "", "schema": "sensor_cep"}
    with pytest.raises(jobs.JobError, match="names workspace resources"):
        jobs.local_value("catalog_path", "${resources.volumes.x.name}", {}, {})


def test_unknown_variable_is_a_clear_error():
    with pytest.raises(jobs.JobError, match=r"\$\{var.nope\}"):
        jobs.resolve("${var.nope}", {})


def test_prod_cluster_carries_the_tuning_recommendation_with_databricks_names():
    from sensorcep import tuning

    prod = ROOT_YAML["targets"]["prod"]["resources"]["jobs"]["sensor_cep_pipeline"]["job_clusters"][0]
    _, job = job_yaml()
    assert prod["job_cluster_key"] == job["job_clusters"][0]["job_cluster_key"]  # merged by key on deploy
    expected = tuning.databricks_conf(tuning.presets()[tuning.RECOMMENDED])
    assert expected.items() <= prod["new_cluster"]["spark_conf"].items()
    assert "com.databricks" in expected[tuning.PROVIDER]


def test_every_state_store_setting_in_the_bundle_is_a_real_key():
    from sensorcep import tuning

    _, job = job_yaml()
    confs = [c["new_cluster"]["spark_conf"] for c in job["job_clusters"]]
    confs.append(
        ROOT_YAML["targets"]["prod"]["resources"]["jobs"]["sensor_cep_pipeline"]["job_clusters"][0]["new_cluster"][
            "spark_conf"
        ]
    )
    for key in (k for conf in confs for k in conf):
        if key.startswith(tuning.ROCKSDB_PREFIX):
            assert key[len(tuning.ROCKSDB_PREFIX) :] in tuning.ROCKSDB_OPTIONS, key
        if "asyncCheckpoint" in key:
            assert key == tuning.ASYNC_CHECKPOINT, key


@pytest.mark.parametrize("target", ["dev", "prod"])
def test_resolved_bundle_is_deployable_offline_checks(target):
    bundle = resolved(target)
    resources = bundle["resources"]
    assert set(resources["jobs"]) == set(JOB_KEYS)
    for key, job in resources["jobs"].items():
        Job.from_dict(job)
        for cluster in job["job_clusters"]:  # without an access mode a job cluster has no Unity Catalog
            assert cluster["new_cluster"]["data_security_mode"] == "SINGLE_USER", (key, cluster["job_cluster_key"])
        for task in job["tasks"]:  # the package reaches the executors' Python workers as an installed wheel
            assert task["libraries"] == [{"whl": "../dist/*.whl"}], (key, task["task_key"])
        assert job["email_notifications"]["on_failure"] == [ROOT_YAML["variables"]["notification_email"]["default"]]
        base = next(p["default"] for p in job["parameters"] if p["name"] == "base_path")
        assert base == "/Volumes/main/${resources.schemas.sensor_cep.name}/${resources.volumes.sensor_cep_data.name}"
    schema = resources["schemas"]["sensor_cep"]
    volume = resources["volumes"]["sensor_cep_data"]
    assert (schema["catalog_name"], schema["name"]) == ("main", "sensor_cep")
    assert volume["schema_name"] == "${resources.schemas.sensor_cep.name}" and volume["volume_type"] == "MANAGED"
    Schema.from_dict(schema), Volume.from_dict(volume)
    if target == "prod":  # the jobs' identity may create and write the tables, and keep checkpoints on the volume
        principal = GIVEN["service_principal_id"]
        assert schema["grants"] == [
            {"principal": principal, "privileges": ["USE_SCHEMA", "CREATE_TABLE", "SELECT", "MODIFY"]}
        ]
        assert volume["grants"] == [{"principal": principal, "privileges": ["READ_VOLUME", "WRITE_VOLUME"]}]
    for job in resources["jobs"].values():  # tables by Unity Catalog name, in the schema the bundle deploys
        names = {p["name"]: p["default"] for p in job["parameters"]}
        assert (names["catalog"], names["schema"]) == ("main", "${resources.schemas.sensor_cep.name}")
        assert names["tables"] == "catalog"
    pipeline = resources["jobs"][jobs.JOB_KEY]
    assert {"name": "job_id", "default": "{{job.id}}"} in pipeline["parameters"]
    assert "job_id" in _widgets_read(PROJECT_ROOT / "notebooks" / "05_monitoring.ipynb")
    assert "state_tuning" not in {t["task_key"] for t in pipeline["tasks"]}, "tuning is a job of its own"
    tuning_job = resources["jobs"][jobs.TUNING_JOB_KEY]
    assert "schedule" not in tuning_job and "continuous" not in tuning_job
    always_on = resources["jobs"][jobs.ALWAYS_ON_JOB_KEY]["continuous"]["pause_status"]
    assert (pipeline["schedule"]["pause_status"], always_on) == (
        ("PAUSED", "PAUSED") if target == "dev" else ("PAUSED", "UNPAUSED")
    )
    if target == "prod":
        assert bundle["run_as"] == {"service_principal_name": GIVEN["service_principal_id"]}
        assert bundle["git"]["branch"] == "main"
        # one prod copy whoever deploys (tests/unit/test_deploy.py)
        assert bundle["workspace"]["root_path"] == "/Workspace/Shared/.bundle/${bundle.name}/${bundle.target}"


def test_no_cluster_depends_on_a_file_spark_must_open_at_start():
    # Spark opens spark.scheduler.allocation.file when the SparkContext starts and fails if it cannot read it; the
    # job clusters run FAIR with pools created on first use instead
    for target in ("dev", "prod"):
        for job in resolved(target)["resources"]["jobs"].values():
            for cluster in job["job_clusters"]:
                conf = cluster["new_cluster"].get("spark_conf", {})
                assert "spark.scheduler.allocation.file" not in conf, cluster["job_cluster_key"]
                assert not any("/Workspace" in str(v) for v in conf.values()), cluster["job_cluster_key"]


def test_the_wheel_gets_a_new_version_each_deploy_and_deploys_skip_what_clusters_never_read():
    assert ROOT_YAML["artifacts"]["sensorcep_wheel"]["dynamic_version"] is True
    assert {"tests", "benchmarks", "jvm/target"} <= set(ROOT_YAML["sync"]["exclude"])
    assert "default" not in ROOT_YAML["variables"]["catalog"], "newer workspaces have no `main` catalog"


def test_the_bundle_artifact_builds_a_wheel_with_the_package_and_its_entry_point(tmp_path):
    import subprocess
    import sys
    import zipfile

    build = ROOT_YAML["artifacts"]["sensorcep_wheel"]["build"].split()
    assert build[:4] == ["python3", "-m", "pip", "wheel"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path), str(PROJECT_ROOT)],
        check=True,
    )
    (wheel,) = tmp_path.glob("sensorcep-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sensorcep/pipeline/always_on.py" in names and "sensorcep/local/low_priority_daemon.py" in names
    assert {n.split("/")[1] for n in names if n.startswith("sensorcep/") and n.count("/") == 2} == {
        "pipeline",
        "io",
        "observability",
        "tuning",
        "local",
        "rules",
        "routes",
    }, "every subpackage is shipped"
    assert "sensorcep/rules/alert_rules.yaml" in names, "the packaged rule set that seeds alert_rules"
    assert "sensorcep/routes/routes.yaml" in names, "the packaged routes"
    assert not any(n.endswith("oracle.py") for n in names), "test-only code stays out of the wheel"
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "sensorcep-stream = sensorcep.pipeline.always_on:main" in entry_points
    assert "session = sensorcep.local.session:start" in entry_points.split("[sensorcep.laptop]")[1]


@pytest.mark.parametrize("job_key", JOB_KEYS)
def test_each_task_line_is_one_short_line_with_only_the_parameters_that_differ(job_key):
    declared = {p["name"] for p in jobs.load_job(job_key)["job"]["parameters"]}
    given = {"base_path": "/tmp/elsewhere", "extra_fields": "a,\nb"}
    tasks = jobs.tasks(job_key, params={k: v for k, v in given.items() if k in declared})
    assert tasks, job_key
    for task in tasks:
        line = jobs.task_line(task)
        assert "\n" not in line and line.startswith(f"▶ {task.key}: ") and len(line) < 200, line
        assert "base_path=/tmp/elsewhere" in line
        assert ("extra_fields=a, b" in line) == ("extra_fields" in task.parameters)  # one line, whatever was typed
        assert "window_duration" not in line and "kafka_bootstrap_servers" not in line  # defaults are not repeated


def test_a_notebook_task_joins_the_runs_spark_unless_it_runs_real_time_alerts():
    """Every task of the pipeline and tuning jobs is a Spark Connect client of the run's Spark application; a task
    given a real-time alerts_trigger starts a classic session of its own (Connect cannot ask for that trigger)."""
    for job_key in (jobs.JOB_KEY, jobs.TUNING_JOB_KEY):
        assert not any(jobs.own_session(task) for task in jobs.tasks(job_key)), job_key
    realtime = jobs.tasks(jobs.JOB_KEY, params={"alerts_trigger": "realtime:5 seconds"})
    assert realtime and all(jobs.own_session(task) for task in realtime)
