"""Command line: ``python -m sensorcep jars|broker|simulate|run|summary|rules|routes|incidents|backtest|docs``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from sensorcep import config_docs
from sensorcep.errors import SensorCepError
from sensorcep.io.kafka import client_config
from sensorcep.local import broker, class_archive, jars, simulator
from sensorcep.local.jobs import ALWAYS_ON_JOB_KEY, JOB_KEY, run, run_always_on
from sensorcep.local.session import jvm_console_to, serve_connect
from sensorcep.local.summary import print_summary
from sensorcep.observability.monitoring import stop_session
from sensorcep.pipeline.backtest import backtest
from sensorcep.routes import catalog as routes_catalog
from sensorcep.routes import planning, silences
from sensorcep.routes.model import load_routes
from sensorcep.rules import catalog
from sensorcep.rules.model import check_fields, load_rules
from sensorcep.runtime import get_spark
from sensorcep.settings import PROJECT_ROOT, env_settings


def _params(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--param wants name=value, got {item!r}")
        out[name] = value
    return out


def cmd_jars(args) -> None:

    if not jars.fetch():
        print(f"JVM dependencies are up to date in {jars.JARS_DIR}")
    if args.class_archive:
        class_archive.build()


def cmd_broker(args) -> None:
    settings = env_settings()
    if args.action == "up":
        print(f"starting Apache Kafka (KRaft) at {settings.kafka_bootstrap_servers} ...", flush=True)
        address = broker.up(settings.kafka_bootstrap_servers)
        print(f"Kafka broker up at {address} (data and logs: {broker.DEFAULT_DATA_DIR})")
    elif args.action == "down":
        stopped = broker.down()
        print("Kafka broker stopped (data kept)" if stopped else "Kafka broker was not running")
    else:
        print(broker.status())


def cmd_simulate(args) -> None:

    settings = env_settings(events_topic=args.topic, partitions=args.partitions)
    start = datetime.fromisoformat(args.start.replace("Z", "+00:00")) if args.start else None
    config = simulator.SimulationConfig(
        events=args.events,
        devices=args.devices,
        seed=args.seed,
        start=start,
        rate=args.rate,
        malformed_share=args.malformed_share,
        anomaly_share=args.anomaly_share,
        duplicate_share=args.duplicate_share,
        late_share=args.late_share,
        too_late_share=args.too_late_share,
    )
    broker.create_topics(
        settings.kafka_bootstrap_servers,
        [
            t
            for t in (settings.events_topic, settings.alerts_topic, settings.acks_topic, settings.escalations_topic)
            if t
        ],
        partitions=settings.partitions,
    )
    sim = simulator.generate(config)
    conf = client_config(settings)
    bootstrap = conf.pop("bootstrap.servers")
    simulator.produce(sim, bootstrap, settings.events_topic, progress=True, extra_config=conf)
    if args.acks_share > 0:
        acks = simulator.acknowledgements(sim, load_rules(settings.rules_file), args.acks_share)
        simulator.produce_records(acks, bootstrap, settings.acks_topic, extra_config=conf)
        print(f"produced {len(acks):,} acknowledgements to {settings.acks_topic}")
    if args.devices_table:
        # the JVM's start-up lines are not news
        with jvm_console_to(Path(settings.base_path) / "logs" / "simulate-spark.log"):
            get_spark()
        simulator.write_devices_table(settings, config.devices, config.seed)
        print(f"wrote the devices table: {config.devices:,} devices")
    counts = ", ".join(f"{k}={v:,}" for k, v in sorted(sim.summary().items()))
    print(
        f"produced to {settings.events_topic}: {counts}; "
        f"simulated span {config.resolved_start():%Y-%m-%d %H:%M:%S} -> {sim.end:%H:%M:%S} UTC"
    )


def cmd_run(args) -> None:

    job = args.job or JOB_KEY
    if job == ALWAYS_ON_JOB_KEY:
        run_always_on(job, _params(args.param), minutes=args.minutes, every_s=args.every, only=args.task)
        stop_session(get_spark())  # before the interpreter exits: the progress listener must not outlive Python
        return
    runs_dir = PROJECT_ROOT / "runs" / datetime.now().strftime("%Y%m%d-%H%M%S")
    # the run's Spark application, which every notebook joins as a Spark Connect client (a job cluster, locally);
    # none when the user points SPARK_REMOTE at a server of their own
    remote = None if os.environ.get("SPARK_REMOTE") else serve_connect(runs_dir / "spark.log")
    try:
        # its last line names the run's HTML report
        run(args.task, _params(args.param), job_key=job, runs_dir=runs_dir, spark_remote=remote)
        if args.summary:
            print_summary(env_settings(), runs_dir)
    finally:
        if remote:
            stop_session(get_spark())


def cmd_rules(args) -> None:
    settings = env_settings()
    path = args.file or settings.rules_file
    if args.action == "check":
        rules = check_fields(load_rules(path), settings.extra_field_names, path or "the packaged rule set")
        print(f"✔ {path or 'the packaged rule set'}: {len(rules)} valid rule(s)")
        for rule in rules:
            print(f"  {rule.id:<28} {rule.kind:<10} {rule.text}{'' if rule.enabled else '  (disabled)'}")
        return
    spark = get_spark()
    if args.action == "apply":
        changes = catalog.apply_rules(spark, settings, load_rules(path))
        print(f"✔ alert_rules: {changes}; running alert queries pick it up within {settings.rules_refresh}")
    rows = catalog.current_rows(spark, settings)
    print(f"alert_rules ({len(rows)} rule(s)):")
    for row in sorted(rows, key=lambda r: r["rule_id"]):
        state = "enabled " if row["enabled"] else "disabled"
        print(f"  {row['rule_id']:<28} v{row['rule_version']:<3} {state} {row['rule']}")


def cmd_silences(args) -> None:
    """routes silence / unsilence / silences: the silences table the notifier query reads (every rules_refresh)."""
    settings, spark = env_settings(), get_spark()
    if args.action == "silence":
        made = silences.add(spark, settings, silences.parse_matchers(args.match or []), args.duration or "",
                            args.author or "", args.comment or "")  # fmt: skip
        print(f"✔ silence {made.silence_id}: {made.matchers} until {made.ends:%Y-%m-%d %H:%M} UTC ({made.author}: "
              f"{made.comment}); the notifier reads it within {settings.rules_refresh}")  # fmt: skip
        return
    if args.action == "unsilence":
        ended = silences.end(spark, settings, args.id or "", args.author or "")
        print(f"✔ silence {ended.silence_id} ended at {ended.ends:%Y-%m-%d %H:%M} UTC")
        return
    now = datetime.now(timezone.utc)
    found = silences.current(spark, settings)
    print(f"{len(found)} silence(s):")
    for silence in found:
        state = "in force" if silence.starts <= now < silence.ends else "ended" if silence.ends <= now else "pending"
        print(f"  {silence.silence_id}  {state:<8} {silence.matchers}  {silence.starts:%Y-%m-%d %H:%M} -> "
              f"{silence.ends:%Y-%m-%d %H:%M} UTC  {silence.author}: {silence.comment}")  # fmt: skip


def cmd_incidents(args) -> None:
    """The incident page, served until Ctrl-C (a Databricks App runs ``python -m sensorcep.incidents``)."""
    from sensorcep.incidents import serve  # noqa: PLC0415 - imports FastAPI (the app extra)

    serve(args.host, args.port)


def cmd_routes_table(args) -> None:
    """routes publish / history: the routes table the notifier sends by (a new version restarts it)."""
    settings, spark = env_settings(), get_spark()
    if args.action == "publish":
        path = args.file or settings.routes_file
        if not path:
            raise SystemExit("routes publish needs --file routes.yaml (or the routes_file setting)")
        version = routes_catalog.publish(spark, settings, load_routes(path), args.author or "", path)
        if version is None:
            print(f"the routes in force are already those of {path}: nothing published")
            return
        print(f"✔ routes version {version} published from {path}; the always-on job's notifier takes it within "
              f"{settings.rules_refresh}")  # fmt: skip
        return
    held = routes_catalog.versions(spark, settings)
    print(f"routes ({len(held)} version(s), the last in force):")
    for row in held:
        when = f"{row['published_at']:%Y-%m-%d %H:%M} UTC"
        print(f"  v{row['version']:<3} {when}  {row['published_by']:<16} {row['source']}")


def cmd_routes(args) -> None:
    if args.action in ("silence", "unsilence", "silences"):
        cmd_silences(args)
        return
    if args.action in ("publish", "history"):
        cmd_routes_table(args)
        return
    routes = load_routes(args.file)
    if args.action == "check":
        print(f"✔ {args.file or 'the packaged routes'}: {len(routes.receivers)} receiver(s), {len(routes.inhibit)} "
              "inhibit rule(s)")  # fmt: skip
        for receiver in routes.receivers:
            print(f"  receiver {receiver.name:<24} {receiver.kind}")
        return
    if not args.alerts:
        raise SystemExit("routes test needs --alerts sample.json (a list of incidents' labels)")
    severity = {rule.id: rule.level for rule in load_rules(env_settings().rules_file)}
    incidents = []
    for index, labels in enumerate(json.loads(Path(args.alerts).read_text())):
        labels = {k: str(v) for k, v in labels.items() if v is not None}
        labels.setdefault("severity", severity.get(labels.get("rule_id", ""), "warning"))
        incidents.append(planning.Incident(labels.pop("incident_id", f"incident-{index + 1}"), labels))
    silences = [
        planning.Silence(s["id"], s["matchers"], datetime.fromisoformat(s["starts"]), datetime.fromisoformat(s["ends"]),
                         s.get("author", "?"), s.get("comment", ""))
        for s in (json.loads(Path(args.silences).read_text()) if args.silences else [])
    ]  # fmt: skip
    at = datetime.fromisoformat(args.at) if args.at else None
    result = planning.plan(routes, incidents, silences, at)
    print(f"{len(incidents)} incident(s): {len(result.groups)} message(s), {len(result.muted)} muted (nothing sent)")
    for group in result.groups:
        print(f"  → {group.title}")
        if group.match.escalate:
            levels = "; ".join(f"after {after_s / 60:g} min → {to}" for after_s, to in group.match.escalate)
            print(f"      unacked, escalates: {levels}")
        for incident in group.incidents:
            print(f"      {incident.incident_id}: {', '.join(f'{k}={v}' for k, v in sorted(incident.labels.items()))}")
    for incident, reason in result.muted:
        print(f"  ✗ {incident.incident_id}: {reason}")


def cmd_backtest(args) -> None:
    settings = env_settings()
    result = backtest(get_spark(), settings, load_rules(args.rules), args.start, args.end)
    print(result)
    for name, frame in (("added", result.added), ("dropped", result.dropped)):
        if len(frame):
            print(f"\nfirst {len(frame)} {name}:\n{frame.to_string(index=False)}")


def cmd_docs(args) -> None:
    changed = config_docs.write(args.file)
    print(f"{args.file}: the settings table {'rewritten' if changed else 'is up to date'}")


def cmd_summary(args) -> None:

    print_summary(env_settings(), Path(args.runs) if args.runs else None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sensorcep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "jars",
        help="fetch the pinned JVM dependencies (jvm/pom.xml) with Maven and build the JVM's class archive, once",
    )
    p.add_argument(
        "--no-class-archive",
        dest="class_archive",
        action="store_false",
        help="only the jars: local sessions start without the archive, or from one built before (make test)",
    )
    p.set_defaults(func=cmd_jars)

    p = sub.add_parser("broker", help="the local Kafka broker (Apache Kafka, KRaft mode)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("simulate", help="produce simulated sensor events to Kafka")
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--devices", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--rate", type=float, default=1_000.0, help="events per simulated second")
    p.add_argument("--start", help="simulated start (ISO-8601); default: span ends now")
    p.add_argument("--topic", default=None, help="default: the events_topic setting")
    p.add_argument(
        "--partitions", type=int, default=None, help="partitions of topics it creates (default: the partitions setting)"
    )
    p.add_argument("--malformed-share", type=float, default=0.01)
    p.add_argument("--anomaly-share", type=float, default=0.01)
    p.add_argument("--duplicate-share", type=float, default=0.01)
    p.add_argument("--late-share", type=float, default=0.02)
    p.add_argument("--too-late-share", type=float, default=0.005)
    p.add_argument(
        "--acks-share",
        type=float,
        default=0.7,
        help="share of alerts acknowledged on the acks topic (0-20 min after the event)",
    )
    p.add_argument("--devices-table", action="store_true", help="also write the devices dimension table")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("run", help="run a bundle job locally (default: the pipeline job)")
    p.add_argument(
        "--job",
        help="job key in bundles/*.yml: sensor_cep_pipeline (default) or sensor_cep_streaming "
        "(always on: runs until Ctrl-C or --minutes)",
    )
    p.add_argument("--minutes", type=float, help="always-on job: stop after this many minutes")
    p.add_argument("--every", type=float, default=10.0, help="always-on job: seconds between progress lines")
    p.add_argument(
        "--task",
        action="append",
        help="only these task keys (repeatable); always-on job: e.g. --task alerts, one cluster's tasks",
    )
    p.add_argument("--param", action="append", help="name=value job parameter override (repeatable)")
    p.add_argument("--summary", action="store_true", help="pipeline job: then the summary (rows per table, ...)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("rules", help="the alert rules: check a YAML file, apply it to alert_rules, show the table")
    p.add_argument("action", choices=["check", "apply", "show"])
    p.add_argument("--file", help="rules YAML (default: the rules_file setting, else the packaged rule set)")
    p.set_defaults(func=cmd_rules)

    p = sub.add_parser(
        "routes",
        help="incident routes: check a YAML file; test who would be paged, without sending; publish a version to the "
        "routes table, its history; silences at run time",
    )
    p.add_argument("action", choices=["check", "test", "publish", "history", "silence", "unsilence", "silences"])
    p.add_argument("--file", help="routes YAML (default: the packaged routes)")
    p.add_argument("--alerts", help="test: a JSON list of incidents' labels (rule_id, device_id, site, ...)")
    p.add_argument("--silences", help="test: a JSON list of silences (id, matchers, starts, ends, author, comment)")
    p.add_argument("--at", help="test: the moment to judge silences at (ISO-8601; default now)")
    p.add_argument("--match", action="append", help="silence: label=value (repeatable; every one must match)")
    p.add_argument("--for", dest="duration", help='silence: how long, e.g. "2 hours"')
    p.add_argument("--author", help="publish, silence, unsilence: who")
    p.add_argument("--comment", help="silence: why")
    p.add_argument("--id", help="unsilence: the silence's id (routes silences lists them)")
    p.set_defaults(func=cmd_routes)

    p = sub.add_parser("incidents", help="the incident page: open incidents; ack, snooze and silence them")
    p.add_argument("--host", default="127.0.0.1", help="default: loopback only")
    p.add_argument("--port", type=int, help="default: $DATABRICKS_APP_PORT, else 8050")
    p.set_defaults(func=cmd_incidents)

    p = sub.add_parser("backtest", help="what a candidate rule set would alert on over bronze, against anomalies")
    p.add_argument("--rules", required=True, help="the candidate rules YAML")
    p.add_argument("--from", dest="start", type=datetime.fromisoformat, help="event time from (ISO-8601, UTC)")
    p.add_argument("--to", dest="end", type=datetime.fromisoformat, help="event time before (ISO-8601, UTC)")
    p.set_defaults(func=cmd_backtest)

    p = sub.add_parser("docs", help="write the settings table of docs/configuration.md from the Settings fields")
    p.add_argument("--file", default=str(config_docs.CONFIGURATION_DOC), help="default: docs/configuration.md")
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser("summary", help="rows per table, quarantine reasons, last run's notebooks")
    p.add_argument("--runs", help="runs folder to point at (default: newest)")
    p.set_defaults(func=cmd_summary)

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except SensorCepError as exc:  # any of the project's explained failures: its one sentence, no traceback
        print(f"✘ {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
