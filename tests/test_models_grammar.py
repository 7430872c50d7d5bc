"""The GBNF grammars of constrained replies (``models.grammar``): the choice rule is ours, regex and JSON schema go
through llama-cpp-python's converter, and the old import path still works for one release, with a warning."""

from __future__ import annotations

import json
import warnings

import pytest

from fragrel_integrations.models import grammar
from fragrel_integrations.models.grammar import choice_gbnf, gbnf
from fragrel_integrations.models.structured import ReplyFormat


def test_all_is_pinned():
    assert grammar.__all__ == ["check_gbnf", "choice_gbnf", "gbnf", "gbnf_literal"]


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


def test_the_grammar_module_is_the_one_home_of_gbnf():
    from fragrel_integrations.models import llama_cpp_chat

    assert "gbnf" not in llama_cpp_chat.__all__
    with pytest.raises(AttributeError):
        llama_cpp_chat.no_such_name  # noqa: B018
