"""How long the suite looks: ``make test`` runs a few examples of each streaming property (each example is a
streaming query of its own, seconds each), ``make nightly`` (``SENSORCEP_NIGHTLY=1``) the full counts."""

import os

NIGHTLY = os.environ.get("SENSORCEP_NIGHTLY") == "1"


def examples(nightly: int, suite: int = 2) -> int:
    """Hypothesis ``max_examples`` for a streaming property: ``nightly`` in ``make nightly``, ``suite`` otherwise."""
    return nightly if NIGHTLY else min(suite, nightly)
