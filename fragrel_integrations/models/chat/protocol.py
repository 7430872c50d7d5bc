"""The :class:`ChatModel` protocol (messages in, text out; sync and async) and what the library reads of any
model object: its name (:func:`model_id`) and context window (:func:`context_window`).

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> isinstance(ScriptedChatModel(["x"]), ChatModel)
True
"""

from __future__ import annotations

import sys
from typing import Protocol, Unpack, runtime_checkable

from .messages import Messages
from .params import GenerationParams

__all__ = ["ChatModel", "check_chat_model", "context_window", "is_instance_of", "model_id"]


@runtime_checkable
class ChatModel(Protocol):
    """Messages in, text out; sync and async. See the module docstring for the contract; the keywords are
    :class:`GenerationParams` (an implementation spells them out: ``*, temperature=None, max_tokens=None,
    stop=None``)."""

    def invoke(self, messages: Messages, **params: Unpack[GenerationParams]) -> str: ...

    async def ainvoke(self, messages: Messages, **params: Unpack[GenerationParams]) -> str: ...


def check_chat_model(model: object) -> ChatModel:
    """``model`` if it is a :class:`ChatModel`, else a TypeError naming the conversion."""
    if not isinstance(model, ChatModel):
        raise TypeError(
            f"expected a ChatModel (invoke + ainvoke), got {type(model).__name__}; "
            "wrap LangChain or LlamaIndex models with fragrel_integrations.models.as_chat_model"
        )
    return model


def model_id(model: object) -> str:
    """A stable name for ``model`` (used in cache keys): its ``model_name``/``model`` attribute, else its class.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> model_id(ScriptedChatModel(["x"]))
    'scripted'
    """
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    metadata = getattr(model, "metadata", None)  # LlamaIndex LLMs
    value = getattr(metadata, "model_name", None)
    if isinstance(value, str) and value:
        return value
    return f"{type(model).__module__}.{type(model).__qualname__}"


def context_window(model: object, default: int | None = None) -> int | None:
    """The model's context window in tokens if it says (``context_window`` attribute or LlamaIndex metadata)."""
    for obj in (model, getattr(model, "metadata", None)):
        value = getattr(obj, "context_window", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def is_instance_of(obj: object, module: str, attr: str) -> bool:
    """``isinstance(obj, module.attr)`` without importing ``module`` unless it is already imported."""
    if module.split(".")[0] not in sys.modules:
        return False
    try:
        mod = __import__(module, fromlist=[attr])
    except ImportError:  # pragma: no cover - a half-installed framework
        return False
    cls = getattr(mod, attr, None)
    return isinstance(cls, type) and isinstance(obj, cls)
