"""Named settings per text type (``preset="dialogue"``), measured on the dev parts of the evaluation data.

Each preset fixes the context relation's ``w_rel``, the environment weight ``alpha``, the story fragment size, the
order of the returned fragments and ``top_m`` (how many of the best fragments lend support; None = all). The
values come from the w_rel x alpha sweep of ``benchmarks/bench_quality.py`` (``benchmarks/results/quality.md``,
rule: best mean recall@5 gain among settings that lose at most one point on every dataset of the type;
``general``, the default: the same rule over every dataset, with the top-m environment); ``story`` keeps the
paper's defaults.

>>> preset("dialogue").relation()
ContextRelation(w_rel=0.3)
>>> sorted(PRESETS)
['dialogue', 'general', 'haystack', 'multidoc', 'story']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .relations import ContextRelation

__all__ = ["DEFAULT_PRESET", "PRESETS", "Preset", "preset"]


@dataclass(frozen=True)
class Preset:
    """Settings for one kind of text; ``relation()`` builds its :class:`ContextRelation`."""

    name: str
    w_rel: float
    alpha: float
    fragment_words: int
    order: Literal["score", "position"]
    description: str
    top_m: int | None = None

    def relation(self) -> ContextRelation:
        return ContextRelation(self.w_rel)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "general",
            0.2,
            1.0,
            500,
            "score",
            "any kind of text (the default): only the 10 best-scored fragments lend support to their neighbours "
            "(top_m=10), so it gains where neighbours matter and stays out of the way where they do not; dev "
            "R@5 LoCoMo +3.8 to +6.3, MTBench+ +6.5 to +9.1, haystacks and HotpotQA -0.3 to +2.0",
            10,
        ),
        Preset(
            "dialogue",
            0.3,
            1.0,
            500,
            "position",
            "one fragment per turn (chats, transcripts); LoCoMo dev R@5 +5.7 dense / +7.7 BM25 / +8.4 hybrid; "
            "turns come back in time order",
        ),
        Preset(
            "story",
            0.3,
            0.5,
            500,
            "score",
            "long narrative text in word windows (the paper's defaults: w_rel 0.3, alpha 0.5, 500-word fragments)",
        ),
        Preset(
            "haystack",
            0.9,
            0.1,
            500,
            "score",
            "a few relevant sentences hidden in a long unrelated text (BABILong-style); dev R@5 +0.8 to +4.4",
        ),
        Preset(
            "multidoc",
            0.7,
            0.25,
            500,
            "score",
            "many short documents of a few paragraphs (HotpotQA-style); dev R@5 -2.1 to +1.5 (little to gain)",
        ),
    )
}

#: The preset the wrappers, the index and the CLI use when none is named.
DEFAULT_PRESET = "general"


def preset(name: str | Preset) -> Preset:
    """The :class:`Preset` called ``name`` (a Preset passes through), or a ValueError listing the names."""
    if isinstance(name, Preset):
        return name
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
