"""A local server that answers as OpenAI, Cohere and Ollama document their APIs (OpenAI
/v1/embeddings and /v1/chat/completions, Cohere /v2/chat, /v2/embed and /v2/rerank, Ollama
/api/generate), with the answers Conduit's processor examples get from their mock clients
(github.com/ConduitIO/conduit pkg/plugin/processor/builtin/impl/{openai,cohere,ollama}/*_examples_test.go)."""

from __future__ import annotations

import json
import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

KEY = "sk-test-secret-4711"


class FakeProviders(ThreadingHTTPServer):
    """One server answering as OpenAI, Cohere and Ollama do. ``fail_with`` makes every answer
    that status; a text containing ``REFUSE`` gets a 400, as a content-policy refusal would."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict]] = []
        self.fail_with: int | None = None
        self.delay = 0.0
        self.key = KEY  # the API key a request must bear (Ollama's API has none)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address):  # a client that timed out closed its socket
        pass


def _refused(texts) -> bool:
    return any("REFUSE" in t for t in texts)


class _Handler(BaseHTTPRequestHandler):
    server: FakeProviders

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        time.sleep(self.server.delay)
        if self.server.fail_with:
            return self._send(self.server.fail_with, {"error": {"message": "overloaded"}})
        if not self.path.startswith("/api/") and self.headers.get("Authorization") != f"Bearer {self.server.key}":
            return self._send(401, {"error": {"message": "invalid api key"}})
        route = {"/v1/embeddings": self._openai_embeddings, "/v1/chat/completions": self._openai_chat,
                 "/v2/chat": self._cohere_chat, "/v2/embed": self._cohere_embed, "/v2/rerank": self._cohere_rerank,
                 "/api/generate": self._ollama}.get(self.path)
        if route is None:
            return self._send(404, {"error": "not found"})
        route(body)

    def _openai_embeddings(self, body):
        if "ECHO" in body["input"]:
            return self._send(400, {"error": {"message": f"bad credentials {self.headers['Authorization']}"}})
        if _refused(body["input"]):
            return self._send(400, {"error": {"message": "input refused", "type": "invalid_request_error"}})
        data = [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3, 0.4, 0.5]}
                for i, _ in enumerate(body["input"])]
        self._send(200, {"object": "list", "data": data, "model": body["model"],
                         "usage": {"prompt_tokens": 8, "total_tokens": 8}})

    def _openai_chat(self, body):
        user = body["messages"][-1]["content"]
        if _refused([user]):
            return self._send(400, {"error": {"message": "content policy", "type": "invalid_request_error"}})
        # the doc example's developer message asks for the payload in upper case
        self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": user.upper()}}]})

    def _cohere_chat(self, body):
        text = body["messages"][0]["content"]
        if _refused([text]):
            return self._send(400, {"message": "invalid request"})
        self._send(200, {"id": "c1", "finish_reason": "COMPLETE",
                         "message": {"role": "assistant",
                                     "content": [{"type": "text", "text": "cohere command response content"}]}})

    def _cohere_embed(self, body):
        if _refused(body["texts"]):
            return self._send(400, {"message": "invalid request"})
        self._send(200, {"id": "e1", "embeddings": {"float": [[0.1, 0.2, 0.3] for _ in body["texts"]]},
                         "texts": body["texts"], "meta": {"api_version": {"version": "2"}}})

    def _cohere_rerank(self, body):
        # scores as Conduit's mock rerank client gives them: 0.9, 0.8, ... by input order
        results = [{"index": i, "relevance_score": round(0.9 - 0.1 * i, 1), "document": {"text": d}}
                   for i, d in enumerate(body["documents"])]
        self._send(200, {"id": "r1", "results": results, "meta": {}})

    def _ollama(self, body):
        record = json.loads(re.search(r"Record: \{(.*)\} \n Suffix", body["prompt"], re.S).group(1))
        answer = {k: v + 1 if isinstance(v, int) else v for k, v in record.items()}
        # the fields of Conduit's test/ollama-record-response.json, with the answer computed
        self._send(200, {"model": body["model"], "created_at": "2025-04-09T04:18:57.239864Z",
                         "response": json.dumps(answer), "done": True, "done_reason": "stop"})


@contextmanager
def fake_providers() -> Iterator[FakeProviders]:
    srv = FakeProviders()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
