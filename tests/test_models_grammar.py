"""The GBNF grammars of constrained replies (in ``models.llama_cpp_chat``, their one user): the choice rule is ours,
regex and JSON schema go through llama-cpp-python's converter."""

from __future__ import annotations

import json

import pytest

from fragrel_integrations.models import llama_cpp_chat
from fragrel_integrations.models.llama_cpp_chat import choice_gbnf, gbnf
from fragrel_integrations.models.structured import ReplyFormat


def test_all_is_pinned():
    assert llama_cpp_chat.__all__ == ["LlamaCppChatModel", "check_gbnf", "choice_gbnf", "gbnf", "gbnf_literal",
                                      "portable_loading"]  # fmt: skip


def test_choice_labels_are_escaped_literals():
    assert gbnf(ReplyFormat.choice(["yes", "no"])) == 'root ::= "yes" | "no"\n'
    assert choice_gbnf(['say "hi"', "a\\b"]) == 'root ::= "say \\"hi\\"" | "a\\\\b"\n'
    assert gbnf(ReplyFormat.grammar('root ::= "x"')) == 'root ::= "x"'


def test_regex_and_json_formats_use_llama_cpp_pythons_converter():
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert gbnf(ReplyFormat.json(schema)) == llama_grammar.json_schema_to_gbnf(ReplyFormat.json(schema).spec)
    # its enum rule writes JSON strings (quoted labels): why the choice rule stays ours
    assert '"\\"yes\\""' in llama_grammar.json_schema_to_gbnf(json.dumps({"enum": ["yes", "no"]}))
    with pytest.raises(ValueError, match="cannot translate this regex"):
        gbnf(ReplyFormat.regex("a(?=b)"))
