"""One notifier pass (routes.notifier): a 50-device outage is one message sent once and one ledger row; a silenced
and an inhibited page are rows with their reason; a receiver that keeps failing is dead-lettered and the pass goes on;
a replayed pass gives the same rows and ids; an incident nobody acks climbs the route's escalation levels, each once;
any cut of the same transitions into passes tells each incident once, or records why not (property)."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st
from support.receiver import LoopbackReceiver

from sensorcep.routes.delivery import Outcome, deliver
from sensorcep.routes.dispatch import Change
from sensorcep.routes.model import parse_routes
from sensorcep.routes.notifier import NOTIFICATION_COLUMNS, STATUSES, notify
from sensorcep.routes.planning import Incident, Silence

ROUTES = parse_routes(
    {
        "receivers": [{"name": "team", "slack": {"webhook_secret": "s"}}],
        "route": {"receiver": "team", "group_by": ["site"], "group_wait": "30 seconds", "repeat_interval": "1 hour"},
        "inhibit": [{"source": {"rule_id": "site_down"}, "target": {"rule_id": "too_hot"}, "equal": ["site"]}],
    }
)


def opened(n: int, at: float, site: str = "plant", rule: str = "too_hot", severity: str = "warning") -> Change:
    labels = {"rule_id": rule, "device_id": f"d{n}", "site": site, "severity": severity}
    return Change(Incident(f"i{n}", labels), "opened", at)


SILENCED_YARD = Silence(
    "yard-work",
    {"site": "yard"},
    datetime(1970, 1, 1, tzinfo=timezone.utc),
    datetime(2100, 1, 1, tzinfo=timezone.utc),
    "ana",
    "maintenance",
)


class Receiver:
    """Records what it is sent; answers ``status`` to each message."""

    def __init__(self, status: str = "delivered"):
        self.status, self.messages = status, []

    def __call__(self, message):
        self.messages.append(message)
        attempts = ["200"] if self.status == "delivered" else ["500", "500", "500"]
        return Outcome(message.notification_id, self.status, attempts)


def test_an_outage_is_one_message_sent_once_and_one_ledger_row_that_lists_every_device():
    receiver = Receiver()
    changes = [opened(n, 1000 + n, severity="critical" if n == 7 else "warning") for n in range(50)]
    rows, groups = notify(ROUTES, {}, changes, now=1010, send=receiver)
    assert rows == [] and receiver.messages == [], "group_wait: nothing before the rest of the outage can join"
    rows, groups = notify(ROUTES, groups, [], now=1030, send=receiver)
    assert len(receiver.messages) == 1 and len(rows) == 1
    (sent,), (row,) = receiver.messages, rows
    assert len(sent.incidents) == 50 and sent.severity == "critical", "the group's most severe incident"
    assert {i["device_id"] for i in sent.incidents} == {f"d{n}" for n in range(50)}
    assert row["notification_id"] == sent.notification_id, "the ledger keeps the id every retry carries"
    assert (row["status"], row["receiver"], len(row["incident_ids"]), row["attempts"]) == (
        "delivered",
        "team",
        50,
        ["200"],
    )
    assert list(row) == NOTIFICATION_COLUMNS and row["status"] in STATUSES


def test_a_silenced_page_and_an_inhibited_page_are_rows_with_their_reason_and_send_nothing():
    receiver = Receiver()
    down = Change(Incident("down", {"rule_id": "site_down", "device_id": "plant", "site": "plant"}), "opened", 0)
    rows, _ = notify(ROUTES, {}, [down, opened(1, 1), opened(2, 2, site="yard")], 40, receiver, [SILENCED_YARD])
    suppressed = {r["incident_ids"][0]: r["reason"] for r in rows if r["status"] == "suppressed"}
    assert suppressed["i1"].startswith("inhibited by down"), suppressed
    assert suppressed["i2"].startswith("silenced by yard-work") and "ana: maintenance" in suppressed["i2"], suppressed
    assert [m.incidents[0]["incident_id"] for m in receiver.messages] == ["down"], "only the site-down page is sent"


def test_a_receiver_that_keeps_failing_is_dead_lettered_and_the_pass_goes_on():
    """Through the real delivery (retries, then a dead letter) to a real HTTP server on loopback: the plant's message
    fails three times, and the pass still sends the yard's, which the server then takes."""
    with LoopbackReceiver() as server:
        server.codes = [500, 500, 500]  # then 200
        secrets = {"s": f"{server.url}/slack"}.__getitem__

        def send(message):
            return deliver(ROUTES.receiver(message.receiver), message, secrets, attempts=3, backoff_s=0)

        rows, _ = notify(ROUTES, {}, [opened(1, 0), opened(2, 0, site="yard")], now=30, send=send)
    assert [(r["status"], r["attempts"]) for r in rows] == [("dead_letter", ["500"] * 3), ("delivered", ["200"])]
    assert [r["group_name"] for r in rows] == ["team route site=plant", "team route site=yard"]
    assert len(server.received) == 4, "three tries of the plant's message, one of the yard's"


def test_a_replayed_pass_gives_the_same_rows_and_ids():
    changes = [opened(n, n) for n in range(5)]
    first, _ = notify(ROUTES, {}, changes, now=60, send=Receiver())
    again, _ = notify(ROUTES, {}, changes, now=60, send=Receiver())
    assert first == again and len({r["notification_id"] for r in first}) == len(first)


ESCALATING = parse_routes(
    {
        "receivers": [
            {"name": "team", "slack": {"webhook_secret": "s"}},
            {"name": "oncall", "pagerduty": {"routing_key_secret": "k"}},
            {"name": "manager", "email": {"to": ["m@example.com"], "smtp_secret": "smtp"}},
        ],
        "route": {
            "receiver": "team",
            "group_by": ["site"],
            "group_wait": "30 seconds",
            "escalate": [{"after": "10 minutes", "to": "oncall"}, {"after": "30 minutes", "to": "manager"}],
        },
    }
)


def test_an_incident_nobody_acks_climbs_the_escalation_levels_each_once_and_an_ack_stops_it():
    receiver = Receiver()
    rows, groups = notify(ESCALATING, {}, [opened(0, 1000), opened(1, 1000)], now=1030, send=receiver)
    assert [(m.receiver, m.transition) for m in receiver.messages] == [("team", "opened")]
    assert [row["level"] for row in rows] == [0]

    rows, groups = notify(ESCALATING, groups, [], now=1000 + 599, send=receiver)
    assert rows == [], "not before the level's `after`"
    rows, groups = notify(ESCALATING, groups, [], now=1000 + 600, send=receiver)
    (level_1,) = receiver.messages[1:]
    assert (level_1.receiver, level_1.transition, len(level_1.incidents)) == ("oncall", "escalated", 2)
    assert "escalated to level 1" in level_1.title
    assert [(row["receiver"], row["level"], row["incident_ids"]) for row in rows] == [("oncall", 1, ["i0", "i1"])]
    rows, groups = notify(ESCALATING, groups, [], now=1000 + 900, send=receiver)
    assert rows == [] and len(receiver.messages) == 2, "each level pages an incident once"

    acked = Change(Incident("i1", {}), "acked", 1000 + 1000)
    rows, groups = notify(ESCALATING, groups, [acked], now=1000 + 1800, send=receiver)
    assert [(row["receiver"], row["level"], row["incident_ids"]) for row in rows] == [("manager", 2, ["i0"])], (
        "an acked incident climbs no further"
    )
    rows, _ = notify(ESCALATING, groups, [], now=1000 + 7200, send=receiver)
    assert rows == [], "past the last level, nothing more is sent for it"


def test_a_pass_that_comes_late_sends_every_level_the_incident_passed_in_order_with_stable_ids():
    first = notify(ESCALATING, {}, [opened(0, 1000)], now=1000 + 3600, send=Receiver())[0]
    again = notify(ESCALATING, {}, [opened(0, 1000)], now=1000 + 3600, send=Receiver())[0]
    assert [(row["receiver"], row["level"]) for row in first] == [("team", 0), ("oncall", 1), ("manager", 2)]
    assert [row["notification_id"] for row in first] == [row["notification_id"] for row in again]
    assert len({row["notification_id"] for row in first}) == 3


def test_without_a_routes_file_the_notifier_query_does_not_start():
    from sensorcep.pipeline import notifications
    from sensorcep.settings import Settings

    assert notifications.start_notifier(None, Settings(routes_file="")) is None, "nobody to tell: no query, no Spark"


def test_a_pass_takes_its_transitions_in_event_time_order_with_their_labels_at_their_own_time_at_most_the_pass():
    import pandas as pd

    from sensorcep.pipeline.notifications import changes_of

    rows = pd.DataFrame(
        {
            "incident_id": ["i2", None, "i1", "i3"],  # None: a heartbeat row
            "rule_id": ["too_hot", None, "too_hot", "too_hot"],
            "device_id": ["d2", None, "d1", "d3"],
            "transition": ["acked", None, "opened", "opened"],
            "at": pd.to_datetime(
                ["1970-01-01 00:16:45", None, "1970-01-01 00:16:41", "1970-01-01 01:00:00"], utc=True
            ),  # 1,005 s, 1,001 s, and 3,600 s: ahead of the pass
        }
    )
    site = {"d1": {"site": "plant"}}
    labels = lambda rule, device: {"rule_id": rule, "device_id": device, **site.get(device, {})}  # noqa: E731
    changes = changes_of(rows, labels, now=1_010.0)
    assert [(c.incident.incident_id, c.transition, c.at) for c in changes] == [
        ("i1", "opened", 1_001.0),
        ("i2", "acked", 1_005.0),
        ("i3", "opened", 1_010.0),  # a clock ahead of the pass joins at the pass' time
    ]
    assert changes[0].incident.labels == {"rule_id": "too_hot", "device_id": "d1", "site": "plant"}


def test_silence_matchers_that_are_not_label_value_pairs_of_known_labels_are_refused_naming_them():
    import pytest

    from sensorcep.routes.model import RoutesError
    from sensorcep.routes.silences import parse_matchers

    assert parse_matchers(["site=plant", "rule_id=too_hot"]) == {"site": "plant", "rule_id": "too_hot"}
    for junk in (["site"], ["=plant"], ["colour=red"], ["site="]):
        with pytest.raises(RoutesError, match=r"give label=value"):
            parse_matchers(junk)
    with pytest.raises(RoutesError, match="at least one matcher"):
        parse_matchers([])


#: the notifier's passes, every 10 s (a pass is a micro-batch of the notifier query): long enough for every group's
#: group_wait and group_interval to pass after the last transition
PASSES = [10.0 * k for k in range(80)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["plant", "yard", "dock"]), st.integers(0, 120), st.integers(0, 3)), max_size=14
    ),
    st.booleans(),
)
def test_property_any_cut_of_the_transitions_into_passes_tells_each_incident_once_or_records_why_not(
    incidents, silenced
):
    """The same transitions cut into passes in any way (each reaches the first pass at or after its time, or up to
    three passes later: a lifecycle batch that came late), with passes at the same times: every opened incident is
    told as new exactly once to its receiver, or, under a silence, has exactly one ``suppressed`` row naming it and is
    told to nobody; no notification id is used by two messages. Which incidents share a message depends on when the
    passes saw them (``group_wait`` counts from a pass); who is told what does not."""
    receiver = Receiver()
    changes = [(opened(n, float(at), site=site), delay) for n, (site, at, delay) in enumerate(incidents)]
    arrives = {}
    for change, delay in changes:
        first = next(k for k, t in enumerate(PASSES) if t >= change.at)
        arrives.setdefault(first + delay, []).append(change)
    groups, rows = {}, []
    for k, now in enumerate(PASSES):
        batch = sorted(arrives.get(k, []), key=lambda c: c.at)
        ledger, groups = notify(ROUTES, groups, batch, now, receiver, [SILENCED_YARD] if silenced else [])
        rows.extend(ledger)

    muted = {f"i{n}" for n, (site, _, _) in enumerate(incidents) if silenced and site == "yard"}
    told = [i for r in rows if r["status"] == "delivered" for i in r["new_incident_ids"]]
    assert sorted(told) == sorted({f"i{n}" for n in range(len(incidents))} - muted), "each told once, none lost"
    suppressed = [r["incident_ids"][0] for r in rows if r["status"] == "suppressed"]
    assert sorted(suppressed) == sorted(muted) and all("silenced by yard-work" in r["reason"] for r in rows
                                                        if r["status"] == "suppressed")  # fmt: skip
    sent = [m.notification_id for m in receiver.messages]
    assert len(sent) == len(set(sent)) == sum(r["status"] == "delivered" for r in rows), "one id per message"
