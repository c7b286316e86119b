"""Routes as data (issue "Incidents reach people", its first part): the routing tree, grouping, inhibition, silences,
one error per bad entry and a notification's id kept across retries; ``routes test`` prints a plan without sending
(delivery: tests/unit/test_delivery.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from sensorcep.routes.model import RoutesError, load_routes, parse_routes
from sensorcep.routes.planning import Incident, Silence, notification_id, plan, routes_for

AT = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
ROUTES = {
    "receivers": [
        {"name": "team", "slack": {"webhook_secret": "team-slack"}},
        {"name": "oncall", "pagerduty": {"routing_key_secret": "pd-key"}},
        {"name": "lab-hook", "webhook": {"url": "https://hooks.example/lab", "hmac_secret": "lab-hmac"}},
    ],
    "route": {
        "receiver": "team",
        "group_by": ["rule_id", "site"],
        "routes": [
            {"match": {"severity": "critical"}, "receiver": "oncall", "continue": True},
            {"match": {"site": "lab"}, "receiver": "lab-hook", "group_by": ["site"], "group_wait": "10 seconds"},
        ],
    },
    "inhibit": [{"source": {"rule_id": "site_down"}, "target": {"severity": "warning"}, "equal": ["site"]}],
}


def incident(n: int, **labels) -> Incident:
    base = {"rule_id": "too_hot", "device_id": f"d{n:02d}", "site": "plant", "severity": "warning"}
    return Incident(f"i{n:02d}", {**base, **labels})


def test_the_first_matching_route_takes_an_incident_and_continue_lets_the_next_one_match_too():
    routes = parse_routes(ROUTES)
    assert [m.receiver for m in routes_for(routes, incident(1).labels)] == ["team"]  # no child matches: the root
    critical_lab = incident(2, severity="critical", site="lab").labels
    found = routes_for(routes, critical_lab)
    assert [m.receiver for m in found] == ["oncall", "lab-hook"]
    assert found[0].group_by == ("rule_id", "site"), "inherited from the root"
    assert (found[1].group_by, found[1].group_wait_s, found[1].repeat_interval_s) == (("site",), 10.0, 4 * 3600.0)


def test_a_fifty_device_outage_is_one_message_listing_the_devices():
    result = plan(parse_routes(ROUTES), [incident(n) for n in range(50)], at=AT)
    (group,) = result.groups
    assert group.match.receiver == "team" and len(group.incidents) == 50
    assert group.key == (("rule_id", "too_hot"), ("site", "plant")) and not result.muted


def test_an_open_site_down_incident_inhibits_its_sites_warnings_with_the_reason_and_no_other_site():
    incidents = [incident(n) for n in range(50)] + [incident(60, site="yard")]
    incidents.append(
        Incident("down", {"rule_id": "site_down", "device_id": "plant", "site": "plant", "severity": "critical"})
    )
    result = plan(parse_routes(ROUTES), incidents, at=AT)
    assert len(result.muted) == 50
    assert all(reason == "inhibited by down (site_down, equal site)" for _, reason in result.muted)
    sent = {i.incident_id for g in result.groups for i in g.incidents}
    assert sent == {"i60", "down"}, "the other site is still paged, and so is the inhibiting incident"


def test_a_silence_mutes_what_it_matches_while_it_lasts_and_says_who_and_why():
    silence = Silence("s1", {"device_id": "d03"}, AT - timedelta(hours=1), AT + timedelta(hours=1), "ana", "repair")
    result = plan(parse_routes(ROUTES), [incident(3), incident(4)], [silence], at=AT)
    assert [(i.incident_id, reason) for i, reason in result.muted] == [
        ("i03", "silenced by s1 until 2026-11-26 13:00 (ana: repair)")
    ]
    later = plan(parse_routes(ROUTES), [incident(3)], [silence], at=AT + timedelta(hours=2))
    assert not later.muted, "an ended silence mutes nothing"


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d["route"].update(receiver="nobody"), "routes name receivers that are not declared: nobody"),
        (
            lambda d: d["route"]["routes"][1].update(match={"building": "b"}),
            r"route > routes\[2\] > match: building not a label",
        ),
        (
            lambda d: d["receivers"][0].update(webhook={"url": "https://x", "hmac_secret": "h"}),
            r"receivers\[1\]: .*exactly one of",
        ),
        (lambda d: d["route"].update(group_wait="soon"), "route > group_wait"),
        (lambda d: d["receivers"].append(dict(d["receivers"][0])), "receiver names must be unique: team twice"),
        (lambda d: d["route"].update(group_by=["colour"]), "colour not a label"),
        (lambda d: d["route"].pop("receiver"), "the root route needs a receiver"),
        (
            lambda d: d["route"].update(escalate=[{"after": "10 minutes", "to": "nightshift"}]),
            "routes name receivers that are not declared: nightshift",
        ),
        (
            lambda d: d["route"].update(
                escalate=[{"after": "30 minutes", "to": "team"}, {"after": "10 minutes", "to": "team"}]
            ),
            r"route > escalate: .*later and later",
        ),
        (
            lambda d: d["route"].update(escalate=[{"after": "0 seconds", "to": "team"}]),
            r"route > escalate\[1\] > after",
        ),
    ],
)
def test_each_bad_entry_gets_an_error_that_names_it(change, says):
    document = json.loads(json.dumps(ROUTES))
    change(document)
    with pytest.raises(RoutesError, match=says):
        parse_routes(document, "routes.yaml")


def test_the_packaged_routes_are_valid_and_a_notification_keeps_its_id_across_retries():
    assert load_routes().route.receiver == "team"
    first = notification_id("i01", "escalated", "oncall", 1)
    assert first == notification_id("i01", "escalated", "oncall", 1) != notification_id("i01", "escalated", "team", 1)


def test_routes_test_prints_who_would_be_paged_grouped_inhibited_or_silenced_without_sending(tmp_path):
    document = json.loads(json.dumps(ROUTES))
    document["route"]["escalate"] = [{"after": "10 minutes", "to": "oncall"}, {"after": "90 seconds", "to": "team"}][
        ::-1
    ]
    (tmp_path / "routes.yaml").write_text(json.dumps(document))
    alerts = [{"rule_id": "too_hot", "device_id": f"d{n}", "site": "plant"} for n in range(3)]
    alerts.append(
        {"incident_id": "down", "rule_id": "site_down", "device_id": "plant", "site": "plant", "severity": "critical"}
    )
    alerts.append({"rule_id": "too_hot", "device_id": "d9", "site": "yard"})
    (tmp_path / "alerts.json").write_text(json.dumps(alerts))
    out = subprocess.run(
        [sys.executable, "-m", "sensorcep", "routes", "test", "--file", str(tmp_path / "routes.yaml"),
         "--alerts", str(tmp_path / "alerts.json")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "5 incident(s): 2 message(s), 3 muted (nothing sent)" in out
    assert (
        "→ team: 1 incident(s) [rule_id=too_hot, site=yard] via route\n"
        "      unacked, escalates: after 1.5 min → team; after 10 min → oncall" in out
    )
    assert "→ oncall: 1 incident(s) [rule_id=site_down, site=plant]" in out
    assert out.count("inhibited by down (site_down, equal site)") == 3
