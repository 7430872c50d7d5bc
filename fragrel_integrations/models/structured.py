"""Constrained replies: a step asks a chat model for a reply of a given shape (:class:`ReplyFormat`).

A format is one of

* ``ReplyFormat.choice(["yes", "no"])`` — exactly one of the labels;
* ``ReplyFormat.regex(r"...")`` — text matching a regular expression (anchored at both ends);
* ``ReplyFormat.grammar(gbnf)`` — a llama.cpp GBNF grammar (only llama.cpp backends can enforce it);
* ``ReplyFormat.json(schema)`` — a JSON value matching a JSON schema.

Backends that can enforce a format say so with ``supports_format(fmt)`` and take ``reply_format=fmt`` in
``invoke``/``ainvoke``: :class:`~fragrel_integrations.models.llama_cpp_chat.LlamaCppChatModel` compiles every
kind to a llama.cpp grammar, :class:`~fragrel_integrations.models.openai_chat.OpenAIChatModel` sends choice, regex
and JSON formats as ``response_format`` ``json_schema`` (falling back to plain text once a server refuses it).
Any other model (a user's own ``invoke``/``ainvoke`` object, LangChain and LlamaIndex models) is called as before:
:func:`format_kwargs` adds the argument only for models that declare support, and the step parses the reply with
:meth:`ReplyFormat.parse` and then its own lenient parser. So existing models keep working unchanged.

>>> fmt = ReplyFormat.choice(["yes", "no"])
>>> fmt.parse(" Yes."), fmt.parse("maybe")
('yes', None)
>>> ReplyFormat.json({"type": "array", "items": {"type": "string"}}).parse('["a", "b"]')
['a', 'b']
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MAX_PARSE_CHARS", "ReplyFormat", "format_kwargs", "supports_format"]

FormatKind = Literal["choice", "regex", "grammar", "json"]
_KINDS = ("choice", "regex", "grammar", "json")

MAX_PARSE_CHARS = 100_000
"""Longest reply :meth:`ReplyFormat.parse` looks at (a longer one does not conform)."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TRIM = " \t\r\n.!\"'`*"
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True, slots=True)
class ReplyFormat:
    """The shape a step wants a reply in. Build it with :meth:`choice`, :meth:`regex`, :meth:`grammar` or
    :meth:`json` (the constructor validates the same way). ``spec`` is the regex, the GBNF text or the JSON schema
    (canonical JSON text, so the format is hashable and can be part of a cache key); ``choices`` the labels."""

    kind: FormatKind
    spec: str = ""
    choices: tuple[str, ...] = ()
    name: str = "reply"

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {self.kind!r}")
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"name must be 1-64 letters, digits, '_' or '-', got {self.name!r}")
        if self.kind == "choice":
            if isinstance(self.choices, str) or not self.choices:
                raise ValueError("a choice format needs at least one label, e.g. ReplyFormat.choice(['yes', 'no'])")
            for label in self.choices:
                if not isinstance(label, str) or not label.strip() or label != label.strip() or "\n" in label:
                    raise ValueError(
                        f"choice labels must be non-empty one-line strings without edge spaces, got {label!r}"
                    )
            if len({c.lower() for c in self.choices}) != len(self.choices):
                raise ValueError(f"choice labels must differ (ignoring case), got {list(self.choices)}")
            return
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ValueError(f"a {self.kind} format needs a non-empty spec")
        if self.choices:
            raise ValueError("choices are only for ReplyFormat.choice")
        if self.kind == "regex":
            try:
                re.compile(self.spec)
            except re.error as exc:
                raise ValueError(f"regex {self.spec!r} does not compile: {exc}") from exc
            if self.spec.startswith("^") or self.spec.endswith("$"):
                raise ValueError("give the regex without ^ and $: it always has to match the whole reply")
        elif self.kind == "json":
            try:
                schema = json.loads(self.spec)
            except ValueError as exc:
                raise ValueError(f"the JSON schema is not valid JSON: {exc}") from exc
            if not isinstance(schema, dict):
                raise ValueError("a JSON schema must be a JSON object, e.g. {'type': 'object', ...}")

    # ------------------------------------------------------------------------------------------ constructors
    @classmethod
    def choice(cls, labels: Sequence[str], *, name: str = "choice") -> ReplyFormat:
        """Exactly one of ``labels`` (e.g. ``["yes", "no"]``)."""
        if isinstance(labels, str) or not isinstance(labels, Sequence):
            raise TypeError(f"labels must be a list of strings, got {type(labels).__name__}")
        return cls("choice", "", tuple(labels), name)

    @classmethod
    def regex(cls, pattern: str, *, name: str = "reply") -> ReplyFormat:
        """Text matching ``pattern`` as a whole (Python syntax; keep to what JSON-schema ``pattern`` and llama.cpp
        support: classes, groups, alternation, ``? * + {m,n}``; no look-arounds or back-references)."""
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be str, got {type(pattern).__name__}")
        return cls("regex", pattern, (), name)

    @classmethod
    def grammar(cls, gbnf: str, *, name: str = "reply") -> ReplyFormat:
        """A llama.cpp GBNF grammar (rule ``root`` first). Only llama.cpp backends enforce it and it cannot be
        checked in Python: :meth:`parse` returns any non-empty reply."""
        if not isinstance(gbnf, str):
            raise TypeError(f"gbnf must be str, got {type(gbnf).__name__}")
        if not re.search(r"^\s*root\s*::=", gbnf, re.MULTILINE):
            raise ValueError("a GBNF grammar needs a 'root ::= ...' rule")
        return cls("grammar", gbnf, (), name)

    @classmethod
    def json(cls, schema: Mapping[str, Any], *, name: str = "reply") -> ReplyFormat:
        """A JSON value matching ``schema`` (a JSON-schema dict)."""
        if not isinstance(schema, Mapping):
            raise TypeError(f"schema must be a dict (a JSON schema), got {type(schema).__name__}")
        try:
            spec = json.dumps(schema, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the JSON schema must be JSON-serialisable: {exc}") from exc
        return cls("json", spec, (), name)

    # ------------------------------------------------------------------------------------------ use
    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema of a ``json`` format (a fresh dict), else None."""
        return json.loads(self.spec) if self.kind == "json" else None

    def response_schema(self) -> dict[str, Any] | None:
        """The JSON schema an OpenAI-style ``response_format`` carries for this format: the schema itself for
        ``json``; an object ``{"answer": ...}`` holding the label (``choice``) or the text (``regex``), which
        :meth:`unwrap` turns back into the reply; None for ``grammar`` (not expressible)."""
        if self.kind == "json":
            return self.schema
        if self.kind == "grammar":
            return None
        answer: dict[str, Any] = (
            {"type": "string", "enum": list(self.choices)}
            if self.kind == "choice"
            else {"type": "string", "pattern": f"^(?:{self.spec})$"}
        )
        return {
            "type": "object",
            "properties": {"answer": answer},
            "required": ["answer"],
            "additionalProperties": False,
        }

    def unwrap(self, text: str) -> str:
        """The reply text from a server's ``response_schema`` reply (``{"answer": ...}`` -> its value for choice
        and regex formats; JSON formats are returned as they are). Unparseable text is returned unchanged."""
        if self.kind not in ("choice", "regex"):
            return text
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if isinstance(value, dict) and isinstance(value.get("answer"), str):
            return value["answer"]
        return text

    def parse(self, text: object) -> Any:
        """The reply's value when it conforms, else None: the label (in the format's spelling) of a choice
        (case, spaces, quotes and a final full stop ignored), the whole stripped text for a regex (full match),
        the decoded JSON value when it matches the schema (types, required keys, enums, item counts), and the
        stripped text for a grammar (not checkable). Never raises on a string; linear in the reply for choices
        and JSON."""
        if not isinstance(text, str):
            raise TypeError(f"a model reply must be str, got {type(text).__name__}")
        if len(text) > MAX_PARSE_CHARS:
            return None
        stripped = text.strip()
        if self.kind == "choice":
            wanted = stripped.strip(_TRIM).lower()
            return next((c for c in self.choices if c.lower() == wanted), None)
        if self.kind == "regex":
            return stripped if re.fullmatch(self.spec, stripped) else None
        if self.kind == "grammar":
            return stripped or None
        try:
            value = json.loads(stripped)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested deeper than the decoder goes
            return None
        return value if _conforms(value, json.loads(self.spec), 0) else None


def _conforms(value: Any, schema: Any, depth: int) -> bool:
    """A small JSON-schema check (type, enum, const, properties/required/additionalProperties, items/prefixItems,
    min/maxItems, min/maxLength); keywords it does not know are accepted."""
    if depth > 32 or not isinstance(schema, dict):
        return depth <= 32
    kind = schema.get("type")
    if isinstance(kind, str):
        kinds = [kind]
    elif isinstance(kind, list):
        kinds = [k for k in kind if isinstance(k, str)]
    else:
        kinds = []
    if kinds:
        ok = any(
            isinstance(value, _JSON_TYPES.get(k, ())) and not (k in ("integer", "number") and isinstance(value, bool))
            for k in kinds
        )
        if not ok:
            return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "const" in schema and value != schema["const"]:
        return False
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        return False
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            return False
        prefix = schema.get("prefixItems") or []
        for item, sub in zip(value, prefix, strict=False):
            if not _conforms(item, sub, depth + 1):
                return False
        rest = schema.get("items")
        if isinstance(rest, dict) and not all(_conforms(v, rest, depth + 1) for v in value[len(prefix) :]):
            return False
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        if any(k not in value for k in schema.get("required") or ()):
            return False
        if schema.get("additionalProperties") is False and any(k not in props for k in value):
            return False
        if not all(_conforms(value[k], sub, depth + 1) for k, sub in props.items() if k in value):
            return False
    return True


def supports_format(model: object, reply_format: ReplyFormat) -> bool:
    """Whether ``model`` enforces ``reply_format`` (its ``supports_format`` method says so); False for models
    without that method, or whose method fails."""
    if not isinstance(reply_format, ReplyFormat):
        raise TypeError(f"reply_format must be a ReplyFormat, got {type(reply_format).__name__}")
    check = getattr(model, "supports_format", None)
    if not callable(check):
        return False
    try:
        return check(reply_format) is True
    except Exception:  # a foreign model's check must not break the step: treat as unsupported
        return False


def format_kwargs(model: object, reply_format: ReplyFormat | None) -> dict[str, ReplyFormat]:
    """``{"reply_format": fmt}`` for a model that enforces ``fmt``, else ``{}``: spread it into
    ``model.invoke(...)``/``ainvoke(...)`` so models without the argument are called as before.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> format_kwargs(ScriptedChatModel(["x"]), ReplyFormat.choice(["yes", "no"]))
    {}
    """
    if reply_format is None or not supports_format(model, reply_format):
        return {}
    return {"reply_format": reply_format}
