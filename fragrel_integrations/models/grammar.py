"""llama.cpp GBNF grammars for constrained replies: :func:`gbnf` turns a
:class:`~fragrel_integrations.models.structured.ReplyFormat` into grammar text, :func:`check_gbnf` checks a
grammar with llama.cpp's own parser before it can reach a sampler.

Regex and JSON-schema formats are translated by llama-cpp-python's port of llama.cpp's ``json-schema-to-grammar``
(``llama_cpp.llama_grammar``: ``json_schema_to_gbnf`` and ``SchemaConverter``); this module writes only the
choice rule (literal alternatives, :func:`choice_gbnf`) and passes hand-written grammars through. No model is
needed, and llama-cpp-python is imported only for regex and JSON formats.

>>> from fragrel_integrations.models.structured import ReplyFormat
>>> print(gbnf(ReplyFormat.choice(["yes", "no"])), end="")
root ::= "yes" | "no"
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .structured import ReplyFormat

__all__ = ["check_gbnf", "choice_gbnf", "gbnf", "gbnf_literal"]


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal (GBNF string literals take JSON-style escapes).

    >>> gbnf_literal('say "hi"')
    '"say \\\\"hi\\\\""'
    """
    return json.dumps(text, ensure_ascii=False)


def choice_gbnf(options: Iterable[str]) -> str:
    """A grammar whose only sentences are ``options``, verbatim.

    >>> choice_gbnf(["functions.weather:", "message:"])
    'root ::= "functions.weather:" | "message:"\\n'
    """
    return "root ::= " + " | ".join(gbnf_literal(o) for o in options) + "\n"


_NON_CAPTURING = re.compile(r"(?<!\\)\(\?:")


def gbnf(reply_format: ReplyFormat) -> str:
    """The llama.cpp GBNF grammar text that enforces ``reply_format`` (regex and JSON schema are translated by
    llama-cpp-python's ``json-schema-to-grammar`` port, shipped in the package). Raises ValueError naming the
    format when the converter cannot translate it (e.g. a look-ahead in a regex)."""
    if not isinstance(reply_format, ReplyFormat):
        raise TypeError(f"reply_format must be a ReplyFormat, got {type(reply_format).__name__}")
    if reply_format.kind == "grammar":
        return reply_format.spec
    if reply_format.kind == "choice":
        return choice_gbnf(reply_format.choices)
    from llama_cpp.llama_grammar import SchemaConverter, json_schema_to_gbnf

    try:
        if reply_format.kind == "json":
            return json_schema_to_gbnf(reply_format.spec)
        converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=True)
        pattern = _NON_CAPTURING.sub("(", reply_format.spec)  # the converter knows only plain groups
        converter.visit({"type": "string", "pattern": f"^{pattern}$"}, "")
        return converter.format_grammar()
    except Exception as exc:  # the converter raises assorted errors (AssertionError, KeyError, ...)
        raise ValueError(
            f"llama.cpp cannot translate this {reply_format.kind} format to a grammar ({type(exc).__name__}: {exc}); "
            "simplify it or pass ReplyFormat.grammar(...) with hand-written GBNF"
        ) from exc


def check_gbnf(llama_cpp_lib: Any, vocab: Any, text: str) -> None:
    """Compile ``text`` once with llama.cpp's parser (``llama_cpp_lib`` is ``llama_cpp.llama_cpp``, ``vocab`` a
    loaded model's vocabulary); a ValueError when it cannot. llama-cpp-python does not check the sampler it builds
    from a grammar, and a grammar llama.cpp cannot parse would end the process at the first generation."""
    sampler = llama_cpp_lib.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(
            "llama.cpp cannot parse this GBNF grammar (its parser's message is on stderr); check the rules"
        )
    llama_cpp_lib.llama_sampler_free(sampler)
