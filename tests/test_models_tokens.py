"""Offline token counting: the word-based estimate, model tokenizers when present, and fitting text to a budget."""

from __future__ import annotations

import pytest

from fragrel_integrations.core.token_budget import fit_texts, truncate_to_tokens
from fragrel_integrations.models import tokens as tokens_mod
from fragrel_integrations.models.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message_tokens,
    count_tokens,
    estimate_tokens,
)


def test_all_is_pinned():
    from fragrel_integrations.core import token_budget

    assert sorted(tokens_mod.__all__) == ["MESSAGE_OVERHEAD_TOKENS", "TokenCounter", "count_message_tokens",
                                          "count_tokens", "estimate_tokens"]  # fmt: skip
    assert sorted(token_budget.__all__) == ["OUTPUT_CHARS_PER_TOKEN", "cap_output", "fit_texts", "storable_text",
                                            "truncate_to_tokens"]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   ", 0),
        ("cat", 1),
        ("cats", 1),
        ("kitten", 2),  # 6 letters -> ceil(6/4)
        ("a b c", 3),
        ("Hello, world!", 6),  # 2 + 1 + 2 + 1: short words count high, which keeps budgets safe
        ("x_y", 3),  # underscore is a symbol
        ("déjà vu", 2),
        ("2024-01-01", 5),
    ],
)
def test_estimate_by_hand(text, expected):
    assert estimate_tokens(text) == expected


def test_estimate_type_error():
    with pytest.raises(TypeError):
        estimate_tokens(3)


class Counter:
    def count_tokens(self, text):
        return len(text)


def test_count_tokens_prefers_the_model_tokenizer():
    assert count_tokens(Counter(), "abcd") == 4
    assert count_tokens(object(), "abcd") == estimate_tokens("abcd")
    assert count_tokens(None, "abcd") == 1


def test_count_message_tokens_adds_template_overhead():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    expected = estimate_tokens("be brief") + estimate_tokens("hi") + 3 * MESSAGE_OVERHEAD_TOKENS
    assert count_message_tokens(None, msgs) == expected

    class Exact:
        def count_message_tokens(self, messages):
            return 42

    assert count_message_tokens(Exact(), msgs) == 42


def test_truncate_to_tokens_is_the_longest_fitting_prefix():
    text = "one two three four five six"
    assert truncate_to_tokens(text, 3) == "one two"  # 1 + 1, and "three" costs 2
    assert truncate_to_tokens(text, 4) == "one two three"
    assert truncate_to_tokens(text, 100) == text
    assert truncate_to_tokens(text, 0) == ""
    cut = truncate_to_tokens(text, 11, counter=len)  # character counter
    assert cut == "one two" and len(cut) <= 11 and len(cut + " three") > 11
    with pytest.raises(ValueError):
        truncate_to_tokens(text, -1)


def test_truncate_to_tokens_cuts_a_word_longer_than_the_budget_by_characters():
    """Issue 25: text without spaces (Chinese, emoji, one long token) was cut to nothing, so callers kept it whole."""
    for text, n in (("x" * 2_000_000, 8), ("\u6211" * 100_000 + " tail", 8), ("\U0001f600" * 10_000, 8)):
        cut = truncate_to_tokens(text, n)
        assert cut and text.startswith(cut) and estimate_tokens(cut) <= n < estimate_tokens(text[: len(cut) + 1])
    assert truncate_to_tokens("short " + "y" * 1000, 3) == "short"  # a whole word fits: words as before
    assert truncate_to_tokens("y" * 1000, 0) == ""


def test_fit_texts_keeps_order_and_cuts_the_last():
    texts = ["a b c", "d e f g", "h i"]
    assert fit_texts(texts, 100, separator_tokens=0) == texts
    assert fit_texts(texts, 7, separator_tokens=0, min_truncated_tokens=1) == ["a b c", "d e f g"]
    assert fit_texts(texts, 5, separator_tokens=0, min_truncated_tokens=1) == ["a b c", "d e"]
    assert fit_texts(texts, 5, separator_tokens=0, min_truncated_tokens=3) == ["a b c"]
    assert fit_texts(texts, 6, separator_tokens=1, min_truncated_tokens=1) == ["a b c", "d"]
    assert fit_texts(texts, 5, separator_tokens=1, min_truncated_tokens=1) == ["a b c"]
    assert fit_texts([], 5) == []
    with pytest.raises(ValueError):
        fit_texts(texts, -3)
