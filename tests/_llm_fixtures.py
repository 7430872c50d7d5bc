"""Real-LLM helpers shared by the model tests: the embedded SmolLM2 (loaded once per process) and
llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with the same model (started once per process, stopped
when it exits). Test modules wrap :func:`get_embedded` and :func:`get_server` in their own fixtures.
:class:`FakeOpenAIServer` is a stdlib HTTP server on 127.0.0.1 that fails or delays on plan (retry tests).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "SERVER_MODEL",
    "FakeOpenAIServer",
    "LocalServer",
    "free_port",
    "get_embedded",
    "get_llama_cpp",
    "get_server",
    "start_server",
]

SERVER_MODEL = "smollm2"
_LOCK = threading.Lock()
_SERVER: LocalServer | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalServer:
    """A running ``python -m llama_cpp.server`` process."""

    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_server(
    model_path: Path, *, n_ctx: int = 2048, startup_timeout: float = 120.0, extra: tuple[str, ...] = ()
) -> LocalServer:
    """Start llama-cpp-python's server with ``model_path`` on a free loopback port (``extra``: more server
    options, e.g. ``("--embedding", "true")``); wait until it serves."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="fragrel-llm-server-", suffix=".log")[1])
    launch = (  # llama-cpp-python's server, loading as LlamaCppChatModel does (no AMX-repacked weights)
        "import runpy, sys\nfrom fragrel_integrations.models.llama_cpp_chat import portable_loading\n"
        "with portable_loading():\n    runpy.run_module('llama_cpp.server', run_name='__main__')"
    )
    cmd = [
        sys.executable, "-c", launch,
        "--model", str(model_path), "--model_alias", SERVER_MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", "1", "--n_threads_batch", "1", "--seed", "0", *extra,
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
    server = LocalServer(proc, port, log)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as resp:
                if resp.status == 200 and SERVER_MODEL in json.loads(resp.read())["data"][0]["id"]:
                    return server
        except OSError:
            pass
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"llama_cpp.server did not answer within {startup_timeout:.0f}s:\n{server.log_tail()}")


def get_server() -> LocalServer:
    """The process-wide server (started on first use, stopped when the test process exits)."""
    global _SERVER
    with _LOCK:
        if _SERVER is None or _SERVER.process.poll() is not None:
            from fragrel_integrations.models.transformers_chat import smollm2_gguf_path

            _SERVER = start_server(smollm2_gguf_path())
            atexit.register(_SERVER.stop)
        return _SERVER


_LLAMA_CPP: list = []


def get_llama_cpp():
    """A process-wide LlamaCppChatModel on the embedded GGUF (loaded portably): the runtime whose grammars the
    tool-calling tests use (the transformers default has no tool calling)."""
    with _LOCK:
        if not _LLAMA_CPP:
            from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

            _LLAMA_CPP.append(LlamaCppChatModel())
        return _LLAMA_CPP[0]


def get_embedded():
    """The embedded SmolLM2-135M-Instruct (the library's process-wide default, loaded once)."""
    from fragrel_integrations.models.transformers_chat import default_chat_model

    return default_chat_model()


class FakeOpenAIServer:
    """A tiny OpenAI-compatible endpoint: answers ``/v1/chat/completions`` and ``/v1/embeddings`` (vectors of
    ``fragrel_integrations.testing.HashingEmbedder``) from a plan of status codes.

    ``plan`` is consumed one request at a time (e.g. ``[503, 503, 200]``); after it ends every request gets 200.
    ``delay`` seconds are slept per request; ``in_flight``/``max_in_flight`` count concurrent requests.
    ``fault`` breaks the embeddings replies on purpose: ``"short"`` (one vector missing), ``"ragged"`` (vectors of
    two lengths), ``"nan"`` or ``"base64"`` (a string instead of floats). ``reply`` fixes the chat reply (default:
    ``"echo: "`` + the last message); ``logprobs`` says how a request asking for logprobs is answered:
    ``"logprobs"`` (top logprobs Yes 0.2, No 0.6), ``"refuse"`` (a 500 naming logprobs) or ``"absent"``.
    """

    def __init__(self, plan=(), delay=0.0, retry_after=None, fault=None, dim=32, reply=None, logprobs="absent"):
        from fragrel_integrations.testing import HashingEmbedder

        self.embedder = HashingEmbedder(dim=dim)
        self.fault = fault
        self.reply = reply
        self.logprobs = logprobs
        self.plan = list(plan)
        self.delay = delay
        self.retry_after = retry_after
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    status = outer.plan.pop(0) if outer.plan else 200
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if outer.delay:
                        time.sleep(outer.delay)
                    if status == 200 and self.path.endswith("/embeddings"):
                        payload = outer.embeddings(body)
                    elif status == 200 and body.get("logprobs") and outer.logprobs == "refuse":
                        status, payload = 500, {"error": {"message": "logprobs is not supported", "code": 500}}
                    elif status == 200:
                        payload = outer.chat(body)
                    else:
                        payload = {"error": {"message": f"planned {status}", "type": "test", "code": status}}
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status == 429 and outer.retry_after is not None:
                        self.send_header("Retry-After", str(outer.retry_after))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def chat(self, body: dict) -> dict:
        """The ``/chat/completions`` reply for ``body`` (with top logprobs where asked and ``self.logprobs`` says)."""
        text = self.reply if self.reply is not None else "echo: " + body["messages"][-1]["content"]
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": text},
        }
        if body.get("logprobs") and self.logprobs == "logprobs":
            yes, no = math.log(0.2), math.log(0.6)
            top = [{"token": "Yes", "logprob": yes, "bytes": None}, {"token": "No", "logprob": no, "bytes": None}]
            choice["logprobs"] = {"content": [{"token": "No", "logprob": no, "bytes": None, "top_logprobs": top}]}
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}

    def embeddings(self, body: dict) -> dict:
        """The ``/embeddings`` reply for ``body``, broken as ``self.fault`` says."""
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        rows = self.embedder.embed_documents(texts).tolist()
        if self.fault == "short":
            rows = rows[:-1]
        elif self.fault == "ragged" and len(rows) > 1:
            rows[1] = rows[1][:-1]
        elif self.fault == "nan":
            rows[0][0] = float("nan")
        data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)]
        if self.fault == "base64":
            data = [{**d, "embedding": "AAAA"} for d in data]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return {"object": "list", "model": body["model"], "data": data, "usage": usage}

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
