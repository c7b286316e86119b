"""02 sampling on Spark: the streamed processor's samples and late events against the pandas oracle (fixed batches
and drawn ones), and restarts from its checkpoint (after some batches; with changed settings)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from support.oracle import late_events, reference_samples
from support.profiles import NIGHTLY, examples
from support.streams import T0, batch_stream, events, late_rows, oracle_rows, sample_rows, write_batches

from sensorcep.pipeline import sampling
from sensorcep.pipeline.checkpoint_settings import SettingsChangedError

# ---------------------------------------------------------------------------- streamed vs oracle
# Watermark 30 s, windows 60 s sliding 30 s. Times are seconds after T0.
BATCHES = [
    events(("a", 10.0, 0.5), ("b", 0.0, 5), ("c", 12.5, 10), ("a", -3.0, 20), ("b", 8.0, 50)),
    events(
        ("c", 9.0, 60),
        ("a", 11.0, 75.25),
        ("b", 7.0, 75.25),
        ("a", 6.0, 100),
        ("b", 0.0, 5),  # duplicate of an event of the previous batch
        ("c", 4.0, 55),
    ),  # out of order, far above the late-row watermark (0)
    events(
        ("a", 3.0, 110),
        ("b", -1.0, 140),
        ("c", 5.0, 25),  # late but in the watermark: the late-row filter uses the previous batch's (20)
        ("a", 5.0, 10),  # too late: <= 20
        ("b", 5.0, 20),
    ),  # exactly at the late-row watermark: too late
    events(
        ("a", -4.0, 200),
        ("b", -5.0, 201),
        ("c", -6.0, 205),  # a window holding only anomalies
        ("a", 2.0, 300),  # windows holding one event
        ("b", 3.0, 400),
        ("c", 1.0, 401),  # ... and two
        ("a", 8.0, 430),
    ),
    events(("b", 9.0, 510)),  # final watermark 480 = the end of window [420, 480)
]


def _run(spark, settings, tmp_path, batches, **changes):
    settings = settings.replace(**changes)
    folder = tmp_path / "in"
    write_batches(folder, batches)
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))
    return settings


#: each scope once: per window with the 30 s slide the fixed batches are built around, per device with 20 s (each event
#: in three windows); the other three pairs in ``make nightly`` (about 25 s each on 2 cores; the property below draws
#: scope and slide in every run)
CASES = [("window", 30), ("device", 20)] + ([("window", 20), ("window", 60), ("device", 30)] if NIGHTLY else [])


@pytest.mark.parametrize("scope, slide", CASES)
def test_streamed_samples_equal_the_oracle(spark, settings, tmp_path, scope, slide):
    settings = _run(spark, settings, tmp_path, BATCHES, sample_scope=scope, slide_duration=f"{slide} seconds")
    expected = reference_samples(BATCHES, 60, slide, 30, scope)
    assert sample_rows(settings) == oracle_rows(expected)
    assert late_rows(settings, "sampling") == late_events(BATCHES, 30_000), "every dropped event is in late_events"
    assert {r[:2] for r in late_rows(settings, "sampling")} == {("a", 5.0), ("b", 5.0)}
    if (scope, slide) == ("window", 30):  # the semantics the fixed batches are built to show
        sampled_times = {r[4] for r in oracle_rows(expected)}
        assert events(("c", 5.0, 25)).event_time_us[0] in sampled_times, "late-but-in-watermark event sampled"
        assert not any(r[2:5] == ("a", 5.0, events(("a", 5.0, 10)).event_time_us[0]) for r in oracle_rows(expected))
        assert any(r[1] == int(T0.timestamp() * 1000) + 480_000 for r in oracle_rows(expected)), (
            "a window ending exactly at the watermark is emitted"
        )


def test_restart_after_k_batches_equals_an_uninterrupted_run(spark, settings, tmp_path):
    folder = tmp_path / "in"
    write_batches(folder, BATCHES[:3])
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))
    after_first_run = sample_rows(settings)
    write_batches(folder, BATCHES[3:], first_index=3)
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))  # same checkpoint
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))  # nothing new: adds nothing
    assert 0 < len(after_first_run) < len(sample_rows(settings))
    assert sample_rows(settings) == oracle_rows(reference_samples(BATCHES, 60, 30, 30))
    assert late_rows(settings, "sampling") == late_events(BATCHES, 30_000), "late events once, across the restart"


#: in make extended (decision 0063): make test's tests/unit/test_checkpoint_settings.py refuses or lets go on each
#: change, and a restart after k batches (above) equals an uninterrupted run
@pytest.mark.extended
def test_a_restart_with_another_window_is_refused_and_one_with_another_skew_bound_goes_on(spark, settings, tmp_path):
    """The settings-change table (checkpoint_settings): the window is fixed in the state, so a restart with another is
    refused before Spark starts, naming both values and the way on; max_future only judges records read from now on,
    so that restart goes on and the samples still equal the oracle."""
    folder = tmp_path / "in"
    write_batches(folder, BATCHES[:3])
    sampling.start_sampling(spark, settings, events=batch_stream(spark, folder))
    written = sample_rows(settings)
    wider = settings.replace(window_duration="2 minutes")
    with pytest.raises(SettingsChangedError, match=r"window_duration was 60 s .* is 120 s now.*query_suffix"):
        sampling.start_sampling(spark, wider, events=batch_stream(spark, folder))
    assert sample_rows(settings) == written, "the refused restart wrote nothing"
    write_batches(folder, BATCHES[3:], first_index=3)
    sampling.start_sampling(spark, settings.replace(max_future="1 hour"), events=batch_stream(spark, folder))
    assert sample_rows(settings) == oracle_rows(reference_samples(BATCHES, 60, 30, 30))


batch_lists = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.sampled_from([-2.0, 0.0, 1.5, 3.0, 7.25]),
            st.integers(0, 400).map(lambda s: s / 2),
        ),
        min_size=0,
        max_size=12,
    ),
    min_size=1,
    max_size=5,
)


@hsettings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=batch_lists,
    scope=st.sampled_from(["window", "device"]),
    slide=st.sampled_from([20, 30, 60]),
    open_end=st.booleans(),
)
def test_property_any_batches_match_the_oracle(spark, settings, tmp_path_factory, batches, scope, slide, open_end):
    frames = [events(*rows) if rows else events(("z", 1.0, 0)).iloc[:0] for rows in batches]
    frames = [f for f in frames if len(f)] or [events(("a", 1.0, 0))]  # a parquet file per non-empty batch
    if not open_end:  # the fleet's clock moves on and the drawn events' windows close (the simplest example too)
        frames.append(events(("z", 1.0, 400)))
    base = tmp_path_factory.mktemp("prop")  # a base path and schema per example
    example = dict(sample_scope=scope, slide_duration=f"{slide} seconds", base_path=str(base), schema=base.name)
    settings = _run(spark, settings, base, frames, **example)
    assert sample_rows(settings) == oracle_rows(reference_samples(frames, 60, slide, 30, scope))
    assert late_rows(settings, "sampling") == late_events(frames, 30_000)
