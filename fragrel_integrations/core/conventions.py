"""Conventions both framework adapters follow: the score metadata keys and the missing-position policy names.

>>> from fragrel_integrations.core.types import Fragment, ScoredFragment
>>> score_metadata(ScoredFragment(Fragment("a", "d", 0), 0.75, 0.5, 0.5))
{'relevance_score': 0.75, 'fragrel_independent_score': 0.5, 'fragrel_environment_score': 0.5}
>>> missing_position_policy("error")
'raise'
"""

from __future__ import annotations

from .types import ScoredFragment

__all__ = [
    "ENVIRONMENT_SCORE_KEY",
    "INDEPENDENT_SCORE_KEY",
    "MISSING_POSITION_ALIASES",
    "RAISE_ON_MISSING_POSITION",
    "RELEVANCE_SCORE_KEY",
    "SCORE_KEYS",
    "missing_position_policy",
    "score_metadata",
]

#: Metadata keys written on every returned Document / node: the final score and FragRel's two parts.
RELEVANCE_SCORE_KEY = "relevance_score"
INDEPENDENT_SCORE_KEY = "fragrel_independent_score"
ENVIRONMENT_SCORE_KEY = "fragrel_environment_score"
SCORE_KEYS: tuple[str, str, str] = (RELEVANCE_SCORE_KEY, INDEPENDENT_SCORE_KEY, ENVIRONMENT_SCORE_KEY)

#: ``on_missing_position`` for "raise a ValueError naming the fix": ``"raise"`` is the canonical name,
#: ``"error"`` (the LangChain retriever's first spelling) an alias; both adapters accept both.
RAISE_ON_MISSING_POSITION: tuple[str, str] = ("raise", "error")
MISSING_POSITION_ALIASES: dict[str, str] = {"error": "raise"}


def score_metadata(hit: ScoredFragment) -> dict[str, float]:
    """The three score entries an adapter adds to a returned item's metadata."""
    return dict(zip(SCORE_KEYS, (hit.score, hit.independent_score, hit.environment_score), strict=True))


def missing_position_policy(value: str) -> str:
    """The canonical name of an ``on_missing_position`` value (aliases mapped; others returned as given)."""
    return MISSING_POSITION_ALIASES.get(value, value)
