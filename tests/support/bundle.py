"""The bundle as the Databricks CLI resolves it, for tests: ``databricks.yml`` and ``bundles/*.yml`` merged per target,
``${var.*}`` substituted (what ``bundle validate`` would print, without a workspace)."""

from __future__ import annotations

import json

import yaml

from sensorcep.local import jobs
from sensorcep.settings import PROJECT_ROOT

ROOT_YAML = yaml.safe_load((PROJECT_ROOT / "databricks.yml").read_text())


JOB_KEYS = [jobs.JOB_KEY, jobs.ALWAYS_ON_JOB_KEY, jobs.TUNING_JOB_KEY]
BUNDLE_DOCS = [yaml.safe_load(p.read_text()) for p in sorted((PROJECT_ROOT / "bundles").glob("*.yml"))]


def job_yaml():
    """(path, job) of the pipeline job's YAML."""
    found = jobs.load_job()
    return found["path"], found["job"]


def merge(base, override):
    """Target overrides merged into resources the way the CLI does: mappings by key, job clusters by their key."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    if (
        isinstance(base, list)
        and isinstance(override, list)
        and all(isinstance(i, dict) and "job_cluster_key" in i for i in base + override)
    ):
        by_key = {i["job_cluster_key"]: i for i in base}
        for item in override:
            by_key[item["job_cluster_key"]] = merge(by_key.get(item["job_cluster_key"], {}), item)
        return list(by_key.values())
    return override


#: what a deployer passes for the variables without a default (--var / BUNDLE_VAR_*)
GIVEN = {
    "catalog": "main",
    "kafka_bootstrap_servers": "b1.kafka.internal:9092",
    "service_principal_id": "5ff1ec1c-0000-4000-8000-00000000a11e",
}


def substitute(value, variables: dict):
    """``${var.x}`` in every string of ``value``: a string that is one reference takes the variable's value as it is
    (a complex variable's list or mapping), one inside other text its text."""
    if isinstance(value, dict):
        return {key: substitute(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, variables) for item in value]
    if isinstance(value, str):
        whole = jobs.VAR.fullmatch(value)
        if whole:
            return variables[whole.group(1)]
        return jobs.VAR.sub(lambda m: str(variables[m.group(1)]), value)
    return value


def resolved(target: str, given: dict | None = None) -> dict:
    """The bundle for ``target``: resources of every file merged with the target's, ``${var.*}`` substituted with
    the target's variable values and the ``given`` ones (``--var``; default :data:`GIVEN`); ``${resources.*}`` /
    ``${workspace.*}`` references are left for the workspace."""
    resources: dict = {}
    for doc in BUNDLE_DOCS:
        resources = merge(resources, doc.get("resources", {}))
    spec = ROOT_YAML["targets"][target]
    resources = merge(resources, spec.get("resources", {}))
    variables = {name: v.get("default") for name, v in ROOT_YAML["variables"].items()}
    variables.update(spec.get("variables", {}))
    variables.update(GIVEN if given is None else given)
    missing = sorted(name for name, value in variables.items() if value is None)
    assert not missing, f"no value for required variable(s) {missing}"
    bundle = substitute({**spec, "resources": resources}, variables)
    assert "${var." not in json.dumps(bundle)
    return bundle
