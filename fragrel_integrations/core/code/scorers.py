"""Deprecated alias: :class:`JaccardScorer` and :func:`code_tokens` live in :mod:`fragrel_integrations.core.scorers`
(kept for one release; import from there)."""

from ..._deprecation import warn_moved
from ..scorers import JaccardScorer, code_tokens

__all__ = ["JaccardScorer", "code_tokens"]

warn_moved(__name__, "fragrel_integrations.core.scorers")
