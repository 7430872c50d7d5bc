"""Small argument helpers the LangChain and LlamaIndex adapters share (no framework imported here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

__all__ = ["split_store_or_path"]

T = TypeVar("T")


def split_store_or_path(
    store: T | str | os.PathLike[str] | None, path: str | Path | None
) -> tuple[T | None, str | Path]:
    """Let an adapter take a built core store *or* a path as its first argument, like the core classes do.

    Returns ``(store, path)`` with ``path`` defaulting to ``":memory:"``.

    >>> split_store_or_path("memory.db", None)
    (None, 'memory.db')
    >>> split_store_or_path(None, None)
    (None, ':memory:')
    """
    if isinstance(store, str | os.PathLike):
        if path is not None:
            raise ValueError(f"got the path twice ({store!r} and path={path!r}): give it once")
        return None, os.fspath(store)
    return store, ":memory:" if path is None else path
