"""Deprecated: the settings kit moved to :mod:`fragrel_integrations.core.kit.settings` (also
``fragrel_integrations.core.kit``); this module re-exports it for one release."""

import warnings

from .kit.settings import *  # noqa: F403
from .kit.settings import __all__  # noqa: F401

warnings.warn(
    "fragrel_integrations.core.conventions is deprecated: import from fragrel_integrations.core.kit",
    DeprecationWarning,
    stacklevel=2,
)
