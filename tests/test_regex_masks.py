"""Regex-constrained decoding on the torch runtime: every reply the masks let through matches the pattern, every
match stays reachable, and the embedded model's replies to the steps' own formats parse."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

pytest.importorskip("interegular")

from fragrel_integrations.core.scm.memory_controller import YES_NO_FORMAT
from fragrel_integrations.core.tree.summary import summary_format
from fragrel_integrations.core.triplets.controller_prompts import READ_FORMAT, WRITE_FORMAT
from fragrel_integrations.models.regex_masks import RegexVocabulary, parses
from fragrel_integrations.models.structured import ReplyFormat

EOS = 0
# a toy vocabulary: every character the patterns use as a token of its own (as byte-level vocabularies have),
# multi-character pieces, newlines inside pieces and a special token
TOKENS = [
    "",
    *"abcenosxyzS019 ()[]{}>:.\n",
    "ab",
    "ba",
    "xyz",
    " a",
    "a\n",
    "\nb",
    "(S",
    "): ",
    "yes",
    "no",
    "ye",
    ">>",
]
PATTERNS = [
    r"yes|no",
    r"a{2,5}",
    r"[abc]+ x?",
    r"\(S\): [^\n]{1,6}\n\(S\): [^\n]{1,4}",
    r"[A-Za-z0-9\"'][^\n]*",
    r"\[[a-z]{1,3}>>[a-z]{1,3}\](?:\n\[[a-z]{1,3}>>[a-z]{1,3}\]){0,2}",
    r"[0-9]{3}|[a-z]+",
]


def _walk(vocab: RegexVocabulary, pattern: str, rng: random.Random, limit: int = 60) -> tuple[str, bool]:
    """A random reply under the masks: (its text, whether it ended on the end-of-reply token). After ``limit``
    tokens the walk ends as soon as the masks allow it, so a long reply must still be able to become a match."""
    allowed = vocab.allowed_ids(pattern, [EOS])
    ids: list[int] = []
    for step in range(limit + 200):
        choices = np.flatnonzero(allowed(ids)).tolist()
        assert choices, "a state with nothing allowed"
        token = EOS if step >= limit and EOS in choices else rng.choice(choices)
        if token == EOS:
            return "".join(TOKENS[i] for i in ids), True
        ids.append(token)
    return "".join(TOKENS[i] for i in ids), False


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_reply_the_masks_let_through_matches(pattern):
    vocab = RegexVocabulary(TOKENS)
    rng = random.Random(0)
    for _ in range(300):
        text, done = _walk(vocab, pattern, rng)
        assert done, (pattern, text)  # every walk reaches a match
        assert re.fullmatch(pattern, text), (pattern, text)


def test_the_end_is_allowed_only_on_a_match_and_special_tokens_never():
    vocab = RegexVocabulary(TOKENS)
    step = vocab.allowed_ids(r"a{2,3}", [EOS])
    a = TOKENS.index("a")
    assert not step([])[EOS] and not step([])[TOKENS.index("b")]
    assert not step([a])[EOS]
    mask = step([a, a])
    assert mask[EOS] and mask[a] and not mask[TOKENS.index("ab")]
    assert np.flatnonzero(step([a, a, a])).tolist() == [EOS]  # three a's: only the end


def test_unsupported_patterns_are_reported_not_raised():
    vocab = RegexVocabulary(TOKENS)
    assert not parses(r"(a)\1") and not parses(r"\bword")  # a back-reference, a word boundary
    assert parses(WRITE_FORMAT.spec) and parses(READ_FORMAT.spec)
    assert vocab.allowed_ids(r"(a)\1", [EOS]) is None  # not built: the reply is free text


def test_partial_characters_are_never_allowed_and_unspellable_patterns_are_not_enforced():
    # "\ufffd" stands for a token holding part of a UTF-8 character; "中" is a whole token, "国" is not
    texts = ["", "a", "b", "\ufffd", "a\ufffd", "中", "\n"]
    vocab = RegexVocabulary(texts)
    step = vocab.allowed_ids(r"[^\n]{1,3}", [EOS])
    assert np.flatnonzero(step([])).tolist() == [1, 2, 5]  # characters count whole: no partial-byte piece
    assert vocab.allowed_ids("中国|日本", [EOS]) is None  # no token of its own spells 国 / 日 / 本
    assert vocab.allowed_ids("中|a", [EOS]) is not None


def test_a_pattern_that_matches_nothing_is_left_unenforced_not_masked_to_nothing():
    """An all-False mask would leave the sampler no token (NaN probabilities): such a format is not enforced."""
    vocab = RegexVocabulary(TOKENS)
    assert vocab.allowed_ids(r"[^\s\S]", [EOS]) is None
    assert vocab.allowed_ids(r"a[^\s\S]", [EOS]) is None


@pytest.fixture(scope="module")
def model():
    from _llm_fixtures import get_embedded

    pytest.importorskip("torch")
    return get_embedded()


def test_the_embedded_model_enforces_the_steps_formats(model):
    stm = ReplyFormat.regex(r"[A-Za-z0-9\"'][^\n]*", name="stm")  # the inner loop's memory line
    # bounded well inside max_tokens, so a reply is never cut before it matches (the triplet writes are measured
    # with their few-shot prompt in benchmarks/bench_llm_steps.py; their pattern is in the property test above)
    formats = [YES_NO_FORMAT, summary_format(40, 20), stm, ReplyFormat.regex(r"[0-9]{3}-[a-z]{2}")]
    prompt = "Mary moved to the bathroom. John went to the hallway. Summarise, then write the facts."
    for fmt in formats:
        assert model.supports_format(fmt), fmt.name
        reply = model.invoke(prompt, max_tokens=200, temperature=0.0, reply_format=fmt)
        assert fmt.parse(reply) is not None, (fmt.name, reply)
    assert not model.supports_format(ReplyFormat.grammar('root ::= "x"'))
