"""The notifier query (issue "Incidents reach people"): the lifecycle's transitions in ``alert_events`` reach the
routes' receivers, grouped, once per notification id in the ``notifications`` ledger, even when a micro-batch is
replayed after it sent; a receiver that fails is retried, then dead-lettered, and the query goes on; a silence
created at run time mutes its incidents, each muted page a ledger row naming it. Against a real
HTTP server on loopback (no network beyond it) and real Delta tables; each run is availableNow."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from support.receiver import LoopbackReceiver
from support.streams import delta_frame

from sensorcep.io.lake import Tables
from sensorcep.pipeline import checkpoint_log, notifications
from sensorcep.pipeline.alert_lifecycle import EVENT_COLUMNS
from sensorcep.routes import catalog as routes_catalog
from sensorcep.routes import silences
from sensorcep.routes.model import load_routes
from sensorcep.routes.planning import Incident
from sensorcep.rules import catalog as rules_catalog
from sensorcep.schemas import BY_NAME

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)
ROUTES = """
receivers:
  - name: team
    webhook: {{url: "{url}/team", hmac_secret: hook-hmac}}
  - name: broken
    webhook: {{url: "{url}/broken", hmac_secret: hook-hmac}}
route:
  receiver: team
  group_by: [rule_id]
  group_wait: 1 second
  routes:
    - match: {{rule_id: on_fire}}
      receiver: broken
"""


@contextmanager
def _routed(settings, tmp_path, monkeypatch, routes: str = ROUTES, failing=()):
    """A receiver on loopback, and settings whose ``routes_file`` sends to it (its secret from the environment)."""
    monkeypatch.setenv("NT_HOOK_HMAC", "s3cret")  # the routes' secret, locally an environment variable
    with LoopbackReceiver(failing=failing) as receiver:
        (tmp_path / "routes.yaml").write_text(routes.format(url=receiver.url))
        yield receiver, settings.replace(routes_file=str(tmp_path / "routes.yaml"), routes_secret_scope="nt")


def _transitions(spark, settings, rows: list[tuple[str, str, str, str, int]]) -> None:
    """Append lifecycle transitions (incident, rule, device, transition, seconds after T0) to ``alert_events``."""
    frame = pd.DataFrame(
        [
            {
                "event_id": f"{incident}:{transition}",
                "incident_id": incident,
                "rule_id": rule,
                "device_id": device,
                "transition": transition,
                "at": T0 + timedelta(seconds=s),
                "cause_id": incident,
                "pages": transition in ("opened", "escalated"),
                "state": "open",
                "alerts": 1,
                "actor": None,
                "detail": None,
                "batch_id": 0,
                "part_date": (T0 + timedelta(seconds=s)).date(),
            }
            for incident, rule, device, transition, s in rows
        ],
        columns=EVENT_COLUMNS,
    )
    lake = Tables(spark, settings)
    lake.create(["alert_events"])
    lake.write(spark.createDataFrame(frame, BY_NAME["alert_events"].columns), "alert_events")


def test_a_fifty_device_outage_is_one_message_a_replayed_pass_sends_the_same_id_and_the_ledger_holds_it_once(
    spark, settings, tmp_path, monkeypatch
):
    with _routed(settings, tmp_path, monkeypatch, failing=("/broken",)) as (receiver, settings):
        outage = [(f"i{n}", "too_hot", f"d{n:02}", "opened", n) for n in range(50)]
        _transitions(spark, settings, [*outage, ("f1", "on_fire", "d00", "opened", 60)])

        notifications.start_notifier(spark, settings)  # opened long before the pass: past group_wait, told at once

        team, broken = receiver.at("/team"), receiver.at("/broken")
        assert len(team) == 1, "a 50-device outage grouped by rule is one message"
        listed = [i["incident_id"] for i in json.loads(team[0][2])["incidents"]]
        assert sorted(listed) == sorted(i for i, *_ in outage)
        assert len(broken) == 3 and len({h["Idempotency-Key"] for _, h, _ in broken}) == 1, "retried with one id"
        ledger = delta_frame(settings.table_path("notifications"))
        assert sorted(ledger.status) == ["dead_letter", "delivered"], "the query went on past the failing receiver"
        sent = ledger.set_index("status").loc["delivered"]
        assert sent.notification_id == team[0][1]["Idempotency-Key"] and len(sent.incident_ids) == 50
        summary = notifications.ledger_summary(spark, settings)  # 03's table of who was told
        assert [tuple(r) for r in summary.itertuples(index=False)] == [
            ("broken", "dead_letter", 1, 1),
            ("team", "delivered", 1, 50),
        ]

        # the pass' batch replayed, as after a crash between sending and its commit: the same message, the same id
        checkpoint = settings.checkpoint_path("notifier")
        last = checkpoint_log.last_committed(checkpoint)
        for name in (f"{last}", f".{last}.crc"):  # the commit and its checksum
            os.remove(f"{checkpoint}/commits/{name}")
        notifications.start_notifier(spark, settings)
        again = receiver.at("/team")
        assert len(again) == 2 and again[1][1]["Idempotency-Key"] == again[0][1]["Idempotency-Key"]
        ledger = delta_frame(settings.table_path("notifications"))
        assert len(ledger) == 2 and not ledger.notification_id.duplicated().any(), "the ledger holds each once"
        saved = os.listdir(f"{checkpoint}/{notifications.GROUPS_FOLDER}")
        assert saved == [f"{last}.json"], "the groups after the pass that changed them, in the query's checkpoint"


def test_a_silence_mutes_its_incidents_with_a_ledger_row_naming_it_and_once_ended_mutes_no_more(
    spark, settings, tmp_path, monkeypatch
):
    with _routed(settings, tmp_path, monkeypatch) as (receiver, settings):
        silence = silences.add(spark, settings, {"rule_id": "too_hot"}, "1 hour", "ann", "maintenance")
        hot = [(f"h{n}", "too_hot", f"d{n}", "opened", n) for n in range(3)]
        _transitions(spark, settings, [*hot, ("c1", "too_cold", "d9", "opened", 5)])

        notifications.start_notifier(spark, settings)

        (message,) = receiver.at("/team")
        assert [i["incident_id"] for i in json.loads(message[2])["incidents"]] == ["c1"], "only the unsilenced one"
        ledger = delta_frame(settings.table_path("notifications"))
        muted = ledger[ledger.status == "suppressed"]
        assert sorted(i for ids in muted.incident_ids for i in ids) == ["h0", "h1", "h2"]
        assert all(f"silenced by {silence.silence_id}" in r and "ann: maintenance" in r for r in muted.reason)

        ended = silences.end(spark, settings, silence.silence_id, by="bob")
        (now_listed,) = silences.current(spark, settings)
        assert now_listed == ended and ended.ends <= datetime.now(timezone.utc)
        incident = Incident("h9", {"rule_id": "too_hot", "device_id": "d9"})
        assert not now_listed.mutes(incident, datetime.now(timezone.utc)), "an ended silence mutes nothing"
        assert silence.mutes(incident, silence.starts), "the same silence muted it while in force"


def _pass_input(spark, at_s: int, transitions: list[tuple[str, str, str, str, int]]):
    """A notifier pass' input: the transitions (incident, rule, device, transition, seconds after T0) and a heartbeat,
    the pass at ``at_s`` seconds after T0."""
    rows = [(i, r, d, t, T0 + timedelta(seconds=s)) for i, r, d, t, s in transitions] + [(None,) * 5]
    frame = pd.DataFrame(rows, columns=notifications.INPUT_COLUMNS).assign(pass_at=T0 + timedelta(seconds=at_s))
    schema = "incident_id string, rule_id string, device_id string, transition string, at timestamp, pass_at timestamp"
    return spark.createDataFrame(frame, schema)


def _started(spark, settings) -> str:
    """The notifier's tables and checkpoint as its query's start leaves them, for passes driven one by one."""
    Tables(spark, settings).create(["notifications"])
    checkpoint = settings.checkpoint_path("notifier")
    os.makedirs(checkpoint)
    with open(f"{checkpoint}/metadata", "w") as handle:  # as Spark writes it when the query starts
        handle.write('{"id":"5a1e0000-0000-4000-8000-000000000001"}\n')
    return checkpoint


class _DeadLedger(notifications.Ledger):
    """A deferred ledger whose appends never run: the process was killed -9 after its passes sent."""

    def _drain(self, spark) -> None:
        pass


def test_with_an_interval_trigger_the_ledger_is_appended_behind_the_passes_and_a_dead_runs_rows_once_by_the_next(
    spark, settings, tmp_path, monkeypatch
):
    with _routed(settings, tmp_path, monkeypatch) as (receiver, settings):
        checkpoint = _started(spark, settings)
        routes = load_routes(settings.routes_file)
        run = [notifications.label_source(spark, settings), notifications.sender(routes, settings)]

        dead = notifications.Passes(settings, routes, *run, _DeadLedger(settings, deferred=True))
        dead(_pass_input(spark, 5, [("h1", "too_hot", "d1", "opened", 0), ("h2", "too_hot", "d2", "opened", 1)]), 0)
        assert len(receiver.at("/team")) == 1 and delta_frame(settings.table_path("notifications")).empty
        with open(f"{checkpoint}/{notifications.GROUPS_FOLDER}/0.json") as handle:
            assert [b for b, _ in json.load(handle)["unwritten"]] == [0], "the unappended rows are in the groups file"

        ledger = notifications.Ledger(settings, deferred=True)
        live = notifications.Passes(settings, routes, *run, ledger)
        live(_pass_input(spark, 10, []), 1)  # the next run's first pass appends what the dead one left
        assert list(delta_frame(settings.table_path("notifications")).batch_id) == [0]
        live(_pass_input(spark, 20, [("c1", "too_cold", "d9", "opened", 12)]), 2)
        live(_pass_input(spark, 21, []), 3)
        ledger.flush()

        sent = receiver.at("/team")
        assert len(sent) == 2, "each group told once"
        table = delta_frame(settings.table_path("notifications"))
        assert sorted(table.notification_id) == sorted(h["Idempotency-Key"] for _, h, _ in sent)
        assert sorted(table.batch_id) == [0, 2], "each pass' rows once, under the batch that sent them"
        assert ledger.unwritten() == []


ROUTES_V1 = """
receivers:
  - name: team
    webhook: {{url: "{url}/team", hmac_secret: hook-hmac}}
route: {{receiver: team, group_by: [rule_id], group_wait: 1 second, repeat_interval: 1 minute}}
"""
ROUTES_V2 = ROUTES_V1.replace("team", "pager")


def test_published_routes_are_versions_the_notifier_sends_by_and_a_group_of_a_receiver_gone_is_dead_lettered(
    spark, settings, tmp_path, monkeypatch
):
    with _routed(settings, tmp_path, monkeypatch, ROUTES_V1) as (receiver, settings):
        (tmp_path / "v2.yaml").write_text(ROUTES_V2.format(url=receiver.url))
        _started(spark, settings)
        labels = notifications.label_source(spark, settings)

        def run():  # as the query starts: the routes in force, a new ledger
            version, routes = routes_catalog.routes_in_force(spark, settings)
            ledger = notifications.Ledger(settings, deferred=False)
            sender = notifications.sender(routes, settings, version)
            return notifications.Passes(settings, routes, labels, sender, ledger)

        assert routes_catalog.fingerprint(spark, settings) == 1, "routes_file seeds version 1"
        run()(_pass_input(spark, 5, [("h1", "too_hot", "d1", "opened", 0)]), 0)
        assert len(receiver.at("/team")) == 1

        v2 = load_routes(tmp_path / "v2.yaml")
        assert routes_catalog.publish(spark, settings, v2, "ann", "v2.yaml") == 2
        assert routes_catalog.publish(spark, settings, v2, "bob", "v2.yaml") is None, "the same routes: no version"
        assert routes_catalog.fingerprint(spark, settings) == 2, "what the always-on job restarts the notifier on"
        assert [(r["version"], r["published_by"]) for r in routes_catalog.versions(spark, settings)] == [
            (1, "routes_file"),
            (2, "ann"),
        ]

        restarted = run()
        restarted(_pass_input(spark, 10, [("c1", "too_cold", "d9", "opened", 8)]), 1)
        restarted(_pass_input(spark, 90, []), 2)  # both groups' repeat_interval past

        assert len(receiver.at("/team")) == 1, "the receiver the routes dropped is not sent to again"
        assert len(receiver.at("/pager")) == 2, "the new receiver: c1, and its repeat"
        ledger = delta_frame(settings.table_path("notifications"))
        gone = ledger[ledger.receiver == "team"].set_index("status")
        assert sorted(gone.index) == ["dead_letter", "delivered"]
        assert list(gone.loc["dead_letter"].attempts) == ["receiver team is not in the routes in force (version 2)"]


def test_a_pass_reads_the_routes_once_and_a_version_published_in_it_is_what_it_reads_next(
    spark, settings, tmp_path, monkeypatch
):
    """The always-on job starts and refreshes the notifier inside ``one_read()``: the seed check, the fingerprint and
    the routes it sends by take one read of ``routes`` (four before, each a Delta snapshot and a Spark job)."""
    reads, read = [], Tables.read
    monkeypatch.setattr(
        Tables, "read", lambda self, name, version=None: reads.append(name) or read(self, name, version)
    )
    with _routed(settings, tmp_path, monkeypatch, ROUTES_V1) as (receiver, settings):
        (tmp_path / "v2.yaml").write_text(ROUTES_V2.format(url=receiver.url))
        with rules_catalog.one_read():
            assert routes_catalog.fingerprint(spark, settings) == 1, "routes_file seeds version 1"
            assert routes_catalog.routes_in_force(spark, settings)[0] == 1
            assert reads.count("routes") == 1, reads
            assert routes_catalog.publish(spark, settings, load_routes(tmp_path / "v2.yaml"), "ann", "v2.yaml") == 2
            assert routes_catalog.fingerprint(spark, settings) == 2, "the version just published"
            assert reads.count("routes") == 2, reads
        routes_catalog.fingerprint(spark, settings)
        assert reads.count("routes") == 4, "outside a pass, each call reads the table as it is now"


class _Killed(BaseException):
    """The process dying mid-pass (not an error the pass could handle)."""


def test_a_run_killed_while_it_delivers_loses_no_message_and_its_replay_repeats_only_ids_already_sent(
    spark, settings, tmp_path, monkeypatch
):
    routes_text = ROUTES.replace("group_by: [rule_id]", "group_by: [device_id]")  # a message per incident
    with _routed(settings, tmp_path, monkeypatch, routes_text) as (receiver, settings):
        _started(spark, settings)
        routes = load_routes(settings.routes_file)
        labels, send = notifications.label_source(spark, settings), notifications.sender(routes, settings)
        batch = _pass_input(spark, 30, [(f"i{n}", "too_hot", f"d{n}", "opened", n) for n in range(6)])

        def dying(message):  # the process is killed after the third message reached its receiver
            if len(receiver.at("/team")) == 3:
                raise _Killed
            return send(message)

        killed = notifications.Passes(settings, routes, labels, dying, notifications.Ledger(settings, deferred=True))
        with pytest.raises(_Killed):
            killed(batch, 0)
        assert len(receiver.at("/team")) == 3 and delta_frame(settings.table_path("notifications")).empty

        # the batch was not committed: the next run replays it, at the same pass time (Spark's offset log)
        ledger = notifications.Ledger(settings, deferred=True)
        notifications.Passes(settings, routes, labels, send, ledger)(batch, 0)
        ledger.flush()

        sent = [h["Idempotency-Key"] for _, h, _ in receiver.at("/team")]
        table = delta_frame(settings.table_path("notifications"))
        assert len(set(sent)) == 6 and len(sent) == 9, "every incident told; the three told before the kill again"
        assert sorted(table.notification_id) == sorted(set(sent)), "the ledger holds each message once"
        assert sent[3:6] == sent[:3], "a repeated message carries the id it was first sent with"
