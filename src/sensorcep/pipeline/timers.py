"""Event-time timers and keys of the Python stateful processors (``transformWithStateInPandas``): the lifecycle's
incidents and the stateful rules wait for the watermark the same way; the per-device processors key their state by
buckets of devices (:func:`device_bucket`).

A key keeps one timer, at the first watermark at or after its earliest deadline (:func:`arm`). When the watermark
passes several of a key's timers, Spark expires them all in one batch; the first expiry of that pass releases
everything that is final and the others do nothing (:class:`Passes`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

#: the keys a per-device processor's state is spread over: each holds the devices whose id hashes to it. A key per
#: device cost a dozen round trips to the state server and a pandas frame per device every batch, the largest part of
#: such a query's time (decision 0045); also the most tasks its processor can use at once
DEVICE_BUCKETS = 64
#: the deadline (µs) of a device or incident that has none: later than any other, and never armed (:func:`arm` is
#: given the deadlines without it)
NO_DEADLINE = 2**63 - 1


def device_bucket() -> Column:
    """The bucket of the row's ``device_id`` (0 to :data:`DEVICE_BUCKETS` - 1), as ``device_bucket``: the key."""
    return F.pmod(F.hash("device_id"), F.lit(DEVICE_BUCKETS)).alias("device_bucket")


def arm(handle, deadlines_us: Iterable[int]) -> None:
    """Register a timer at the first watermark (ms) at or after the earliest deadline (µs), unless the key has it."""
    deadlines_us = list(deadlines_us)
    if not deadlines_us:
        return
    timer_ms = -(-min(deadlines_us) // 1000)
    if timer_ms not in set(handle.listTimers()):
        handle.registerTimer(timer_ms)


def arm_before(handle, deadline_us: int) -> None:
    """Register a timer at ``deadline_us`` (as :func:`arm`) unless the key has one at or before it already (that one
    fires first, and whoever handles it arms the next)."""
    timer_ms = -(-deadline_us // 1000)
    if all(timer_ms < held for held in handle.listTimers()):
        handle.registerTimer(timer_ms)


def release_chunks(pending, watermark_us: int, take: Callable[[str], tuple[int, str] | None]) -> list[int]:
    """Release what the watermark passed from a key's pending chunks (a ``ListState`` of (earliest µs, text), one per
    micro-batch that brought inputs): a chunk whose earliest input is after the watermark is kept as it is, unread;
    every other chunk's text goes to ``take``, which keeps the chunk's final inputs (at or before the watermark) and
    returns the (earliest µs, text) of the rest, or None. The list is written back only when a chunk changed. Returns
    the earliest time of each chunk still pending (for :func:`arm`)."""
    chunks, changed = [], False
    for earliest, text in pending.get():
        if earliest > watermark_us:  # none of its inputs is final yet
            chunks.append((earliest, text))
            continue
        changed = True
        rest = take(text)
        if rest is not None:
            chunks.append(rest)
    if changed and chunks:
        pending.put(chunks)
    elif changed:
        pending.clear()
    return [earliest for earliest, _ in chunks]


class Passes:
    """The (key, batch, watermark) passes a processor has released."""

    def __init__(self) -> None:
        self._seen: set[tuple] = set()

    def first(self, key, timer_values) -> int | None:
        """The watermark (ms) if this expiry is the key's first in this pass, else None (already released)."""
        watermark_ms = timer_values.getCurrentWatermarkInMs()
        this_pass = (tuple(key), timer_values.getCurrentProcessingTimeInMs(), watermark_ms)
        if this_pass in self._seen:
            return None
        self._seen.add(this_pass)
        return watermark_ms


#: the state of a :class:`PendingAndMemory` key
PENDING_AND_MEMORY = "pending string, memory string"


class PendingAndMemory(StatefulProcessor):
    """A processor whose key keeps (the inputs the watermark has not passed yet, a memory) as JSON, released by the
    timers above: the group rules' per group."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("state", PENDING_AND_MEMORY)
        self.passes = Passes()

    def _load(self) -> tuple[list, dict]:
        held = self.state.get()  # None when the key has none: one round trip to the JVM, not two
        return (json.loads(held[0]), json.loads(held[1])) if held else ([], {})

    def _store(self, pending: list, memory: dict) -> None:
        if pending or memory:
            self.state.update((json.dumps(pending), json.dumps(memory)))
        else:
            self.state.clear()

    def close(self) -> None:
        pass
