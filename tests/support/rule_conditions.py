"""Hypothesis strategies for rule conditions as written in YAML: comparisons of ``sensor_freq`` and a second field
(``voltage``, kept through extra_fields), combined with all / any / not, nested (the unit property and the Spark one
draw from the same shapes)."""

from __future__ import annotations

from hypothesis import strategies as st

OPERATORS = ["<", "<=", ">", ">=", "==", "!="]


def conditions(values: list[float], max_leaves: int):
    """Conditions over sensor_freq and voltage, each comparison's value drawn from ``values``."""
    comparisons = st.fixed_dictionaries(
        {
            "field": st.sampled_from(["sensor_freq", "voltage"]),
            "op": st.sampled_from(OPERATORS),
            "value": st.sampled_from(values),
        }
    )
    return st.recursive(
        comparisons,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3).map(lambda parts: {"all": parts}),
            st.lists(inner, min_size=1, max_size=3).map(lambda parts: {"any": parts}),
            inner.map(lambda part: {"not": part}),
        ),
        max_leaves=max_leaves,
    )
