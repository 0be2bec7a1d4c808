"""A small local HTTP server that speaks OpenAI's ``POST /v1/embeddings`` (the one fake the
standards allow: a remote embedding server cannot run here). Its vectors hash words into
``dim`` slots, so texts that share words are near, as with a real model."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def hashed(text: str, dim: int) -> list[float]:
    vector = [0.0] * dim
    for word in text.lower().split() or [""]:
        digest = hashlib.blake2b(word.strip(".,?!").encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dim] += 1.0 if digest[4] & 1 else -1.0
    if not any(vector):
        vector[0] = 1.0
    return vector


class EmbeddingsHandler(BaseHTTPRequestHandler):
    server: EmbeddingsServer

    def log_message(self, *args: Any) -> None:  # keep the test output quiet
        pass

    def do_POST(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer()

    def _answer(self) -> None:
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.path != "/v1/embeddings":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if server.status != 200:
            return self._send(server.status, {"error": {"message": f"status {server.status} by request"}})
        if server.key and self.headers.get("Authorization") != f"Bearer {server.key}":
            return self._send(401, {"error": {"message": "Incorrect API key provided"}})
        dim = int(body.get("dimensions") or server.dim)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": hashed(t, dim)} for i, t in enumerate(texts)]
        data.reverse()  # servers may answer out of order: ``index`` says which is which
        self._send(200, {"object": "list", "data": data, "model": body["model"]})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class EmbeddingsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int = 0, *, dim: int = 256, key: str = "") -> None:
        super().__init__(("127.0.0.1", port), EmbeddingsHandler)
        self.dim = dim
        self.key = key
        #: The status every request gets (200: embeddings).
        self.status = 200
        self.requests: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
