"""The incident page in a real browser (issue "Incidents reach people"): headless Chromium, driven by Playwright,
opens the page, finds the open incident and acks it there as a named person. The ack reaches the acks topic as the
lifecycle's own ack record, the lifecycle's next batch records the ``acked`` transition by that person, and the
incident does not escalate when its deadline passes. The real broker, real Delta tables, the app served by uvicorn
on loopback."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from playwright.sync_api import sync_playwright
from support.streams import delta_frame
from support.web import served

from sensorcep import incidents
from sensorcep.local import simulator
from sensorcep.local.broker import create_topics
from sensorcep.pipeline import alert_lifecycle, alerts
from sensorcep.routes import silences


def _alert(device: str, at: datetime) -> dict:
    event_us = int(at.timestamp() * 1_000_000)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"alert_id": alerts.alert_id(device, event_us, "negative_frequency"), "device_id": device,
            "sensor_freq": -1.0, "event_time": stamp, "kafka_timestamp": stamp, "rule_id": "negative_frequency",
            "rule_version": 1, "rule": "sensor_freq < 0"}  # fmt: skip


def _produce(settings, alert: dict, at: datetime) -> None:
    record = {"key": [alert["device_id"].encode()], "value": [json.dumps(alert).encode()]}
    frame = pd.DataFrame({**record, "timestamp_ms": [int(at.timestamp() * 1000)]})
    simulator.produce_records(frame, settings.kafka_bootstrap_servers, settings.alerts_topic)


#: in make extended (decision 0063): make test renders the page and runs the lifecycle's acks from the topic
@pytest.mark.extended
def test_an_incident_acked_on_the_page_is_acked_by_that_person_in_alert_events_and_never_escalates(spark, settings):
    settings = settings.replace(ack_timeout="5 minutes")
    create_topics(settings.kafka_bootstrap_servers, [settings.alerts_topic, settings.acks_topic])
    opened_at = datetime.now(timezone.utc) - timedelta(minutes=2)  # its deadline: 3 minutes from now
    _produce(settings, _alert("pump-7", opened_at), opened_at)
    # another device's alert 35 s later moves the lifecycle's watermark (30 s behind) past the first: it opens
    second = opened_at + timedelta(seconds=35)
    _produce(settings, _alert("pump-8", second), second)
    alert_lifecycle.start_alert_lifecycle(spark, settings)
    (incident,) = alert_lifecycle.open_alerts(spark, settings).incident_id

    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    with served(incidents.create_app(spark, settings)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url)
        row = page.locator(f"#incident-{incident}")
        assert "pump-7" in row.inner_text() and "negative_frequency" in row.inner_text()
        row.locator("form[action$='/ack'] input[name=by]").fill("ann")
        row.locator(f"#ack-{incident}").click()
        said = page.locator("#said").inner_text()  # the page after the redirect
        browser.close()
    assert f"ack of {incident} by ann sent" in said

    # a later alert of a third device moves the lifecycle's watermark past both incidents' deadlines
    later = opened_at + timedelta(minutes=6, seconds=30)
    _produce(settings, _alert("pump-9", later), later)
    alert_lifecycle.start_alert_lifecycle(spark, settings)
    events = delta_frame(settings.table_path("alert_events"))
    mine = events[events.incident_id == incident].sort_values("at")
    assert list(mine.transition)[:2] == ["opened", "acked"], list(mine.transition)
    assert mine[mine.transition == "acked"].actor.tolist() == ["ann"]
    assert "escalated" not in set(mine.transition), "acked on the page before its deadline: it must not escalate"
    unacked = events[events.device_id == "pump-8"]
    assert "escalated" in set(unacked.transition), "the incident nobody acked escalated: the deadlines did pass"


def test_before_anything_is_recorded_the_page_shows_no_incident_404s_an_unknown_one_and_refuses_a_silence_of_nothing(
    spark, settings
):
    with served(incidents.create_app(spark, settings)) as url:
        with urllib.request.urlopen(url) as page:
            assert "0 open incident(s)" in page.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{url}/incidents/nope")
        assert missing.value.code == 404
        # a silence that names neither a rule nor a device would mute every incident: refused, saying so
        form = urllib.parse.urlencode({"duration": "1 hour", "author": "ann", "comment": "works"}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{url}/silences", data=form, method="POST"))
        assert refused.value.code == 400 and "at least one matcher" in refused.value.read().decode()
    assert silences.current(spark, settings) == [], "nothing written"
