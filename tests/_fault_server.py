"""A misbehaving OpenAI-compatible server on 127.0.0.1 for the deadline and reply-shape tests.

:class:`FaultServer` answers every request with what ``respond(path, body)`` returns: a :class:`Reply` (status,
raw body bytes) that it can also send one byte at a time (``drip``: seconds between bytes, headers included
when ``drip_headers``), cut short (``cut``: the Content-Length promises more than is sent, then the socket closes)
or never send at all (``silent``). Every wait is bounded (``max_seconds``) and ends when the server stops, so a
test can never hang on it. ``held`` records, per slow or silent reply, the seconds from the request to the moment
the client gave up (closed the connection) or the reply ended: how long the server could hold the client.
"""

from __future__ import annotations

import json
import select
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FaultServer", "Reply", "chat_reply", "embeddings_reply", "sse_reply"]


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"
    drip: float | None = None
    drip_headers: bool = False
    silent: bool = False
    cut: bool = False
    headers: dict[str, str] = field(default_factory=dict)


def chat_reply(message: Any = None, **choice: Any) -> Reply:
    """A ``/chat/completions`` reply whose first choice has ``message`` (a dict, or None for a null message)."""
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
    body["choices"] = [{"index": 0, "finish_reason": "stop", "message": message, **choice}]
    return Reply(body=json.dumps(body).encode())


def embeddings_reply(rows: list[Any], *, index: bool = True) -> Reply:
    """An ``/embeddings`` reply with one item per row (without ``index`` fields when ``index`` is False)."""
    data = [{"object": "embedding", "embedding": r, **({"index": i} if index else {})} for i, r in enumerate(rows)]
    return Reply(body=json.dumps({"object": "list", "model": "m", "data": data}).encode())


def sse_reply(chunks: list[dict[str, Any]], *, done: bool = True) -> Reply:
    """A streamed chat reply: ``chunks`` as server-sent events, then ``[DONE]`` unless ``done`` is False."""
    events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + (["data: [DONE]\n\n"] if done else [])
    return Reply(body="".join(events).encode(), content_type="text/event-stream")


class FaultServer:
    """``with FaultServer(respond) as server: ... server.base_url ...``; ``requests`` holds ``(path, headers,
    body)`` of every request."""

    def __init__(self, respond: Callable[[str, dict], Reply], *, max_seconds: float = 30.0) -> None:
        self.respond = respond
        self.max_seconds = max_seconds
        self.requests: list[tuple[str, dict[str, str], dict]] = []
        self.held: list[float] = []
        self.active = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with outer.lock:
                    outer.active += 1
                try:
                    self.serve()
                finally:
                    with outer.lock:
                        outer.active -= 1

            def serve(self) -> None:
                while not outer.stopped.is_set():
                    line = self.rfile.readline()
                    if not line:
                        return
                    path = line.split()[1].decode()
                    headers = {}
                    while (h := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                        key, _, value = h.decode().partition(":")
                        headers[key.strip().lower()] = value.strip()
                    raw = self.rfile.read(int(headers.get("content-length", 0)))
                    body = json.loads(raw) if raw else {}
                    outer.requests.append((path, headers, body))
                    if not outer.send(self.connection, outer.respond(path, body)):
                        return

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self.server.daemon_threads = True
        self.server.allow_reuse_address = True
        self.server.server_bind()
        self.server.server_activate()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @staticmethod
    def _client_left(conn: socket.socket, wait: float) -> bool:
        """Whether the client closed the connection (waits up to ``wait`` seconds to see)."""
        readable, _, _ = select.select([conn], [], [], wait)
        if not readable:
            return False
        try:
            return conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def send(self, conn: socket.socket, reply: Reply) -> bool:
        """Send ``reply``; False when the connection is done (closed, cut or timed out by the client)."""
        start = time.monotonic()
        end = start + self.max_seconds
        if reply.silent:
            while not self.stopped.is_set() and time.monotonic() < end and not self._client_left(conn, 0.02):
                pass
            self.held.append(time.monotonic() - start)
            return False
        length = len(reply.body) + (100 if reply.cut else 0)
        extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        head = (
            f"HTTP/1.1 {reply.status} X\r\nContent-Type: {reply.content_type}\r\nContent-Length: {length}\r\n"
            f"{extra}\r\n"
        ).encode()
        try:
            if reply.drip is None:
                conn.sendall(head + reply.body)
            else:
                if not reply.drip_headers:
                    conn.sendall(head)
                data = (head if reply.drip_headers else b"") + reply.body
                for i in range(len(data)):
                    if self.stopped.is_set() or time.monotonic() > end:
                        break
                    conn.sendall(data[i : i + 1])
                    if self._client_left(conn, reply.drip):
                        break
                self.held.append(time.monotonic() - start)
                return False
        except OSError:
            self.held.append(time.monotonic() - start)
            return False
        return not reply.cut

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        end = time.monotonic() + 5
        while self.active and time.monotonic() < end:  # let the handlers record what they saw
            time.sleep(0.01)
        self.server.shutdown()
        self.server.server_close()
