"""What an ingest run keeps of its latest batches to look new records up in: how far back it covers (its floor).

The frames here stand in for cached DataFrames: the bookkeeping is plain Python, and whether a record's lookup needs
bronze hangs on it (tests/kafka/test_ingest_accounting.py runs it against bronze).
"""

from datetime import datetime, timedelta

from sensorcep.pipeline.ingest import RecentBatches

T0 = datetime(2026, 6, 1, 12, 0)


class Frame:
    """A cached batch: it only has to be let go."""

    def __init__(self):
        self.released = False

    def unpersist(self):
        self.released = True


def test_a_run_on_an_empty_bronze_covers_everything_until_it_lets_a_batch_go():
    recent = RecentBatches(None, kept_rows=250)
    first, second, third = Frame(), Frame(), Frame()
    recent.keep(first, 100, T0 + timedelta(seconds=10))
    recent.keep(second, 100, T0 + timedelta(seconds=20))
    assert recent.floor is None and not first.released

    recent.keep(third, 100, T0 + timedelta(seconds=30))  # 300 rows > 250: the oldest goes, the floor rises to its end
    assert first.released and not second.released
    assert recent.floor == T0 + timedelta(seconds=10)


def test_the_floor_starts_at_what_bronze_held_and_never_falls():
    recent = RecentBatches(T0, kept_rows=100)
    late = Frame()
    recent.keep(late, 100, T0 - timedelta(hours=1))  # a batch of old events only
    recent.keep(Frame(), 100, T0 + timedelta(seconds=5))
    assert late.released and recent.floor == T0, "letting old events go does not lower the floor"


def test_the_newest_batch_is_kept_even_when_it_alone_is_over_the_limit():
    recent = RecentBatches(None, kept_rows=10)
    big = Frame()
    recent.keep(big, 1_000, T0)
    assert not big.released and recent.floor is None


def test_a_batch_judged_against_bronze_lets_every_kept_batch_go_and_raises_the_floor_past_itself():
    recent = RecentBatches(T0, kept_rows=1_000)
    kept = [Frame(), Frame()]
    recent.keep(kept[0], 10, T0 + timedelta(seconds=10))
    recent.keep(kept[1], 10, T0 + timedelta(seconds=20))
    recent.forget(T0 + timedelta(seconds=15))
    assert all(frame.released for frame in kept) and recent.batches == []
    assert recent.floor == T0 + timedelta(seconds=20)
    recent.forget(None)
    assert recent.floor == T0 + timedelta(seconds=20)


def test_a_quiet_fleets_small_batches_are_kept_only_up_to_the_batch_limit():
    recent = RecentBatches(None, kept_rows=1_000_000, kept_batches=3)
    frames = [Frame() for _ in range(5)]
    for i, frame in enumerate(frames):
        recent.keep(frame, 10, T0 + timedelta(seconds=5 * i))
    assert [frame.released for frame in frames] == [True, True, False, False, False]
    assert len(recent.batches) == 3 and recent.floor == T0 + timedelta(seconds=5)
