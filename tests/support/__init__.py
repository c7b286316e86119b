"""Helpers the test tiers share (controlled micro-batches, oracles, crash and fault drivers); no test file imports
another test file."""
