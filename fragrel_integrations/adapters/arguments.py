"""Small argument helpers the LangChain and LlamaIndex adapters share: a store or a path, an adapter's kwargs apart
from the core's, a chat model a wrapper can wrap."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["check_wrapped_chat_model", "split_kwargs", "split_store_or_path"]

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


def check_wrapped_chat_model(model: Any, *, native: str | None, convert: str, foreign: bool = False) -> Any:
    """``model`` when a framework wrapper can wrap it: a fragrel ChatModel (``invoke(messages) -> str``).

    ``native`` says what ``model`` already is when it is the framework's own model type (e.g. "a LangChain
    model"; None when it is not); ``foreign`` is True for the other framework's models, named by ``convert``,
    which :func:`~fragrel_integrations.models.as_chat_model` converts.

    >>> class Model:
    ...     def invoke(self, messages): return "hi"
    >>> type(check_wrapped_chat_model(Model(), native=None, convert="LangChain models")).__name__
    'Model'
    """
    if native is not None:
        raise TypeError(f"{type(model).__name__} is already {native}: use it directly instead of wrapping it")
    if foreign or not callable(getattr(model, "invoke", None)):
        raise TypeError(
            f"model must be a fragrel ChatModel with invoke(messages) -> str, got {type(model).__name__}; "
            f"convert {convert} with fragrel_integrations.models.as_chat_model, or pass e.g. "
            "LlamaCppChatModel() / OpenAIChatModel(...)"
        )
    return model


def split_kwargs(kwargs: Mapping[str, Any], names: Collection[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(the kwargs in names, the rest)``: an adapter's own settings apart from those it passes to the core
    (whose defaults then live in one place).

    >>> split_kwargs({"k": 3, "alpha": 0.5}, {"k", "order"})
    ({'k': 3}, {'alpha': 0.5})
    """
    own = {key: value for key, value in kwargs.items() if key in names}
    return own, {key: value for key, value in kwargs.items() if key not in names}
