"""The ``cache=`` file of :meth:`~.code_relation.CodeRelation.from_repository`: reuse a stored index when it was built
with the same settings and grammars, bringing it up to date file by file; otherwise say why it is rebuilt."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .index_file import grammar_versions
from .loader import Repository

if TYPE_CHECKING:
    from .code_relation import CodeRelation

__all__ = ["reuse_cache"]

logger = logging.getLogger(__name__)


def reuse_cache(
    load: Callable[..., CodeRelation],
    cache: str | os.PathLike[str],
    repository: Repository,
    settings: dict[str, Any],
    *,
    show_progress: bool = True,
) -> CodeRelation | None:
    """The index stored in ``cache`` (read with ``load(cache, root=...)``), synced with ``repository`` and saved
    back when files changed; None when it is damaged or was built with other settings or grammars."""
    try:
        stored = load(cache, root=repository.root)
    except ValueError as exc:
        logger.warning("rebuilding the stored code index %s: %s", cache, exc)
        return None
    if stored.settings() == settings and stored.versions == grammar_versions():
        if stored.sync(repository, show_progress=show_progress):
            stored.save(cache)
        return stored
    logger.info("stored code index %s was built with other settings or grammars: rebuilding", cache)
    return None
