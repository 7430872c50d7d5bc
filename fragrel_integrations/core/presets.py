"""Named settings per text type (``preset="dialogue"``), measured on the dev parts of the evaluation data.

Each preset fixes the context relation's ``w_rel``, the environment weight ``alpha``, the story fragment size
and the order of the returned fragments. The values come from the w_rel x alpha sweep of
``benchmarks/bench_quality.py`` (``benchmarks/results/quality.md``, rule: best mean recall@5 gain among settings
that lose at most one point on every dataset of the type); ``story`` keeps the paper's defaults.

>>> preset("dialogue").relation()
ContextRelation(w_rel=0.3)
>>> sorted(PRESETS)
['dialogue', 'haystack', 'multidoc', 'story']
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

    def relation(self) -> ContextRelation:
        return ContextRelation(self.w_rel)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
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
DEFAULT_PRESET = "story"


def preset(name: str | Preset) -> Preset:
    """The :class:`Preset` called ``name`` (a Preset passes through), or a ValueError listing the names."""
    if isinstance(name, Preset):
        return name
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
