"""What the OpenAI-compatible chat model and embedder share: where the server is, which key to send, and
error messages that name the server and the fix.

``base_url`` and ``api_key`` come from the arguments or from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. A local
server usually needs no key: with a ``base_url`` and no key a placeholder is sent.

>>> resolve_endpoint("http://127.0.0.1:8080/v1/", "sk-local")
('http://127.0.0.1:8080/v1', 'sk-local')
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["DEFAULT_URL", "PLACEHOLDER_KEY", "client_kwargs", "resolve_endpoint", "translate_error"]

DEFAULT_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "sk-no-key-required"


def resolve_endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """``(base_url, api_key)`` from the arguments, else the environment; ValueError when OpenAI itself would be
    called without a key."""
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
    if api_key is None:
        if base_url is None:
            raise ValueError(
                "no API key: pass api_key=... or set OPENAI_API_KEY; for a local server pass base_url=... "
                "(or set OPENAI_BASE_URL)"
            )
        api_key = PLACEHOLDER_KEY
    return (base_url or DEFAULT_URL).rstrip("/"), api_key


def client_kwargs(
    base_url: str | None, api_key: str | None, timeout: float, default_headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The ``openai.OpenAI`` / ``AsyncOpenAI`` arguments: the server and key of :func:`resolve_endpoint`,
    ``timeout`` (positive seconds per request) and the client's own retries off (``RetryPolicy`` retries).

    >>> client_kwargs("http://127.0.0.1:8080/v1", "sk-local", 30)["timeout"]
    30.0
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    url, key = resolve_endpoint(base_url, api_key)
    return {
        "base_url": url,
        "api_key": key,
        "timeout": float(timeout),
        "max_retries": 0,
        "default_headers": default_headers,
    }


def translate_error(openai: Any, exc: Exception, base_url: str, timeout: float, retries: int) -> Exception:
    """A timeout or an unreachable server as ``TimeoutError`` / ``ConnectionError`` naming ``base_url`` and the
    fix; any other exception unchanged."""
    if isinstance(exc, openai.APITimeoutError):
        return TimeoutError(
            f"the OpenAI-compatible server at {base_url} did not answer within {timeout:g}s "
            f"(after {retries} retries); raise timeout=... or check the server"
        )
    if isinstance(exc, openai.APIConnectionError):
        return ConnectionError(
            f"cannot reach the OpenAI-compatible server at {base_url} "
            f"(after {retries} retries): {exc.__cause__ or exc}. "
            "Is it running? Check base_url / --base-url / OPENAI_BASE_URL."
        )
    return exc
