"""Named settings per text type (``preset="dialogue"``), measured on the dev parts of the evaluation data.

Each preset fixes the context relation's ``w_rel``, the environment weight ``alpha``, the story fragment size, the
order of the returned fragments and ``top_m`` (how many of the best fragments lend support; None = all). The
values come from the w_rel x alpha sweep of ``benchmarks/bench_quality.py`` (``benchmarks/results/quality.md``,
rule: best mean recall@5 gain among settings that lose at most one point on every dataset of the type;
``general``, the default: the same rule over every dataset, with the top-m environment); ``story`` keeps the
paper's defaults. What each preset gains is in ``docs/results.md``.

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

from .fragments import Fragment
from .relations import ContextRelation

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


#: What each preset is for (:attr:`Preset.description`).
_GENERAL = (
    "any kind of text (the default): only the 10 best-scored fragments lend support to their neighbours (top_m=10), "
    "so it gains where neighbours matter and stays out of the way where they do not"
)
_DIALOGUE = "one fragment per turn (chats, transcripts); turns come back in time order"
_STORY = "long narrative text in word windows (the paper's defaults: w_rel 0.3, alpha 0.5, 500-word fragments)"
_HAYSTACK = "a few relevant sentences hidden in a long unrelated text (BABILong-style)"
_MULTIDOC = (
    "many short documents of a few paragraphs (HotpotQA-style), little to gain, so the environment stays light "
    "(alpha 0.1)"
)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("general", 0.2, 1.0, 500, "score", _GENERAL, 10),
        Preset("dialogue", 0.3, 1.0, 500, "position", _DIALOGUE),
        Preset("story", 0.3, 0.5, 500, "score", _STORY),
        Preset("haystack", 0.9, 0.1, 500, "score", _HAYSTACK),
        Preset("multidoc", 0.7, 0.1, 500, "score", _MULTIDOC),
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

# "Caroline: ...", "Dr. Smith: ...", "USER: ...", "[10:32] bob: ..." at the start of a line: a speaker or a key
_SPEAKER = re.compile(r"^\s*(?:\[[^\]\n]{1,20}\]\s*)?([A-Za-z][\w.'-]*(?: [A-Za-z][\w.'-]*){0,2}):\s+\S")
#: Labels that name a field of a record rather than a person (besides one-letter labels and identifiers with
#: ``_`` or a digit, e.g. SimpleDirectoryReader's ``file_path``).
_FIELD_WORDS = re.compile(
    r"question|answer|title|id|key|value|name|url|source|date|time|type|category|tags|text|content|summary|author"
    r"|subject|from|to|cc|label|year|price|description"
)


def _field_like(label: str) -> bool:
    return len(label) == 1 or "_" in label or any(c.isdigit() for c in label) or bool(_FIELD_WORDS.fullmatch(label))


def _line_labels(fragment: Fragment) -> list[str | None]:
    """The label (case-folded) of each non-blank line of ``fragment``, None for a line without one."""
    matches = (_SPEAKER.match(line) for line in fragment.text.splitlines() if line.strip())
    return [m[1].casefold() if m else None for m in matches]


def _item_keys(per_fragment: list[list[str | None]]) -> set[str]:
    """Labels that recur once per item: in at least 80% of the fragments of two or more lines (at least two
    such fragments, and half of all), exactly once in each -- the fields of records (CSV rows as "key: value"
    lines, FAQ entries, a reader's ``file_path:`` header), not speakers (who speak several times in a stretch
    of dialogue, or alone in a one-line turn)."""
    items = [labels for labels in per_fragment if len(labels) >= 2]
    if len(items) < max(2, 0.5 * len(per_fragment)):  # records are items of several lines (most fragments)
        return set()
    counts = [Counter(label for label in labels if label is not None) for labels in items]
    names = {name for c in counts for name in c}
    return {
        n
        for n in names
        if sum(c.get(n) == 1 for c in counts) >= 0.8 * len(items) and all(c.get(n, 0) <= 1 for c in counts)
    }


def _cycles_of_fields(sequence: list[str]) -> bool:
    """Whether the labels in ``sequence`` repeat as records do: cut at each occurrence of the first label, every
    part holds distinct labels in one fixed order (``name, age, city, name, age, city``; ``Q, A, Q, A``), over
    at least two parts, at least 80% of them all the labels; two labels only count as fields when they look
    like fields (``Q``/``A``, ``question``/``answer``): two people who take turns are a dialogue."""
    first = sequence[0]
    parts: list[list[str]] = []
    for label in sequence:
        if label == first or not parts:
            parts.append([])
        parts[-1].append(label)
    if len(parts) < 2 or any(len(set(p)) != len(p) for p in parts):
        return False
    order = {label: i for i, label in enumerate(max(parts, key=len))}
    in_order = all(label in order for p in parts for label in p) and all(
        [order[label] for label in p] == sorted(order[label] for label in p) for p in parts
    )
    complete = sum(len(p) == len(order) for p in parts) >= 0.8 * len(parts)  # records hold (nearly) every field
    distinct = set(sequence)
    return in_order and complete and (len(distinct) >= 3 or all(_field_like(label) for label in distinct))


def _is_dialogue(fragments: Sequence[Fragment]) -> bool:
    """Speaker names start at least half of the lines, recur, and alternate between at least two speakers; the
    keys of records (which repeat once per item, or cycle in one fixed order) are not speakers."""
    ordered = sorted(fragments, key=lambda f: (f.doc_id, f.position))
    per_fragment = [_line_labels(f) for f in ordered]
    keys = _item_keys(per_fragment)
    lines = [label for labels in per_fragment for label in labels if label is None or label not in keys]
    speakers = [label for label in lines if label is not None]
    if not speakers or len(speakers) < 0.5 * len(lines):
        return False
    counts = Counter(speakers)  # two or more speakers, one of them at least twice
    return len(counts) >= 2 and counts.most_common(1)[0][1] >= 2 and not _cycles_of_fields(speakers)


def detect_kind(fragments: Sequence[Fragment]) -> str:
    """The kind of text a set of fragments looks like: ``"dialogue"``, ``"multidoc"``, ``"haystack"``,
    ``"narrative"`` or ``"other"``.

    - dialogue: at least half of the lines start with a speaker (``"Name: ..."``), as chat turns and transcripts
      do, and the speakers recur and alternate (two or more); "key: value" lines of records are not speakers:
      keys that repeat once per item (CSV rows, FAQ ``Q:``/``A:`` entries, a reader's ``file_path:`` header) or
      cycle in one fixed order;
    - multidoc: three or more documents, none holding half of the fragments (many short documents);
    - haystack: mostly one document of short fragments (a median of at most 40 words) spread thinly over it (they
      span at least three times as many positions as there are of them: a few sentences found in a long text);
    - narrative: mostly one document of long fragments (a median of 100 words or more);
    - other: none of these.

    >>> detect_kind([Fragment(f"{('Ann', 'Bob')[i % 2]}: hi {i}", "chat", i) for i in range(4)])
    'dialogue'
    >>> detect_kind([Fragment(f"Q: question {i}?\\nA: answer {i}", "faq", i) for i in range(4)])
    'other'
    >>> detect_kind([Fragment("Some sentence.", f"article{i}", 0) for i in range(5)])
    'multidoc'
    >>> detect_kind([Fragment("A short sentence.", "book", 10 * i) for i in range(6)])
    'haystack'
    """
    fragments = list(fragments)
    if not fragments:
        return "other"
    if _is_dialogue(fragments):
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

    >>> detect_preset([Fragment(f"{('Ann', 'Bob')[i % 2]}: hi {i}", "chat", i) for i in range(4)])
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
