"""Chat messages: the roles, :class:`ChatMessage` and :func:`to_messages`, which normalises every accepted form
(a string, dicts, :class:`ChatMessage` objects) to ``{"role", "content"}`` dicts.

>>> to_messages("Hi")
[{'role': 'user', 'content': 'Hi'}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ROLES", "ChatMessage", "Messages", "to_messages"]


ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat turn. Plain ``{"role": ..., "content": ...}`` dicts work everywhere this does.

    >>> ChatMessage("user", "Hi").to_dict()
    {'role': 'user', 'content': 'Hi'}
    """

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"message content must be str, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


Messages = str | Sequence[Mapping[str, str] | ChatMessage]


def to_messages(messages: Messages) -> list[dict[str, str]]:
    """Normalise ``messages`` to a new list of ``{"role", "content"}`` dicts, validating roles and contents.

    >>> to_messages("Hello")
    [{'role': 'user', 'content': 'Hello'}]
    >>> to_messages([ChatMessage("system", "Be brief."), {"role": "user", "content": "Hi"}])[0]["role"]
    'system'
    """
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, ChatMessage | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(
            f"messages must be a str or a list of {{'role', 'content'}} dicts, got {type(messages).__name__}"
        )
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if isinstance(m, ChatMessage):
            out.append(m.to_dict())
            continue
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        if "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}] needs both 'role' and 'content' keys, got keys {sorted(m)}")
        out.append(ChatMessage(str(m["role"]), m["content"]).to_dict())
    if not out:
        raise ValueError("messages is empty: give at least one user message")
    return out
