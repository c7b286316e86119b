"""A web app of the project served for a test: uvicorn on a free loopback port, in a thread, for the ``with`` block."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def served(app, start_timeout_s: float = 30.0) -> Iterator[str]:
    """The app's base URL while the block runs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:  # uvicorn's own flag: set once the socket listens
        assert thread.is_alive() and time.monotonic() < deadline, "the app did not start"
        time.sleep(0.05)  # polling the flag, not waiting for a guessed time
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
