"""SCM's prompts for step 5 (input fusion): the memory block and the two ways to hand it to a model.

:func:`render_memory_block` lists the activated turns (oldest first) and the previous (flash) turn;
:func:`fit_memories` cuts them to the memory budget first;
:func:`fusion_messages` builds the standalone prompt (system prompt + the observation fused with the block) and
:func:`memory_prompt` the system message a framework adapter adds to its own prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..token_budget import truncate_to_tokens
from .interactions import MemoryItem, RecalledMemory, SCMContext

__all__ = [
    "CUT_MARKER",
    "FUSION_SYSTEM_PROMPT",
    "FUSION_TEMPLATE",
    "MEMORY_SYSTEM_TEMPLATE",
    "NO_MEMORY",
    "check_template",
    "fit_memories",
    "fit_texts_fairly",
    "fusion_messages",
    "memory_prompt",
    "render_memory_block",
]

FUSION_SYSTEM_PROMPT = """\
You are a helpful assistant in a long conversation. Besides the user's message you get notes from your memory \
of this conversation: earlier turns that may be relevant, and the previous turn. Use them when they help to \
answer, prefer the most recent information when they disagree, and do not mention the notes otherwise."""

FUSION_TEMPLATE = """\
{memory}

Current user message:
{observation}"""

MEMORY_SYSTEM_TEMPLATE = """\
Notes from your memory of this conversation with the user (use them when they help; the user does not see \
them):

{memory}"""

#: the memory block of the standalone prompt when nothing is recalled and there is no previous turn
NO_MEMORY = "(no earlier turns)"

#: ends a text cut to fit the memory budget (:func:`fit_texts_fairly`)
CUT_MARKER = "[...]"


def fit_texts_fairly(texts: Sequence[str], max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """``texts`` cut to fit ``max_tokens`` together: when they are over it, every text longer than an equal share
    of what the shorter ones leave is cut to that share (whitespace normalised) and ends in :data:`CUT_MARKER`,
    which counts; shorter texts are kept whole. A share too small for the marker leaves the marker alone (or the
    text, when it is no longer than the marker).

    >>> fit_texts_fairly(["a short one", "x " * 500], 20, lambda t: len(t.split()))
    ['a short one', 'x x x x x x x x x x x x x x x x [...]']
    >>> fit_texts_fairly(["fits", "too"], 20, lambda t: len(t.split()))
    ['fits', 'too']
    """
    counts = [count(t) for t in texts]
    if sum(counts) <= max_tokens:
        return list(texts)
    left, share = max_tokens, 0
    for i, n in enumerate(sorted(counts)):  # the largest share with sum(min(n, share)) <= max_tokens
        share = left // (len(counts) - i)
        if n > share:
            break
        left -= n
    marker = count(CUT_MARKER)
    room = share - marker
    out = []
    for text, n in zip(texts, counts, strict=True):
        if n <= share or (room <= 0 and n <= marker):  # fits, or is no longer than the marker that would replace it
            out.append(text)
            continue
        head = truncate_to_tokens(text, room, count) if room > 0 else ""
        out.append(f"{head} {CUT_MARKER}" if head else CUT_MARKER)
    return out


def fit_memories(
    flash: MemoryItem | None, memories: Sequence[RecalledMemory], max_tokens: int, count: Callable[[str], int]
) -> tuple[MemoryItem | None, list[RecalledMemory]]:
    """The flash turn and the recalled memories as they are shown, cut to ``max_tokens`` together
    (:func:`fit_texts_fairly` over each shown summary, and each observation and response shown in full); copies,
    the stored items are unchanged.

    >>> big = MemoryItem("s", 1, "word " * 5000, "ok")
    >>> flash, _ = fit_memories(big, [], 100, lambda t: len(t.split()))
    >>> len(flash.observation.split()), flash.observation.endswith(CUT_MARKER), flash.response
    (99, True, 'ok')
    """
    parts: list[str] = []
    for m in memories:
        parts.extend([m.item.summary] if m.use_summary and m.item.summary else [m.item.observation, m.item.response])
    if flash is not None:
        parts.extend([flash.observation, flash.response])
    fitted = iter(fit_texts_fairly(parts, max_tokens, count))
    shown = []
    for m in memories:
        if m.use_summary and m.item.summary:
            item = replace(m.item, summary=next(fitted))
        else:
            item = replace(m.item, observation=next(fitted), response=next(fitted))
        shown.append(replace(m, item=item))
    if flash is not None:
        flash = replace(flash, observation=next(fitted), response=next(fitted))
    return flash, shown


def render_memory_block(flash: MemoryItem | None, memories: Sequence[RecalledMemory]) -> str:
    """The memory section of the prompt: activated turns (oldest first), then the previous turn.

    >>> flash = MemoryItem("s", 4, "And tomorrow?", "Rain.")
    >>> print(render_memory_block(flash, [RecalledMemory(MemoryItem("s", 1, "Hi", "Hello", "Greeting."), 0.5, 3)]))
    Earlier turns that may be relevant (oldest first):
    [turn 1] User: Hi
    Assistant: Hello
    <BLANKLINE>
    Previous turn:
    User: And tomorrow?
    Assistant: Rain.
    """
    parts = []
    if memories:
        lines = ["Earlier turns that may be relevant (oldest first):"]
        for m in memories:
            label = f"[turn {m.item.index}, summary]" if m.use_summary and m.item.summary else f"[turn {m.item.index}]"
            lines.append(f"{label} {m.shown}")
        parts.append("\n".join(lines))
    if flash is not None:
        parts.append(f"Previous turn:\n{flash.text}")
    return "\n\n".join(parts)


def check_template(name: str, template: object, fields: Sequence[str]) -> str:
    """``template`` if it is a str containing every one of ``fields``; else ValueError naming ``name``."""
    if not isinstance(template, str) or any(f not in template for f in fields):
        raise ValueError(f"{name} must be a str containing {list(fields)}")
    return template


def fusion_messages(context: SCMContext, system_prompt: str | None, template: str) -> list[dict[str, str]]:
    """Step 5 for standalone use: ``system_prompt`` (if any) and the observation fused with the memory block.

    >>> context = SCMContext("s", "Hi", None, None, (), "")
    >>> fusion_messages(context, None, FUSION_TEMPLATE)[0]["content"].splitlines()[0]
    '(no earlier turns)'
    """
    user = template.format(memory=context.block or NO_MEMORY, observation=context.observation)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": user}]


def memory_prompt(context: SCMContext, template: str) -> str:
    """Step 5 for adapters: a system-message text carrying the memory block ('' when there is none)."""
    return template.format(memory=context.block) if context.block else ""
