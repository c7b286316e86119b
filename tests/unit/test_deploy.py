"""What a first `bundle deploy -t prod` and the always-on job's first run need (issue 42), checked without a workspace.

No workspace is reachable here: the bundle is checked against the Databricks CLI's typed models (``databricks-bundles``,
which reject unknown fields and values) and the way ``tests/unit/test_bundle.py``'s :func:`resolved` merges a target;
the code paths that only a cluster takes (the JVM's Kafka admin client, ``defaultParallelism``, the SDK's
``PermissionDenied``) run against stand-ins that say so. docs/deploy-checklist.md lists what only a workspace can show.
"""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml
from databricks.bundles.jobs import Job, TaskRetryMode
from databricks.bundles.schemas import Schema
from databricks.bundles.volumes import Volume
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from support.bundle import BUNDLE_DOCS, GIVEN, ROOT_YAML, resolved

from sensorcep.io import kafka
from sensorcep.local import jobs
from sensorcep.runtime import RealTimeUnavailableError
from sensorcep.settings import LOCAL_BROKER, PROJECT_ROOT, Settings, SettingsError

try:
    import tomllib
except ImportError:  # Python 3.10: tomllib's origin, pinned in requirements.txt
    import tomli as tomllib

CHECKLIST = PROJECT_ROOT / "docs" / "deploy-checklist.md"
CONSTRAINTS = PROJECT_ROOT / "tests" / "unit" / "data" / "dbr_17_3_constraints.txt"
TARGETS = ["dev", "prod"]


# ------------------------------------------------------------------------------ the bundle in the CLI's models
def test_the_databricks_models_reject_what_the_cli_would():
    with pytest.raises(ValueError, match="prevent_destroyy"):
        Schema.from_dict({"name": "s", "catalog_name": "c", "lifecycle": {"prevent_destroyy": True}})
    with pytest.raises(ValueError, match="SOMETIMES"):
        Job.from_dict({"continuous": {"task_retry_mode": "SOMETIMES"}})


@pytest.mark.parametrize("target", TARGETS)
def test_every_job_schema_and_volume_of_a_target_loads_into_the_databricks_models(target):
    for doc in BUNDLE_DOCS:  # each file as written, before any target is merged
        for job in doc.get("resources", {}).get("jobs", {}).values():
            Job.from_dict(job)
    resources = resolved(target)["resources"]
    loaded = {key: Job.from_dict(job) for key, job in resources["jobs"].items()}
    assert set(loaded) == {jobs.JOB_KEY, jobs.ALWAYS_ON_JOB_KEY, jobs.TUNING_JOB_KEY}
    Schema.from_dict(resources["schemas"]["sensor_cep"])
    Volume.from_dict(resources["volumes"]["sensor_cep_data"])


# ------------------------------------------------------------------------------ 1: no group a workspace lacks
def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for item in value.values() for k in _keys(item)}
    if isinstance(value, list):
        return {k for item in value for k in _keys(item)}
    return set()


def test_prod_names_no_group_unless_one_is_set():
    assert all("group_name" not in _keys(doc) for doc in [ROOT_YAML, *BUNDLE_DOCS]), "a group a workspace may lack"
    prod_permissions = ROOT_YAML["variables"]["prod_permissions"]
    assert prod_permissions["type"] == "complex" and prod_permissions["default"] == []
    assert ROOT_YAML["targets"]["prod"]["permissions"] == "${var.prod_permissions}"
    assert resolved("prod")["permissions"] == []  # the CLI sets no permissions on anything then
    group = [{"group_name": "data-engineers", "level": "CAN_MANAGE"}]
    assert resolved("prod", {**GIVEN, "prod_permissions": group})["permissions"] == group
    assert "permissions" not in ROOT_YAML["targets"]["dev"]


# ------------------------------------------------------------------------------ 3: one task's failure
@pytest.mark.parametrize("target", TARGETS)
def test_a_failed_always_on_task_is_retried_instead_of_restarting_the_whole_run(target):
    job = Job.from_dict(resolved(target)["resources"]["jobs"][jobs.ALWAYS_ON_JOB_KEY])
    assert job.continuous.task_retry_mode == TaskRetryMode.ON_FAILURE
    assert job.schedule is None and all(t.max_retries is None for t in job.tasks), "continuous jobs take no retries"


# ------------------------------------------------------------------------------ 4: a restart that does not hang
#: where a deploy command could be written down or scripted
COMMAND_FILES = ["Makefile", "README.md", "databricks.yml"]
COMMAND_GLOBS = ["docs/**/*.md", "bundles/*.yml", "src/**/*.py", "notebooks/**/*.ipynb", "tests/support/**/*.py"]


def _restarts() -> list[tuple[str, str]]:
    paths = [PROJECT_ROOT / name for name in COMMAND_FILES if (PROJECT_ROOT / name).exists()]
    paths += [p for pattern in COMMAND_GLOBS for p in sorted(PROJECT_ROOT.glob(pattern))]
    found = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"bundle run\b.*--restart", line):
                found.append((str(path.relative_to(PROJECT_ROOT)), line.strip()))
    return found


def test_every_written_restart_of_the_always_on_job_returns_without_waiting_for_the_run():
    # `bundle run` waits for the run to end (the CLI's job run timeout, 24 hours); a continuous run does not end
    restarts = _restarts()
    assert any(path == "docs/deploy-checklist.md" for path, _ in restarts), "the checklist gives the command"
    assert [(path, line) for path, line in restarts if "--no-wait" not in line] == []


# ------------------------------------------------------------------------------ 5: one prod copy
def test_prod_deploys_to_one_fixed_folder_whoever_deploys():
    root = resolved("prod")["workspace"]["root_path"]
    assert "${workspace.current_user" not in root and "${var." not in root
    assert root == "/Workspace/Shared/.bundle/${bundle.name}/${bundle.target}"
    assert "root_path" not in ROOT_YAML.get("workspace", {}), "dev keeps the CLI's per-user default"


# ------------------------------------------------------------------------------ 7: required values stop validate
def test_prod_needs_a_service_principal_and_brokers_given_and_dev_and_local_keep_working(monkeypatch):
    variables = ROOT_YAML["variables"]
    prod = ROOT_YAML["targets"]["prod"].get("variables", {})
    for name in ("service_principal_id", "kafka_bootstrap_servers", "catalog"):
        assert "default" not in variables[name], f"{name}: the CLI names a variable without a value at validate"
        assert name not in prod, f"{name}: the prod target gives no value, the deployer must"
    assert resolved("prod")["run_as"] == {"service_principal_name": GIVEN["service_principal_id"]}
    # dev runs as the deploying user: no service principal to give
    dev = resolved("dev", {"catalog": "main", "kafka_bootstrap_servers": "b1:9092"})
    assert "run_as" not in dev
    # the laptop runs the same jobs with the settings' own defaults
    monkeypatch.delenv("SENSORCEP_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert {t.parameters["kafka_bootstrap_servers"] for t in jobs.tasks()} == {LOCAL_BROKER}


# ------------------------------------------------------------------------------ 8: what the cluster installs
def _runtime_constraints() -> dict[str, str]:
    found = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)~=([0-9][0-9A-Za-z.]*)", line)
            assert match, f"{CONSTRAINTS.name}: {line!r} is not in the constraints file's form (name~=version)"
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def test_the_wheel_depends_only_on_what_the_databricks_runtime_ships():
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    shipped = _runtime_constraints()
    for text in pyproject["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in shipped, f"{requirement} is not in Databricks Runtime 17.3: a cluster would need PyPI for it"
        assert requirement.specifier.contains(shipped[name]), f"DBR 17.3 ships {name} {shipped[name]}, not {text}"
        assert not requirement.extras and requirement.marker is None, text
    assert "confluent-kafka" in " ".join(pyproject["project"]["optional-dependencies"]["local"])


def test_the_constraints_copy_is_of_the_runtime_the_job_clusters_run():
    assert "17.3.x-scala2.13" in CONSTRAINTS.read_text()
    versions = {
        cluster["new_cluster"]["spark_version"]
        for doc in BUNDLE_DOCS
        for job in doc.get("resources", {}).get("jobs", {}).values()
        for cluster in job["job_clusters"]
    }
    assert versions == {"17.3.x-scala2.13"}, "a new runtime: refresh tests/unit/data/dbr_17_3_constraints.txt by hand"


def test_cluster_code_imports_without_confluent_kafka():
    packages = ("io", "pipeline", "rules", "observability", "tuning")
    modules = sorted(
        f"sensorcep.{sub}.{path.stem}"
        for sub in packages
        for path in (PROJECT_ROOT / "src" / "sensorcep" / sub).glob("*.py")
        if path.stem != "__init__"
    )
    code = (
        "import importlib, sys\n"
        "sys.modules['confluent_kafka'] = sys.modules['confluent_kafka.admin'] = None  # not on a cluster\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


class _FakeAdmin:
    """Kafka's Java ``AdminClient`` as py4j shows it: describeTopics(...).allTopicNames().get(timeout, unit)."""

    def __init__(self, topics: dict[str, list[int]], log: list):
        self.topics, self.log = topics, log

    def describeTopics(self, names):  # noqa: N802 - the Java method's name
        (topic,) = names
        self.log.append(("describe", topic))

        def get(timeout, unit):
            self.log.append(("get", timeout, unit))
            if topic not in self.topics:
                raise RuntimeError("An error occurred: ExecutionException: UnknownTopicOrPartitionException: ...")
            infos = [SimpleNamespace(partition=lambda p=p: p) for p in self.topics[topic]]
            return {topic: SimpleNamespace(partitions=lambda: infos)}

        return SimpleNamespace(allTopicNames=lambda: SimpleNamespace(get=get))

    def close(self):
        self.log.append(("close",))


def _fake_jvm(topics: dict[str, list[int]], log: list, package: str):
    """A py4j ``JVMView`` stand-in: java.util.Properties, Collections, TimeUnit and ``<package>.clients.admin``."""

    class Properties(dict):
        def setProperty(self, key, value):  # noqa: N802
            self[key] = value

    def create(properties):
        log.append(("create", dict(properties)))
        return _FakeAdmin(topics, log)

    java = SimpleNamespace(
        util=SimpleNamespace(
            Properties=Properties,
            Collections=SimpleNamespace(singletonList=lambda item: [item]),
            concurrent=SimpleNamespace(TimeUnit=SimpleNamespace(MILLISECONDS="MILLISECONDS")),
        )
    )
    admin = SimpleNamespace(AdminClient=SimpleNamespace(create=create))
    root: dict = {"java": java}
    first, *rest = package.split(".")
    node = root.setdefault(first, SimpleNamespace())
    for part in rest:
        setattr(node, part, getattr(node, part, SimpleNamespace()))
        node = getattr(node, part)
    node.clients = SimpleNamespace(admin=admin)
    return SimpleNamespace(**root)


@pytest.fixture
def no_confluent_kafka(monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # the Databricks Runtime does not ship it
    monkeypatch.setitem(sys.modules, "confluent_kafka.admin", None)


def test_on_a_cluster_a_topics_partitions_come_from_the_jvms_kafka_admin_client(monkeypatch, no_confluent_kafka):
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    log: list = []
    jvm = _fake_jvm({"sensor-events": [3, 0, 2, 1]}, log, "kafkashaded.org.apache.kafka")
    monkeypatch.setattr(kafka, "classic_context", lambda spark: SimpleNamespace(_gateway=SimpleNamespace(jvm=jvm)))
    settings = Settings(kafka_bootstrap_servers="b1:9092,b2:9092")
    assert kafka.topic_partitions(settings, "sensor-events", 5, spark=object()) == [0, 1, 2, 3]
    timeouts = {"default.api.timeout.ms": "5000", "request.timeout.ms": "5000"}
    assert log[0] == ("create", {"bootstrap.servers": "b1:9092,b2:9092", **timeouts})
    assert ("get", 5000, "MILLISECONDS") in log and log[-1] == ("close",)
    log.clear()
    assert kafka.topic_partitions(settings, "no-such-topic", spark=object()) == []
    assert log[-1] == ("close",), "the admin client is closed on every path"


def test_without_confluent_kafka_or_a_classic_session_the_partition_list_stops_with_one_sentence(
    monkeypatch, no_confluent_kafka
):
    monkeypatch.setattr(kafka, "classic_context", lambda spark: None)  # Spark Connect
    for spark in (None, object()):
        with pytest.raises(kafka.KafkaClientMissingError, match=r"confluent-kafka .* or a classic Spark session"):
            kafka.topic_partitions(Settings(), "sensor-events", spark=spark)


def test_the_jvm_client_gets_the_same_sasl_login_as_the_spark_source(monkeypatch):
    monkeypatch.setattr(
        kafka,
        "security_options",
        lambda settings: {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "x"},
    )
    assert kafka.jvm_client_config(Settings(kafka_bootstrap_servers="b1:9092")) == {
        "bootstrap.servers": "b1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.jaas.config": "x",
    }


# ------------------------------------------------------------------------------ 9: real-time task slots
class _Reader:
    """``spark.readStream`` as far as read_kafka goes: it records the options and returns a marker."""

    def __init__(self):
        self.options_seen: dict = {}

    def format(self, name):
        return self

    def options(self, **options):
        self.options_seen.update(options)
        return self

    def load(self):
        return "the Kafka stream"


@pytest.fixture
def databricks_cluster(monkeypatch):
    """A dedicated Databricks cluster with 8 task slots (two 4-core workers) and an events topic of 12 partitions."""
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    state = SimpleNamespace(slots=8, partitions=list(range(12)), asked=[])
    monkeypatch.setattr(kafka, "classic_context", lambda spark: SimpleNamespace(defaultParallelism=state.slots))

    def partitions(settings, topic, timeout_s=30.0, *, spark=None):
        state.asked.append(topic)
        return state.partitions

    monkeypatch.setattr(kafka, "topic_partitions", partitions)
    return state


def test_a_real_time_reader_stops_at_its_start_naming_the_partitions_and_the_slots(databricks_cluster):
    spark = SimpleNamespace(readStream=_Reader())
    with pytest.raises(RealTimeUnavailableError) as stopped:
        kafka.read_kafka(spark, Settings(), "sensor-events", realtime=True)
    sentence = str(stopped.value)
    assert "'sensor-events''s 12 partitions" in sentence and "has 8 task slots" in sentence
    assert "realtime_workers" in sentence and sentence.count(". ") == 0 and sentence.endswith(".")
    assert spark.readStream.options_seen == {}, "stopped before the query was defined"


def test_a_real_time_reader_with_enough_slots_starts_and_micro_batch_readers_are_not_asked(databricks_cluster):
    databricks_cluster.partitions = list(range(6))  # 6 + 2 spare = 8 slots
    spark = SimpleNamespace(readStream=_Reader())
    assert kafka.read_kafka(spark, Settings(), "sensor-events", realtime=True) == "the Kafka stream"
    assert databricks_cluster.asked == ["sensor-events"]
    assert "maxOffsetsPerTrigger" not in spark.readStream.options_seen
    kafka.read_kafka(SimpleNamespace(readStream=_Reader()), Settings(), "sensor-events")
    assert databricks_cluster.asked == ["sensor-events"], "a micro-batch reader needs no slot per partition"


def test_the_slot_check_is_skipped_with_a_note_where_slots_cannot_be_known(databricks_cluster, monkeypatch, caplog):
    monkeypatch.setattr(kafka, "classic_context", lambda spark: None)  # Spark Connect: no SparkContext
    with caplog.at_level("WARNING", logger=kafka.__name__):
        kafka.check_realtime_slots(object(), Settings(), "sensor-events")
    assert "task slots not checked" in caplog.text and databricks_cluster.asked == []
    # a SparkContext with 2 slots for 12 partitions: on Databricks the check stops the reader
    monkeypatch.setattr(kafka, "classic_context", lambda spark: SimpleNamespace(defaultParallelism=2))
    with pytest.raises(RealTimeUnavailableError):
        kafka.check_realtime_slots(object(), Settings(), "sensor-events")
    databricks_cluster.asked.clear()
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION")  # the laptop: its parallelism is not its slot count
    kafka.check_realtime_slots(object(), Settings(), "sensor-events")
    assert databricks_cluster.asked == [], "skipped before the topic was asked"


# ------------------------------------------------------------------------------ 10: smaller items
def test_node_type_and_the_clouds_attributes_are_each_targets():
    assert "default" not in ROOT_YAML["variables"]["node_type_id"]
    for doc in BUNDLE_DOCS:  # the jobs name no cloud
        text = yaml.safe_dump(doc)
        assert not re.search(r"\b(aws|azure|gcp)_attributes\b", text) and "i3.xlarge" not in text
    for target in TARGETS:
        spec = ROOT_YAML["targets"][target]
        assert spec["variables"]["node_type_id"], target
        bundle = resolved(target)
        clusters = [c["new_cluster"] for job in bundle["resources"]["jobs"].values() for c in job["job_clusters"]]
        assert {c["node_type_id"] for c in clusters} == {spec["variables"]["node_type_id"]}
    # another cloud: one --var (and the target's attributes block, docs/deploy-checklist.md)
    azure = resolved("prod", {**GIVEN, "node_type_id": "Standard_D4ds_v5"})
    assert {c["new_cluster"]["node_type_id"] for c in azure["resources"]["jobs"][jobs.JOB_KEY]["job_clusters"]} == {
        "Standard_D4ds_v5"
    }


def test_prod_schema_and_volume_refuse_bundle_destroy():
    resources = resolved("prod")["resources"]
    assert Schema.from_dict(resources["schemas"]["sensor_cep"]).lifecycle.prevent_destroy is True
    assert Volume.from_dict(resources["volumes"]["sensor_cep_data"]).lifecycle.prevent_destroy is True
    dev = resolved("dev")["resources"]  # a developer's schema is theirs to drop
    assert "lifecycle" not in dev["schemas"]["sensor_cep"] and "lifecycle" not in dev["volumes"]["sensor_cep_data"]


def test_the_bundle_pins_a_cli_that_knows_every_field_it_uses():
    pinned = SpecifierSet(ROOT_YAML["bundle"]["databricks_cli_version"].replace(" ", ""))
    # lifecycle.prevent_destroy came with 0.267.0 (fixed in 0.269.0), continuous.task_retry_mode by 0.267.0
    assert pinned.contains("0.269.0") and pinned.contains("1.13.0") and not pinned.contains("0.266.0")


def _cli_short_name(user_name: str) -> str:
    """The Databricks CLI's development-mode short name (libs/textutil NormalizeString of the part before '@'):
    lower case, every character but a Unicode letter or digit replaced with '_', runs of '_' squeezed, trimmed."""
    name = "".join(c if c.isalpha() or c.isdigit() else "_" for c in user_name.split("@")[0].lower())
    return re.sub("_+", "_", name).strip("_")


@pytest.mark.parametrize(
    "user", ["jürgen.müller@example.com", "søren@example.dk", "李雷@example.cn", "ann@example.com"]
)
def test_a_development_schema_named_after_a_user_with_non_ascii_letters_is_accepted(user):
    schema = f"dev_{_cli_short_name(user)}_sensor_cep"
    Settings(catalog="main", schema=schema).validate()
    assert Settings(catalog="main", schema=schema).table_name("anomalies") == f"main.{schema}.anomalies"


@pytest.mark.parametrize("schema", ["sensor-cep", "main; DROP", "a b", "dev_`x`", "tab\tname"])
def test_a_name_spark_would_need_backquotes_for_is_still_refused(schema):
    with pytest.raises(SettingsError, match="is not a usable name"):
        Settings(catalog="main", schema=schema).validate()


class _DeniedJobs:
    """``WorkspaceClient().jobs`` for an identity without CAN_VIEW on the job (what the Jobs API answers: 403)."""

    def list_runs(self, **kwargs):
        from databricks.sdk.errors import PermissionDenied

        raise PermissionDenied(
            "User 5ff1ec1c-... does not have View permissions on Job with id 123", error_code="PERMISSION_DENIED"
        )


def test_05_says_in_one_sentence_when_its_identity_may_not_list_the_jobs_runs(capsys):
    from sensorcep.observability import workspace_runs

    client = SimpleNamespace(jobs=_DeniedJobs())
    with pytest.raises(PermissionError, match=r"may not view job 123's runs: grant it CAN_VIEW"):
        workspace_runs.recent_runs(client, 123)
    runs = workspace_runs.runs_report(Settings(job_id="123"), client)
    assert runs.empty and list(runs.columns) == workspace_runs.RUN_COLUMNS
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("this identity may not view job 123's runs") and printed.count("\n") == 0


# ------------------------------------------------------------------------------ the checklist stays true
def test_the_deploy_checklist_names_only_tests_that_exist():
    text = CHECKLIST.read_text()
    files = sorted((PROJECT_ROOT / "tests").rglob("test_*.py"))  # any tier
    named_files = set(re.findall(r"\b(test_\w+)\.py\b", text))
    assert named_files <= {p.stem for p in files}, sorted(named_files - {p.stem for p in files})
    named = set(re.findall(r"\b(test_\w+)\b(?!\.py)", text))
    defined = set(re.findall(r"^def (test_\w+)", "".join(p.read_text() for p in files), flags=re.M))
    assert named and named <= defined, sorted(named - defined)
    for must in ("service principal", "catalog", "secret scope", "PyPI", "egress", "--no-wait", "ON_FAILURE"):
        assert must in text, must


# ------------------------------------------------------------------------------ the incident page as a Databricks App
APP_REQUIREMENTS = PROJECT_ROOT / "src" / "requirements.txt"


def _app(target: str) -> dict:
    return resolved(target)["resources"]["apps"]["sensor_cep_incidents"]


@pytest.mark.parametrize("target", TARGETS)
def test_the_incident_page_app_loads_into_the_databricks_model_and_hands_in_only_its_own_resources(target):
    from databricks.bundles.apps import App

    app = _app(target)
    App.from_dict(app)
    env = {item["name"]: item for item in app["config"]["env"]}
    assert {e["value_from"] for e in env.values() if "value_from" in e} == {r["name"] for r in app["resources"]}
    settings = {f"SENSORCEP_{name.upper()}" for name in Settings.__dataclass_fields__}
    plain = {name for name in env if name.startswith("SENSORCEP_") and not name.startswith("SENSORCEP_SECRET_")}
    assert plain <= settings, f"not settings: {plain - settings}"
    assert env["SENSORCEP_SCHEMA"]["value"] == "${resources.schemas.sensor_cep.name}", "the deployed schema, dev too"
    for resource in app["resources"]:  # the jobs' Kafka credentials, read only
        assert resource["secret"]["permission"] == "READ"
        assert env[f"SENSORCEP_SECRET_{resource['secret']['key'].upper().replace('-', '_')}"]["value_from"]


def test_the_apps_source_holds_the_package_its_command_runs_and_requirements_without_pyspark():
    [doc] = [d for d in BUNDLE_DOCS if "apps" in d.get("resources", {})]
    app = doc["resources"]["apps"]["sensor_cep_incidents"]
    source = (PROJECT_ROOT / "bundles" / app["source_code_path"]).resolve()
    assert source == APP_REQUIREMENTS.parent
    command = app["config"]["command"]
    assert command[:2] == ["python", "-m"] and (source / (command[2].replace(".", "/") + ".py")).is_file()
    pins = [Requirement(line.split("#")[0]) for line in APP_REQUIREMENTS.read_text().splitlines()
            if line.split("#")[0].strip()]  # fmt: skip
    assert all(len(pin.specifier) == 1 and str(pin.specifier).startswith("==") for pin in pins), "exact pins"
    names = {canonicalize_name(pin.name) for pin in pins}
    assert "pyspark" not in names and {"databricks-connect", "fastapi", "uvicorn", "confluent-kafka"} <= names


def test_in_an_app_secrets_come_from_the_resources_env_and_spark_from_databricks_connect(monkeypatch):
    """No workspace here: Databricks Connect cannot be installed beside pyspark, so a stand-in module records the
    call (the pinned src/requirements.txt was installed and imported in a throwaway virtualenv instead: the closing
    note of this change)."""
    from sensorcep import runtime

    made = []
    builder = SimpleNamespace(getOrCreate=lambda: made.append("session") or "remote session")
    fake = SimpleNamespace(DatabricksSession=SimpleNamespace(builder=builder))
    monkeypatch.setitem(sys.modules, "databricks.connect", fake)
    monkeypatch.setenv("DATABRICKS_APP_NAME", "sensor-cep-incidents")
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    monkeypatch.setenv("SENSORCEP_SECRET_KAFKA_USERNAME", "svc-incidents")
    # the process's session is cached (``lru_cache``): in ``make test`` the worker's own is there already
    assert runtime.get_spark.__wrapped__() == "remote session" and made == ["session"]
    assert runtime.get_dbutils().secrets.get("sensor-cep", "kafka-username") == "svc-incidents"
    with pytest.raises(KeyError, match="no secret resource for it .env SENSORCEP_SECRET_KAFKA_PASSWORD"):
        runtime.get_dbutils().secrets.get("sensor-cep", "kafka-password")


def test_in_an_app_the_tables_are_the_catalogs_found_by_name_not_files_under_base_path(monkeypatch):
    """The incident page reads the jobs' Unity Catalog tables: by name, as the jobs' Databricks sessions do. Given a
    location (base_path's Volume), the first read would find the managed table's storage elsewhere and refuse it."""
    from sensorcep import runtime, settings
    from sensorcep.io import tables

    ours = settings.Settings(catalog="main", schema="sensor_cep", base_path="/Volumes/main/sensor_cep/data")
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    monkeypatch.delenv("DATABRICKS_APP_NAME", raising=False)
    assert not runtime.catalog_keeps_tables()  # a local session: files under base_path, named in each session
    assert tables.table(ours, "alert_events").location is not None
    monkeypatch.setenv("DATABRICKS_APP_NAME", "sensor-cep-incidents")
    assert runtime.is_databricks_app() and runtime.catalog_keeps_tables()
    found = tables.table(ours, "alert_events")
    assert (found.identifier, found.location) == ("main.sensor_cep.alert_events", None)
