"""What the inner loop's model and retriever are given each round: the instructions, the round's message
(:func:`round_messages`) and the retrieval query (:func:`join_query`)."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

from ..._validation import check_type

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "NO_NEW_PASSAGES",
    "PASSAGE_TOKENS",
    "check_prompt_template",
    "join_query",
    "round_messages",
    "strip_memory_label",
]

DEFAULT_SYSTEM_PROMPT = """\
You answer a question by reading passages over several rounds, keeping a short-term memory between rounds. \
The memory is a few sentences: your best answer so far and the facts that support it.

Each round you get the question, your current memory and the passages retrieved for this round. Write the \
updated memory:
- keep the facts from your memory that still matter for the question;
- add what the new passages say about the question, and correct what they contradict;
- say the answer plainly as soon as you can; if it is still unknown, say what is missing;
- leave out everything that does not help answer the question.
Reply with the updated memory only.

Example.
Passages:
[1] Daniel went back to the office.
[2] Sandra journeyed to the kitchen.
Question: Where is the football?
Your memory so far: Daniel picked up the football and took it to the garden, so the football is in the garden.
Updated memory: Daniel carried the football from the garden to the office, so the football is in the office."""

DEFAULT_PROMPT_TEMPLATE = """\
Passages:
{context}

Question: {question}
Your memory so far: {memory}

Write your updated memory now: one or two plain sentences that answer the question."""

_EMPTY_MEMORY = "(empty)"
_NO_PASSAGES = "(no passages were retrieved)"
NO_NEW_PASSAGES = "(no new passages; the earlier ones are already reflected in your memory)"
_TEMPLATE_FIELDS = frozenset({"question", "memory", "context"})
PASSAGE_TOKENS = 4  # "[12] " and the line break around each passage
_LABEL = re.compile(r"^\s*(?:updated\s+)?memory\s*:\s*", re.IGNORECASE)


def check_prompt_template(template: object) -> str:
    """``template`` if it is a valid ``prompt_template`` (exactly ``{question}``, ``{memory}``, ``{context}``)."""
    check_type(template, str, "prompt_template must be str")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(
            f"prompt_template is not a valid format string ({exc}); write literal braces as {{{{ and }}}}"
        ) from exc
    if names != _TEMPLATE_FIELDS:
        raise ValueError(
            f"prompt_template must use exactly the fields {{question}}, {{memory}} and {{context}}, got {sorted(names)}"
        )
    return template


def round_messages(
    system_prompt: str | None, template: str, question: str, memory: str, passages: Sequence[str], placeholder: str = ""
) -> list[dict]:
    """The chat messages of one round: ``system_prompt`` (if any), then ``template`` filled with the numbered
    ``passages`` (``placeholder``, or a note that none were retrieved, when there are none).

    >>> round_messages(None, "{question} {memory} {context}", "Where?", "", ["Mary went home."])
    [{'role': 'user', 'content': 'Where? (empty) [1] Mary went home.'}]
    """
    context = "\n".join(f"[{i}] {p}" for i, p in enumerate(passages, start=1)) or placeholder or _NO_PASSAGES
    user = template.format(question=question, memory=memory or _EMPTY_MEMORY, context=context)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": user}]


def strip_memory_label(reply: str) -> str:
    """The reply without surrounding blanks and a leading ``Memory:`` / ``Updated memory:`` label.

    >>> strip_memory_label(" Updated memory: Mary is home. ")
    'Mary is home.'
    """
    return _LABEL.sub("", reply.strip(), count=1).strip()


def join_query(question: str, memory: str, separator: str = "\n") -> str:
    """The retrieval query of a round: the question, then the current STM (if any), joined by ``separator``.

    >>> join_query("Where is the apple?", "")
    'Where is the apple?'
    >>> join_query("Where is the apple?", "Mary has it.", " ")
    'Where is the apple? Mary has it.'
    """
    memory = memory.strip()
    return f"{question}{separator}{memory}" if memory else question
