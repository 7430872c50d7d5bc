"""Deprecated: the surprise-tree adapter helpers moved to :mod:`fragrel_integrations.core.kit.tree`; this module
re-exports them for one release."""

import warnings

from ..kit.tree import *  # noqa: F403
from ..kit.tree import __all__  # noqa: F401

warnings.warn(
    "fragrel_integrations.core.tree.adapter is deprecated: import from fragrel_integrations.core.kit.tree",
    DeprecationWarning,
    stacklevel=2,
)
