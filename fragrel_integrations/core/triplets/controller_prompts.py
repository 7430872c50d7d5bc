"""What the triplet memory controller shows the model: system prompts, few-shot examples, the constrained reply
formats (regular expressions for backends that enforce them) and the follow-up turn after a read.

Used by :class:`~.triplet_controller.TripletMemoryController`; each prompt and example set is a parameter there.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...models.structured import ReplyFormat

__all__ = [
    "FOLLOW_UP_TEMPLATE",
    "READ_EXAMPLES",
    "READ_FORMAT",
    "READ_SYSTEM_PROMPT",
    "WRITE_EXAMPLES",
    "WRITE_FORMAT",
    "WRITE_SYSTEM_PROMPT",
    "check_examples",
    "with_examples",
]

WRITE_SYSTEM_PROMPT = (
    "You store facts in a memory of triplets. For every fact in the user's statement write one call "
    "[MEM_WRITE{subject>>relation>>object}] on its own line. Use a name or noun phrase as subject and object "
    "and a short verb phrase as relation. Write only the calls."
)

READ_SYSTEM_PROMPT = (
    "You answer questions with a memory of triplets (subject, relation, object). To look something up, write "
    "one call [MEM_READ{subject>>relation>>}] or [MEM_READ{>>relation>>object}], leaving the unknown field "
    "empty, and stop. The memory answers with the matching triplets after a colon. When you have the answer, "
    "reply with one short sentence and no call."
)

#: Few-shot turns (user, assistant) shown before every statement; small models copy the format from them. The
#: first three show the subject / verb phrase / object split of a one-fact sentence (names and places that the
#: bAbI evaluation data does not use), the rest several facts per statement.
WRITE_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Statement: Lena walked to the station.", "[MEM_WRITE{Lena>>walked to>>station}]"),
    ("Statement: Omar went back to the library.", "[MEM_WRITE{Omar>>went back to>>library}]"),
    ("Statement: Priya picked up the umbrella.", "[MEM_WRITE{Priya>>picked up>>umbrella}]"),
    (
        "Statement: Dan Jaffe is a software engineer at Google. He lives in Boston.",
        "[MEM_WRITE{Dan Jaffe>>works at>>Google}]\n[MEM_WRITE{Dan Jaffe>>lives in>>Boston}]",
    ),
    ("Statement: Paris is the capital of France.", "[MEM_WRITE{Paris>>capital of>>France}]"),
    (
        "Statement: Lisa Wong founded Nimbus Labs in 2015.",
        "[MEM_WRITE{Lisa Wong>>founded>>Nimbus Labs}]\n[MEM_WRITE{Nimbus Labs>>founded in>>2015}]",
    ),
)

#: few-shot turns shown before every question
READ_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Question: Where does Dan Jaffe work?", "[MEM_READ{Dan Jaffe>>works at>>}]"),
    ("Question: Who founded Nimbus Labs?", "[MEM_READ{>>founded>>Nimbus Labs}]"),
    ("Question: What is the capital of France?", "[MEM_READ{>>capital of>>France}]"),
    ("Question: Where is Priya now?", "[MEM_READ{Priya>>is in>>}]"),
    ("Question: What do we know about Omar?", "[MEM_READ{Omar>>>>}]"),
)

_NAME = r"[^ \t\n\[\]{}>\\,][^\n\[\]{}>\\,]{0,39}"  # subject / object: a name or noun phrase, <= 40 chars
_VERB = r"[^ \t\n\[\]{}>\\,.][^\n\[\]{}>\\,.]{0,29}"  # relation: a short verb phrase, <= 30 chars
_TERM = r"[^ \t\n\[\]{}>\\][^\n\[\]{}>\\]{0,59}"  # any term of a read: no markup, <= 60 chars
_WRITE_CALL = rf"\[MEM_WRITE\{{{_NAME}>>{_VERB}>>{_NAME}\}}\]"
_READ_CALL = rf"\[MEM_READ\{{(?:{_TERM})?>>(?:{_TERM})?>>(?:{_TERM})?\}}\]"

#: The constrained reply of :meth:`TripletMemoryController.memorize`: one to four ``[MEM_WRITE{s>>r>>o}]`` lines:
#: subject and object 1-40 characters, the relation 1-30 (no full stop), none with brackets, braces, ``>``, commas
#: or backslashes, so the model must split a fact instead of copying the sentence (where the backend enforces it).
WRITE_FORMAT = ReplyFormat.regex(rf"{_WRITE_CALL}(?:\n{_WRITE_CALL}){{0,3}}", name="mem_write")

#: the constrained reply of an :meth:`TripletMemoryController.answer` turn: one ``[MEM_READ{..}]`` call or one
#: line of answer text without brackets
READ_FORMAT = ReplyFormat.regex(rf"{_READ_CALL}|[^ \t\n\[][^\n\[]{{0,399}}", name="mem_read")

#: the user turn after the memory answered the reads: the facts, then the question again
FOLLOW_UP_TEMPLATE = (
    "Facts from memory (oldest first):\n{facts}\n\nQuestion: {question}\n"
    "Answer the question in one short sentence using these facts. If they do not contain the answer, "
    "say that you do not know."
)


def check_examples(examples: Sequence[tuple[str, str]], name: str) -> tuple[tuple[str, str], ...]:
    out = tuple(tuple(e) for e in examples)
    if not all(len(e) == 2 and all(isinstance(x, str) for x in e) for e in out):
        raise TypeError(f"{name} must be a sequence of (user, assistant) string pairs")
    return out  # type: ignore[return-value]


def with_examples(system: str, examples: Sequence[tuple[str, str]], request: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}]
    for user, assistant in examples:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return [*messages, {"role": "user", "content": request}]
