"""Constrained replies (:class:`ReplyFormat`): one of some labels, a regex, a GBNF grammar or a JSON schema.

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

from .._validation import check_type

__all__ = ["MAX_PARSE_CHARS", "ReplyFormat", "format_kwargs", "supports_format"]

FormatKind = Literal["choice", "regex", "grammar", "json"]
_KINDS = ("choice", "regex", "grammar", "json")

MAX_PARSE_CHARS = 100_000  #: the longest reply :meth:`ReplyFormat.parse` reads

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TRIM = " \t\r\n.!\"'`*"
_JSON_TYPE = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


@dataclass(frozen=True, slots=True)
class ReplyFormat:
    """A reply's shape, built by :meth:`choice`, :meth:`regex`, :meth:`grammar` or :meth:`json`; ``spec`` is the
    regex, the GBNF or the schema as canonical JSON."""

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
            bad = [c for c in self.choices if not isinstance(c, str) or not c.strip() or c != c.strip() or "\n" in c]
            if bad:
                raise ValueError(
                    f"choice labels must be non-empty one-line strings without edge spaces, got {bad[0]!r}"
                )
            if len({c.lower() for c in self.choices}) != len(self.choices):
                raise ValueError(f"choice labels must differ (ignoring case), got {list(self.choices)}")
        elif not isinstance(self.spec, str) or not self.spec.strip():
            raise ValueError(f"a {self.kind} format needs a non-empty spec")
        elif self.choices:
            raise ValueError("choices are only for ReplyFormat.choice")
        elif self.kind == "regex":
            try:
                re.compile(self.spec)
            except re.error as exc:
                raise ValueError(f"regex {self.spec!r} does not compile: {exc}") from exc
            if self.spec.startswith("^") or self.spec.endswith("$"):
                raise ValueError("give the regex without ^ and $: it always has to match the whole reply")
        elif self.kind == "json" and not isinstance(_decode(self.spec), dict):
            raise ValueError('a JSON schema must be JSON text of an object, e.g. \'{"type": "object"}\'')

    @classmethod
    def choice(cls, labels: Sequence[str], *, name: str = "choice") -> ReplyFormat:
        """Exactly one of ``labels`` (e.g. ``["yes", "no"]``)."""
        if isinstance(labels, str) or not isinstance(labels, Sequence):
            raise TypeError(f"labels must be a list of strings, got {type(labels).__name__}")
        return cls("choice", "", tuple(labels), name)

    @classmethod
    def regex(cls, pattern: str, *, name: str = "reply") -> ReplyFormat:
        """Text matching ``pattern`` as a whole (no look-arounds or back-references)."""
        return cls("regex", check_type(pattern, str, "pattern must be str"), (), name)

    @classmethod
    def grammar(cls, gbnf: str, *, name: str = "reply") -> ReplyFormat:
        """A llama.cpp GBNF grammar (rule ``root`` first); :meth:`parse` takes any text."""
        check_type(gbnf, str, "gbnf must be str")
        if not re.search(r"^\s*root\s*::=", gbnf, re.MULTILINE):
            raise ValueError("a GBNF grammar needs a 'root ::= ...' rule")
        return cls("grammar", gbnf, (), name)

    @classmethod
    def json(cls, schema: Mapping[str, Any], *, name: str = "reply") -> ReplyFormat:
        """A JSON value matching ``schema`` (a JSON-schema dict)."""
        check_type(schema, Mapping, "schema must be a dict (a JSON schema)")
        try:
            spec = json.dumps(schema, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the JSON schema must be JSON-serialisable: {exc}") from exc
        return cls("json", spec, (), name)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema of a ``json`` format (a fresh dict), else None."""
        return json.loads(self.spec) if self.kind == "json" else None

    def response_schema(self) -> dict[str, Any] | None:
        """An OpenAI ``response_format`` schema: a JSON format's own, else ``{"answer": ...}``."""
        if self.kind in ("json", "grammar"):
            return self.schema
        key, value = ("enum", list(self.choices)) if self.kind == "choice" else ("pattern", f"^(?:{self.spec})$")
        properties = {"answer": {"type": "string", key: value}}
        return {"type": "object", "properties": properties, "required": ["answer"], "additionalProperties": False}

    def unwrap(self, text: str) -> str:
        """The answer of a choice or regex :meth:`response_schema` reply; other text unchanged."""
        value = _decode(text) if self.kind in ("choice", "regex") else None
        if isinstance(value, dict) and isinstance(value.get("answer"), str):
            return value["answer"]
        return text

    def parse(self, text: object) -> Any:
        """The reply's value when it conforms, else None: a choice's label (case, edge quotes and stop ignored),
        the stripped text (regex, grammar), the JSON value."""
        check_type(text, str, "a model reply must be str")
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
        value = _decode(stripped)
        return value if _conforms(value, self.schema, 0) else None


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _conforms(value: Any, schema: Any, depth: int) -> bool:
    """A JSON value against the schema's type, enum, const, lengths, items and properties."""
    if depth > 32 or not isinstance(schema, dict):
        return depth <= 32
    kind = schema.get("type")
    kinds = [k for k in (kind if isinstance(kind, list) else [kind]) if isinstance(k, str)]
    name = _JSON_TYPE.get(type(value), "null")
    if kinds and name not in kinds and not (name == "integer" and "number" in kinds):
        return False
    if ("enum" in schema and value not in schema["enum"]) or ("const" in schema and value != schema["const"]):
        return False
    if isinstance(value, str):
        return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
    if isinstance(value, list):
        prefix, rest = schema.get("prefixItems") or [], schema.get("items")
        return (
            schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value))
            and all(_conforms(item, sub, depth + 1) for item, sub in zip(value, prefix, strict=False))
            and (not isinstance(rest, dict) or all(_conforms(v, rest, depth + 1) for v in value[len(prefix) :]))
        )
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        return (
            all(k in value for k in schema.get("required") or ())
            and not (schema.get("additionalProperties") is False and any(k not in props for k in value))
            and all(_conforms(value[k], sub, depth + 1) for k, sub in props.items() if k in value)
        )
    return True


def supports_format(model: object, reply_format: ReplyFormat) -> bool:
    """Whether ``model``'s own ``supports_format`` says True (False when it fails)."""
    check_type(reply_format, ReplyFormat, "reply_format must be a ReplyFormat")
    check = getattr(model, "supports_format", None)
    try:
        return callable(check) and check(reply_format) is True
    except Exception:  # a foreign model's check must not break the step
        return False


def format_kwargs(model: object, reply_format: ReplyFormat | None) -> dict[str, ReplyFormat]:
    """``{"reply_format": fmt}`` for a model that enforces ``fmt``, else ``{}``.

    >>> from fragrel_integrations.testing import ScriptedChatModel
    >>> format_kwargs(ScriptedChatModel(["x"]), ReplyFormat.choice(["yes", "no"]))
    {}
    """
    enforced = reply_format is not None and supports_format(model, reply_format)
    return {"reply_format": reply_format} if enforced else {}
