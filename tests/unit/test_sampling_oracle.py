"""02 sampling's pure rule (``sampling.pick_samples``), without Spark: which events of a window are its first, middle
and last samples and its anomalies, with ties, duplicates and the anomaly threshold."""

from __future__ import annotations

import pandas as pd
from support.streams import events

from sensorcep.pipeline import sampling


def roles_by_time(samples: pd.DataFrame) -> dict[float, list[str]]:
    return {
        (t - events(("x", 0, 0)).event_time_us[0]) / 1e6: r
        for t, r in zip(samples.event_time_us, samples.roles, strict=False)
    }


# ---------------------------------------------------------------------------- the pure rule
def test_one_event_is_first_middle_and_last():
    samples = sampling.pick_samples(events(("a", 5.0, 1)))
    assert samples.roles.tolist() == [["first", "middle", "last"]]
    assert samples.is_anomalous.tolist() == [0]


def test_two_events_middle_is_index_one():
    samples = sampling.pick_samples(events(("a", 5.0, 2), ("b", 6.0, 1)))
    assert roles_by_time(samples) == {1.0: ["first"], 2.0: ["middle", "last"]}


def test_ties_in_event_time_are_ordered_by_device_then_freq():
    samples = sampling.pick_samples(events(("b", 1.0, 3), ("a", 9.0, 3), ("c", 7.0, 3)))
    assert samples.device_id.tolist() == ["a", "b", "c"]
    assert samples.roles.tolist() == [["first"], ["middle"], ["last"]]


def test_zero_is_an_ordinary_value_and_negative_is_an_anomaly():
    samples = sampling.pick_samples(events(("a", 0.0, 0), ("b", 0.0, 1), ("c", 3.0, 2), ("d", -0.5, 3), ("e", 4.0, 4)))
    assert roles_by_time(samples) == {0.0: ["first"], 2.0: ["middle"], 3.0: ["anomaly"], 4.0: ["last"]}
    assert samples.set_index("device_id").is_anomalous.to_dict() == {"a": 0, "c": 0, "d": 1, "e": 0}


def test_only_anomalies_every_event_once_with_all_roles():
    samples = sampling.pick_samples(events(("a", -1.0, 0), ("b", -2.0, 1), ("c", -3.0, 2)))
    assert samples.roles.tolist() == [["first", "anomaly"], ["middle", "anomaly"], ["last", "anomaly"]]


def test_duplicates_count_once():
    samples = sampling.pick_samples(events(("a", 1.0, 0), ("a", 1.0, 0), ("b", 2.0, 1), ("c", 3.0, 2)))
    assert samples.device_id.tolist() == ["a", "b", "c"]  # n = 3, so b (index 1) is the middle
    assert samples.roles.tolist() == [["first"], ["middle"], ["last"]]


def test_anomaly_threshold_is_a_parameter():
    samples = sampling.pick_samples(events(("a", 1.0, 0), ("b", 8.0, 1), ("c", 9.0, 2)), anomaly_threshold=8.0)
    assert samples.is_anomalous.tolist() == [1, 0, 0]  # strictly below the threshold
