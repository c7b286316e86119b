"""The project's one exception base: every failure the project explains in one sentence derives from it.

Each error also keeps the builtin base that fits it (``ValueError`` for a bad setting, ``RuntimeError`` for a state
of the world), so callers may catch either. The CLI and the local job runner print any :class:`SensorCepError` as
its one sentence, without a traceback; anything else is a bug and keeps its traceback.
"""


class SensorCepError(Exception):
    """A failure with a message that says what happened and what to do."""
