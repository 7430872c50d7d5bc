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

``preset="auto"`` (the default) looks at the fragments it is given (a wrapper's candidate pool, the CLI's text) and
picks the preset of the kind of text it sees (:func:`detect_preset`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

from .relations import ContextRelation
from .types import Fragment

__all__ = [
    "AUTO",
    "DEFAULT_PRESET",
    "KIND_PRESETS",
    "PRESETS",
    "PRESET_NAMES",
    "Preset",
    "detect_kind",
    "detect_preset",
    "preset",
]


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
            0.1,
            500,
            "score",
            "many short documents of a few paragraphs (HotpotQA-style), little to gain, so the environment stays "
            "light: alpha 0.1 (the core sweep's 0.25 cost the wrappers up to 2.1 R@5 on HotpotQA sentences, dev; "
            "with 0.1 every wrapper base gains 0.0 to +9.5)",
        ),
    )
}

#: The preset name that picks one of :data:`PRESETS` from the fragments it sees (:func:`detect_preset`).
AUTO = "auto"
#: Every name ``preset=`` accepts.
PRESET_NAMES: tuple[str, ...] = (AUTO, *sorted(PRESETS))

#: The preset the wrappers and the CLI use when none is named.
DEFAULT_PRESET = AUTO

#: The preset used for each kind of text :func:`detect_kind` recognises (narrative text and anything unclear get
#: the general preset, measured over every dataset).
KIND_PRESETS: dict[str, str] = {
    "dialogue": "dialogue",
    "haystack": "haystack",
    "multidoc": "multidoc",
    "narrative": "general",
    "other": "general",
}

# "Caroline: ...", "Dr. Smith: ...", "USER: ...", "[10:32] bob: ..." at the start of a line
_SPEAKER = re.compile(r"^\s*(?:\[[^\]\n]{1,20}\]\s*)?[A-Za-z][\w.'-]*(?: [A-Za-z][\w.'-]*){0,2}:\s+\S")


def detect_kind(fragments: Sequence[Fragment]) -> str:
    """The kind of text a set of fragments looks like: ``"dialogue"``, ``"multidoc"``, ``"haystack"``,
    ``"narrative"`` or ``"other"``.

    - dialogue: at least half of the lines start with a speaker (``"Name: ..."``), as chat turns and transcripts do;
    - multidoc: three or more documents, none holding half of the fragments (many short documents);
    - haystack: mostly one document of short fragments (a median of at most 40 words) spread thinly over it (they
      span at least three times as many positions as there are of them: a few sentences found in a long text);
    - narrative: mostly one document of long fragments (a median of 100 words or more);
    - other: none of these.

    >>> detect_kind([Fragment(f"Ann: hi {i}", "chat", i) for i in range(4)])
    'dialogue'
    >>> detect_kind([Fragment("Some sentence.", f"article{i}", 0) for i in range(5)])
    'multidoc'
    >>> detect_kind([Fragment("A short sentence.", "book", 10 * i) for i in range(6)])
    'haystack'
    """
    fragments = list(fragments)
    if not fragments:
        return "other"
    lines = [line for f in fragments for line in f.text.splitlines() if line.strip()]
    if lines and sum(bool(_SPEAKER.match(line)) for line in lines) >= 0.5 * len(lines):
        return "dialogue"
    docs = Counter(f.doc_id for f in fragments)
    main, n_main = docs.most_common(1)[0]
    if len(docs) >= 3 and n_main < 0.5 * len(fragments):
        return "multidoc"
    if n_main >= 0.8 * len(fragments):
        words = median(len(f.text.split()) for f in fragments)
        positions = [f.position for f in fragments if f.doc_id == main]
        if words <= 40 and max(positions) - min(positions) + 1 >= 3 * len(positions):
            return "haystack"
        if words >= 100:
            return "narrative"
    return "other"


def detect_preset(fragments: Sequence[Fragment]) -> str:
    """The name of the preset ``preset="auto"`` uses for ``fragments``: :data:`KIND_PRESETS` of
    :func:`detect_kind`.

    >>> detect_preset([Fragment(f"Ann: hi {i}", "chat", i) for i in range(4)])
    'dialogue'
    """
    return KIND_PRESETS[detect_kind(fragments)]


def preset(name: str | Preset, fragments: Sequence[Fragment] | None = None) -> Preset:
    """The :class:`Preset` called ``name`` (a Preset passes through), or a ValueError listing the names.

    ``"auto"`` picks the preset for ``fragments`` (:func:`detect_preset`; the general preset without fragments).
    """
    if isinstance(name, Preset):
        return name
    if name == AUTO:
        return PRESETS[detect_preset(fragments) if fragments else "general"]
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESET_NAMES)}, got {name!r}")
    return PRESETS[name]
