"""Group rules (``kind: group``) over the alerts of the rule each names, per group of devices, in event-time order.

Plain Python, no Spark. :func:`advance` is the whole logic of the group rules query's processor
(:mod:`sensorcep.pipeline.group_rules`) and of the backtest: given a group's memory, its alerts that the watermark
has made final (in event-time order) and the rule, it returns the moments the group fires and the new memory.

The memory of a (group rule, group) is {device id: the time of its latest alert since the group last fired}, only
the devices whose latest alert is within ``within`` of the newest: fewer than ``at_least`` devices, since the one
that brings it to ``at_least`` fires and empties it. So a group's memory is bounded by the rule's ``at_least``.
"""

from __future__ import annotations

from sensorcep.rules.model import GROUP_LABELS, GroupRule


def group_label(rule: GroupRule, labels: dict[str, object]) -> str | None:
    """The group a device belongs to under ``rule``: ``site=<its site>`` (None: the device has no such label)."""
    value = labels.get(rule.by)
    return None if value is None or value == "" else f"{rule.by}={value}"


def labels_of(device_id: str) -> dict[str, str]:
    """The label a group alert's ``device_id`` names (``site=plant-1`` -> ``{"site": "plant-1"}``), so routes can
    match it and inhibit its devices' pages by an equal ``site``; {} for a device's own id."""
    label, sep, value = device_id.partition("=")
    return {label: value} if sep and label in GROUP_LABELS and value else {}


def advance(rule: GroupRule, memory: dict[str, int], alerts: list[tuple[int, str]]) -> tuple[list[int], dict]:
    """``alerts``: (event time in µs, device id) of the named rule's alerts in this group, in (time, device) order.
    An alert counts its device as firing at its time; the devices whose latest alert is more than ``within`` older
    than it no longer count. The alert that makes ``at_least`` devices count fires the group at its time, and the
    count starts again from nothing after it. Returns (the times the group fired, the memory after)."""
    memory = dict(memory)
    fired = []
    for t_us, device in alerts:
        memory = {d: at for d, at in memory.items() if at > t_us - rule.within_us}
        memory[device] = t_us
        if len(memory) >= rule.at_least:
            fired.append(t_us)
            memory = {}
    return fired, memory


def forget(rule: GroupRule, memory: dict[str, int], watermark_us: int) -> dict[str, int]:
    """The memory without the devices that can no longer count: every alert still to come is after the watermark,
    more than ``within`` after theirs."""
    return {device: at for device, at in memory.items() if at + rule.within_us > watermark_us}


def next_expiry_us(rule: GroupRule, memory: dict[str, int]) -> int | None:
    """When the group's memory can next shrink (its oldest device stops counting): a timer to clear state by."""
    return min(memory.values()) + rule.within_us if memory else None
