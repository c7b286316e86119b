"""The laptop twin: a real Kafka broker, the simulator, the jars, the local job runner, the summary.

Nothing under ``sensorcep.pipeline`` or ``sensorcep.io`` imports this package (``tests/unit/test_layout.py``)."""
