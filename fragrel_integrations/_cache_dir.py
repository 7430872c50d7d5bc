"""Where the package keeps what it builds on a machine (book indexes, converted models, embedder backends).

>>> default_cache_dir().name
'fragrel'
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fragrel``, or ``~/.cache/fragrel`` when XDG_CACHE_HOME is unset or empty."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "fragrel"
