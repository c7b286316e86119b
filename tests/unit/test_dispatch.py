"""When grouped messages go out (routes.dispatch): group_wait gathers an outage into one message, group_interval tells
about incidents that joined, repeat_interval repeats while incidents stay open, a closed incident leaves its group."""

from __future__ import annotations

import pytest

from sensorcep.routes.dispatch import Change, step
from sensorcep.routes.model import parse_routes
from sensorcep.routes.planning import Incident

ROUTES = parse_routes(
    {
        "receivers": [{"name": "team", "slack": {"webhook_secret": "s"}}],
        "route": {
            "receiver": "team",
            "group_by": ["site"],
            "group_wait": "30 seconds",
            "group_interval": "5 minutes",
            "repeat_interval": "1 hour",
        },
        "inhibit": [{"source": {"rule_id": "site_down"}, "target": {"rule_id": "too_hot"}, "equal": ["site"]}],
    }
)


def opened(n: int, at: float, site: str = "plant", rule: str = "too_hot") -> Change:
    return Change(Incident(f"i{n}", {"rule_id": rule, "device_id": f"d{n}", "site": site}), "opened", at)


def test_an_outage_within_group_wait_is_one_message_and_later_joiners_wait_for_group_interval():
    due, groups = step(ROUTES, {}, [opened(n, 1000 + n) for n in range(50)], now=1010)
    assert due == [], "group_wait: the rest of the outage may still come"
    due, groups = step(ROUTES, groups, [], now=1030)
    assert [(d.receiver, len(d.incidents), len(d.new)) for d in due] == [("team", 50, 50)]
    due, groups = step(ROUTES, groups, [opened(99, 1100)], now=1100)
    assert due == [], "a joiner waits for group_interval after the last message"
    due, groups = step(ROUTES, groups, [], now=1030 + 300)
    assert [(len(d.incidents), d.new) for d in due] == [(51, ("i99",))]


def test_open_incidents_repeat_after_repeat_interval_and_a_closed_one_leaves_the_group():
    _, groups = step(ROUTES, {}, [opened(1, 0), opened(2, 0)], now=30)
    due, groups = step(ROUTES, groups, [Change(Incident("i1", {}), "acked", 100)], now=30 + 3600)
    assert [(d.incidents, d.repeat) for d in due] == [(("i2",), True)]
    due, groups = step(ROUTES, groups, [Change(Incident("i2", {}), "resolved", 4000)], now=30 + 7200)
    assert due == [], "a group with nothing open sends nothing more"


def test_groups_are_per_site_ids_are_stable_and_a_site_down_incident_keeps_its_sites_warnings_quiet():
    changes = [opened(1, 0), opened(2, 0, site="yard")]
    due, _ = step(ROUTES, {}, changes, now=30)
    again, _ = step(ROUTES, {}, changes, now=30)
    assert sorted(d.group for d in due) == ["team route site=plant", "team route site=yard"]
    assert [d.message_id for d in due] == [d.message_id for d in again], "the same input, the same message ids"

    down = Change(Incident("down", {"rule_id": "site_down", "device_id": "plant", "site": "plant"}), "opened", 0)
    due, _ = step(ROUTES, {}, [down, opened(3, 1)], now=40)
    assert [d.incidents for d in due] == [("down",)], "too_hot at the downed site is inhibited"


@pytest.mark.parametrize("transition", ["repeated", "snoozed", "ignored"])
def test_transitions_that_do_not_page_send_nothing(transition):
    due, groups = step(ROUTES, {}, [Change(Incident("i1", {"site": "plant"}), transition, 0)], now=100)
    assert due == [] and groups == {}
