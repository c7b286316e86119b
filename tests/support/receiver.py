"""A receiver on loopback for the routes' tests (no network beyond it): a real HTTP server that records each POST
(path, headers, body) and answers with the next of ``codes`` (then 200), or 500 to a path in ``failing``."""

from __future__ import annotations

import http.server
import threading


class LoopbackReceiver:
    def __init__(self, failing: tuple[str, ...] = ()):
        self.received: list[tuple[str, dict, bytes]] = []
        self.codes: list[int] = []
        self.failing = failing
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((self.path, dict(self.headers), body))
                code = 500 if self.path in receiver.failing else receiver.codes.pop(0) if receiver.codes else 200
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> LoopbackReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def at(self, path: str) -> list[tuple[str, dict, bytes]]:
        """What was POSTed to ``path``."""
        return [r for r in self.received if r[0] == path]
