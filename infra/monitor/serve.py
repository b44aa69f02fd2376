"""The monitor as a web page and a JSON endpoint: stdlib http.server, loopback by default.

    GET /               the page (html_page), refreshing itself every interval
    GET /snapshot.json  the same snapshot as JSON (render.to_json)

Each request takes a snapshot; that costs no scheduler call of its own (the sources serve
their last answer until the interval has passed), so a page left open refreshes nothing
faster than the interval allows.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable

from infra.monitor.model import Snapshot
from infra.monitor.render import html_page, to_json

LOOPBACK = "127.0.0.1"


def make_server(
    take: Callable[[], Snapshot], host: str = LOOPBACK, port: int = 0, refresh_s: float | None = None
) -> http.server.ThreadingHTTPServer:
    """A server bound to host:port (0: any free port; read `server.server_address`)."""

    class SnapshotHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                body, kind = html_page(take(), refresh_s).encode(), "text/html; charset=utf-8"
            elif path == "/snapshot.json":
                body, kind = to_json(take()).encode(), "application/json"
            else:
                self.send_error(404, "not here: / (page) and /snapshot.json")
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # the terminal belongs to the caller

    return http.server.ThreadingHTTPServer((host, port), SnapshotHandler)


def serve_in_thread(server: http.server.ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="monitor-http", daemon=True)
    thread.start()
    return thread
