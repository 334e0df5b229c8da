"""A real HTTP server on 127.0.0.1 (a free port) for ``webhook.http``: it answers as the server of
Conduit's webhook examples does (github.com/ConduitIO/conduit pkg/plugin/processor/builtin/impl/webhook/
http_examples_test.go: ``hello, <body>`` on ``/``, ``hello, <path>!`` elsewhere), plus paths that fail
(``/flaky`` while ``fails_left``), answer slowly (``/slow``) or 404 (``/missing``)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class WebhookHandler(BaseHTTPRequestHandler):
    fails_left = 0
    seen: list = []  # (method, path, headers, body) of every request

    def log_message(self, *args):  # keep test output clean
        pass

    def _reply(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        WebhookHandler.seen.append((self.command, self.path, dict(self.headers), body))
        if self.path.startswith("/flaky") and WebhookHandler.fails_left > 0:
            WebhookHandler.fails_left -= 1
            status, payload = 503, b"try later"
        elif self.path.startswith("/slow"):
            time.sleep(1.0)
            status, payload = 200, b"late"
        elif self.path.startswith("/missing"):
            status, payload = 404, b"nothing here"
        elif self.path == "/":
            status, payload = 200, b"hello, " + body
        else:
            status, payload = 200, b"hello, " + self.path.lstrip("/").encode() + b"!"
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = _reply


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that timed out closed its socket
        pass


@contextmanager
def webhook_server() -> Iterator[str]:
    """The server's base URL while the block runs."""
    srv = _QuietServer(("127.0.0.1", 0), WebhookHandler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
