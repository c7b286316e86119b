"""The notifier query (issue "Incidents reach people"): the lifecycle's transitions in ``alert_events`` reach the
routes' receivers, grouped, once per notification id in the ``notifications`` ledger, even when a micro-batch is
replayed after it sent; a receiver that fails is retried, then dead-lettered, and the query goes on; a silence
created at run time mutes its incidents, each muted page a ledger row naming it. Against a real
HTTP server on loopback (no network beyond it) and real Delta tables; each run is availableNow."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pandas as pd
from support.receiver import LoopbackReceiver
from support.streams import delta_frame

from sensorcep.io.lake import Tables
from sensorcep.pipeline import checkpoint_log, notifications
from sensorcep.pipeline.alert_lifecycle import EVENT_COLUMNS
from sensorcep.routes import silences
from sensorcep.routes.planning import Incident
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
    monkeypatch.setenv("NT_HOOK_HMAC", "s3cret")  # the routes' secret, locally an environment variable
    with LoopbackReceiver(failing=("/broken",)) as receiver:
        (tmp_path / "routes.yaml").write_text(ROUTES.format(url=receiver.url))
        settings = settings.replace(routes_file=str(tmp_path / "routes.yaml"), routes_secret_scope="nt")
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
    monkeypatch.setenv("NT_HOOK_HMAC", "s3cret")
    with LoopbackReceiver() as receiver:
        (tmp_path / "routes.yaml").write_text(ROUTES.format(url=receiver.url))
        settings = settings.replace(routes_file=str(tmp_path / "routes.yaml"), routes_secret_scope="nt")
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
