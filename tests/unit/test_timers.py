"""The pending chunks of the bucketed processors (no JVM): what the watermark passed is released once, a chunk it did
not reach is neither read nor written again, and the list is written back only when a chunk changed."""

from __future__ import annotations

import json

from sensorcep.pipeline.timers import release_chunks


class FakeListState:
    """The calls of a ``ListState`` that :func:`release_chunks` makes, recorded."""

    def __init__(self, chunks: list[tuple[int, str]]):
        self.chunks, self.writes = list(chunks), []

    def get(self):
        return iter(self.chunks)

    def put(self, chunks):
        self.chunks = list(chunks)
        self.writes.append("put")

    def clear(self):
        self.chunks = []
        self.writes.append("clear")


def taking(final: list[int], watermark: int):
    """A ``take`` over chunks of event times as JSON: the final times into ``final``, the rest as a chunk."""

    def take(text: str):
        times = json.loads(text)
        final.extend(t for t in times if t <= watermark)
        rest = [t for t in times if t > watermark]
        return (min(rest), json.dumps(rest)) if rest else None

    return take


def test_the_final_inputs_are_released_and_the_rest_stays_pending_in_its_chunk():
    state = FakeListState([(10, "[10, 40]"), (20, "[20, 30]"), (50, "[50, 60]")])
    final: list[int] = []
    waiting = release_chunks(state, 30, taking(final, 30))
    assert sorted(final) == [10, 20, 30]
    assert state.chunks == [(40, "[40]"), (50, "[50, 60]")] and state.writes == ["put"]
    assert waiting == [40, 50]


def test_a_chunk_the_watermark_did_not_reach_is_not_read_and_nothing_is_written():
    state = FakeListState([(50, "not read")])
    waiting = release_chunks(state, 30, lambda text: (_ for _ in ()).throw(AssertionError(f"read {text!r}")))
    assert waiting == [50] and state.writes == [] and state.chunks == [(50, "not read")]


def test_when_every_input_is_final_the_list_is_cleared():
    state = FakeListState([(10, "[10]"), (20, "[20, 25]")])
    final: list[int] = []
    assert release_chunks(state, 30, taking(final, 30)) == []
    assert sorted(final) == [10, 20, 25] and state.writes == ["clear"] and state.chunks == []
