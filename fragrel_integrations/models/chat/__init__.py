"""The ChatModel protocol the core calls (messages -> text, sync and async) and the helpers every backend shares.

A chat model is any object with

* ``invoke(messages, *, temperature=None, max_tokens=None, stop=None) -> str`` and
* ``async ainvoke(messages, *, temperature=None, max_tokens=None, stop=None) -> str``.

``messages`` is a list of ``{"role": "system" | "user" | "assistant", "content": str}`` dicts (or
:class:`ChatMessage` objects, or a single string meaning one user message). ``None`` for a parameter means
"the backend's default". Adapters for the embedded model, OpenAI-compatible servers, LangChain and LlamaIndex
models live next to this module; :func:`~fragrel_integrations.models.convert.as_chat_model` picks the right one
(this package knows none of them). No framework is imported here.

The package holds one concept per module: :mod:`.messages` (roles, :class:`ChatMessage`, :func:`to_messages`),
:mod:`.params` (generation parameters), :mod:`.tools` (tool calls), :mod:`.protocol` (:class:`ChatModel`, model
name and context window), :mod:`.base` (:class:`ChatModelBase`), :mod:`.aio` (async bridging) and :mod:`.batch`
(:func:`batch`, :func:`abatch`, :func:`complete`); every name is importable from here.

Optionally a model also has ``supports_format(reply_format) -> bool`` and then takes ``reply_format=...`` in
``invoke``/``ainvoke`` to constrain its reply (a choice of labels, a regex, a GBNF grammar or a JSON schema; see
:mod:`fragrel_integrations.models.structured`). Steps pass it only to models that declare support
(:func:`~fragrel_integrations.models.structured.format_kwargs`) and always parse the reply, with a lenient
parser as the fallback, so a model without the method works as before.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> model = ScriptedChatModel(["Paris."])
>>> complete(model, "Capital of France?", system="Answer briefly.", max_tokens=8)
'Paris.'
"""

from __future__ import annotations

from .aio import aiter_in_thread
from .base import ChatModelBase
from .batch import abatch, batch, complete
from .messages import ROLES, ChatMessage, Messages, to_messages
from .params import GenerationParams, check_params, given_params
from .protocol import ChatModel, check_chat_model, context_window, is_instance_of, model_id
from .tools import ToolCall, ToolReply, format_tool_call, tool_turn

__all__ = [
    "ROLES",
    "ChatMessage",
    "ChatModel",
    "ChatModelBase",
    "GenerationParams",
    "Messages",
    "ToolCall",
    "ToolReply",
    "abatch",
    "aiter_in_thread",
    "batch",
    "check_chat_model",
    "check_params",
    "complete",
    "context_window",
    "format_tool_call",
    "given_params",
    "is_instance_of",
    "model_id",
    "to_messages",
    "tool_turn",
]
