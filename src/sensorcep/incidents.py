"""The incident page: the open incidents, and ack, snooze and silence from where the page arrives.

A small web app (FastAPI, served by uvicorn): ``python -m sensorcep incidents [--port 8050]`` locally, a Databricks
App from the bundle. The page lists the open incidents (rule, device, since when, how many alerts, how often
escalated) and the silences in force; each incident has its own page (``/incidents/<id>``: its transitions), which
every message a receiver gets links to (``incident_page_url``).

The page judges nothing itself, so the lifecycle stays the one judge:

* **ack** and **snooze until** become the ack record the lifecycle already reads from ``acks_topic``
  (``{"alert_id", "device_id", "rule_id", "ack_time", "acked_by", "action", "until"}``, the person as ``acked_by``);
  the ``acked`` or ``snoozed`` transition appears in ``alert_events`` when the lifecycle takes it;
* **silence** becomes a row of ``silences`` (:mod:`sensorcep.routes.silences`), which the notifier reads.

It reads the tables through the Spark session it is given (the local session, or a Spark Connect client of a
cluster) and writes acks with the same Kafka connection as the pipeline (``kafka_secret_scope``).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from html import escape
from urllib.parse import quote

import pandas as pd
from confluent_kafka import Producer
from fastapi import FastAPI, Form, HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sensorcep.io.kafka import client_config
from sensorcep.io.lake import Tables
from sensorcep.pipeline.alert_lifecycle import open_alerts
from sensorcep.routes import silences
from sensorcep.runtime import get_spark
from sensorcep.settings import Settings, env_settings

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{padding:.3em .6em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.said{background:#e8f5e9;padding:.5em}form{display:inline-block;margin:0 .4em .2em 0}input{width:9em}"""


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{STYLE}</style>"
        f"</head><body><h1>{escape(title)}</h1>{body}</body></html>"
    )


def ack_record(incident: dict, by: str, action: str = "ack", until: datetime | None = None) -> dict:
    """The ack record of ``incident`` (a row of :func:`open_alerts`) by ``by``, now."""
    return {
        "alert_id": incident["incident_id"],
        "device_id": incident["device_id"],
        "rule_id": incident["rule_id"],
        "ack_time": datetime.now(timezone.utc).isoformat(),
        "acked_by": by,
        "action": action,
        "until": until.astimezone(timezone.utc).isoformat() if until else None,
    }


def send_ack(settings: Settings, record: dict) -> None:
    """Produce ``record`` to ``acks_topic`` and wait until the broker has it (an error names the topic)."""
    producer = Producer({**client_config(settings), "enable.idempotence": True})
    failed: list[str] = []
    producer.produce(
        settings.acks_topic,
        key=record["device_id"].encode(),
        value=json.dumps(record).encode(),
        on_delivery=lambda error, _message: failed.append(str(error)) if error else None,
    )
    if producer.flush(30) or failed:
        raise RuntimeError(f"the ack did not reach {settings.acks_topic}: {failed or 'timed out'}")


def create_app(spark: SparkSession, settings: Settings) -> FastAPI:
    """The incident page over ``settings``' tables and topics, read through ``spark``."""
    app = FastAPI(title="sensor-cep incidents")

    def incidents() -> pd.DataFrame:
        if not Tables(spark, settings).exists("alert_events"):  # the lifecycle has not run yet: nothing is open
            return pd.DataFrame(columns=["incident_id", "rule_id", "device_id", "state", "alerts", "opened_at"])
        found = open_alerts(spark, settings)
        if found.empty:
            return found
        events = Tables(spark, settings).read("alert_events")
        escalated = events.where(F.col("transition") == "escalated").groupBy("incident_id").count().toPandas()
        levels = dict(zip(escalated.incident_id, escalated["count"], strict=True))
        return found.assign(escalations=found.incident_id.map(lambda i: int(levels.get(i, 0))))

    def incident(incident_id: str) -> dict:
        found = incidents()
        rows = found[found.incident_id == incident_id] if not found.empty else found
        if rows.empty:
            raise HTTPException(404, f"no open incident {incident_id}")
        return rows.iloc[0].to_dict()

    @app.get("/", response_class=HTMLResponse)
    def index(said: str = "") -> HTMLResponse:
        found = incidents()
        rows = "".join(_incident_row(r) for r in found.to_dict("records")) if not found.empty else ""
        now = datetime.now(timezone.utc)
        muting = [s for s in silences.current(spark, settings) if s.starts <= now < s.ends]
        body = (f"<p class='said' id='said'>{escape(said)}</p>" if said else "") + (
            f"<h2>{len(found)} open incident(s)</h2><table id='incidents'><tr><th>rule</th><th>device</th>"
            "<th>since</th><th>alerts</th><th>escalated</th><th>state</th><th>act</th></tr>"
            f"{rows}</table><h2>{len(muting)} silence(s) in force</h2><ul id='silences'>"
            + "".join(
                f"<li>{escape(str(s.matchers))} until {s.ends:%Y-%m-%d %H:%M} UTC: {escape(s.author)}: "
                f"{escape(s.comment)}</li>"
                for s in muting
            )
            + "</ul>"
        )
        return _page("Open incidents", body)

    @app.get("/incidents/{incident_id}", response_class=HTMLResponse)
    def detail(incident_id: str) -> HTMLResponse:
        if not Tables(spark, settings).exists("alert_events"):
            raise HTTPException(404, f"no incident {incident_id}: the lifecycle has recorded none yet")
        events = Tables(spark, settings).read("alert_events").where(F.col("incident_id") == incident_id)
        steps = events.orderBy("at", "event_id").select("at", "transition", "state", "alerts", "actor").toPandas()
        if steps.empty:
            raise HTTPException(404, f"no incident {incident_id}")
        rows = "".join(
            f"<tr><td>{r.at:%Y-%m-%d %H:%M:%S}</td><td>{escape(r.transition)}</td><td>{escape(str(r.state))}</td>"
            f"<td>{r.alerts}</td><td>{escape(str(r.actor or ''))}</td></tr>"
            for r in steps.itertuples()
        )
        return _page(
            f"Incident {incident_id}",
            "<p><a href='/'>all open incidents</a></p><table><tr><th>at</th><th>transition</th><th>state</th>"
            f"<th>alerts</th><th>by</th></tr>{rows}</table>",
        )

    @app.post("/incidents/{incident_id}/ack")
    def ack(incident_id: str, by: str = Form(...)) -> RedirectResponse:
        send_ack(settings, ack_record(incident(incident_id), by))
        return _back(f"ack of {incident_id} by {by} sent: the lifecycle records it at its next batch")

    @app.post("/incidents/{incident_id}/snooze")
    def snooze(incident_id: str, by: str = Form(...), until: str = Form(...)) -> RedirectResponse:
        moment = datetime.fromisoformat(until)
        moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        send_ack(settings, ack_record(incident(incident_id), by, "snooze", moment))
        return _back(f"snooze of {incident_id} until {moment:%Y-%m-%d %H:%M} UTC by {by} sent")

    @app.post("/silences")
    def silence(
        rule_id: str = Form(""), device_id: str = Form(""), duration: str = Form(...), author: str = Form(...),
        comment: str = Form(...),
    ) -> RedirectResponse:  # fmt: skip
        matchers = {k: v for k, v in (("rule_id", rule_id), ("device_id", device_id)) if v}
        try:
            made = silences.add(spark, settings, matchers, duration, author, comment)
        except ValueError as error:  # no matcher (it would mute everything), a duration that is not one: said why
            raise HTTPException(400, str(error)) from None
        return _back(f"silence {made.silence_id} of {matchers} until {made.ends:%Y-%m-%d %H:%M} UTC")

    return app


def serve(host: str = "127.0.0.1", port: int | None = None) -> None:
    """The incident page over the settings of the environment (``SENSORCEP_*``), served until stopped, on ``port``
    (default: ``DATABRICKS_APP_PORT``, which a Databricks App is given, else 8050)."""
    import uvicorn  # noqa: PLC0415 - the app extra: only the incident page serves HTTP

    port = port or int(os.environ.get("DATABRICKS_APP_PORT", "8050"))
    app = create_app(get_spark(), env_settings())
    print(f"the incident page: http://{host}:{port}/ (Ctrl-C stops it)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _back(said: str) -> RedirectResponse:
    return RedirectResponse(f"/?said={quote(said)}", status_code=303)


def _incident_row(r: dict) -> str:
    i = escape(r["incident_id"])
    forms = (
        f"<form method='post' action='/incidents/{i}/ack'><input name='by' placeholder='your name' required>"
        f"<button id='ack-{i}'>ack</button></form>"
        f"<form method='post' action='/incidents/{i}/snooze'><input name='by' placeholder='your name' required>"
        "<input name='until' type='datetime-local' required><button>snooze until</button></form>"
        f"<form method='post' action='/silences'><input type='hidden' name='rule_id' value='{escape(r['rule_id'])}'>"
        "<input name='duration' value='2 hours'><input name='author' placeholder='your name' required>"
        "<input name='comment' placeholder='why' required><button>silence this rule</button></form>"
    )
    return (
        f"<tr id='incident-{i}'><td>{escape(r['rule_id'])}</td><td>{escape(r['device_id'])}</td>"
        f"<td><a href='/incidents/{i}'>{pd.Timestamp(r['opened_at']):%Y-%m-%d %H:%M:%S}</a></td><td>{r['alerts']}</td>"
        f"<td>{r['escalations']}</td><td>{escape(str(r['state']))}</td><td>{forms}</td></tr>"
    )


if __name__ == "__main__":  # a Databricks App's command: the page on every interface, at the port the app is given
    serve(host="0.0.0.0")  # noqa: S104 - the app's container: the platform's proxy in front is the only client
