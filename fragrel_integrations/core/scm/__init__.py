"""SCM (Self-Controlled Memory, Wang et al.): a memory stream, flash + activated memories and an LLM controller.

See :mod:`fragrel_integrations.core.scm.memory` for the per-turn workflow.
"""

from __future__ import annotations

from .fusion_prompts import FUSION_SYSTEM_PROMPT, FUSION_TEMPLATE, MEMORY_SYSTEM_TEMPLATE, render_memory_block
from .gates import ACTIVATION_MODES, DEFAULT_SIMILARITY_THRESHOLD, MEMORY_CUES, EmbeddingGate, LexicalGate
from .interactions import Decision, MemoryItem, RecalledMemory, SCMContext, SCMTurn
from .memory import DEFAULT_SESSION, DIALOGUE_W_REL, PAPER_ITEM_TOKENS, PAPER_TOTAL_TOKENS, SelfControlledMemory
from .memory_controller import (
    ACTIVATION_EXAMPLES,
    ACTIVATION_PROMPT,
    ACTIVATION_SYSTEM_PROMPT,
    DECISION_MAX_TOKENS,
    DECISION_MODES,
    DEFAULT_ACTIVATION_THRESHOLD,
    DEFAULT_SUFFICIENCY_THRESHOLD,
    SUFFICIENCY_PROMPT,
    SUMMARY_PROMPT,
    SCMController,
    parse_yes_no,
)
from .stream import MemoryStream, SCMStream
from .stream_index import InMemoryStreamIndex, SCMIndexError, StreamIndex

__all__ = [
    "ACTIVATION_EXAMPLES",
    "ACTIVATION_MODES",
    "ACTIVATION_PROMPT",
    "ACTIVATION_SYSTEM_PROMPT",
    "DECISION_MAX_TOKENS",
    "DECISION_MODES",
    "DEFAULT_ACTIVATION_THRESHOLD",
    "DEFAULT_SESSION",
    "DEFAULT_SIMILARITY_THRESHOLD",
    "DEFAULT_SUFFICIENCY_THRESHOLD",
    "DIALOGUE_W_REL",
    "FUSION_SYSTEM_PROMPT",
    "FUSION_TEMPLATE",
    "MEMORY_CUES",
    "MEMORY_SYSTEM_TEMPLATE",
    "PAPER_ITEM_TOKENS",
    "PAPER_TOTAL_TOKENS",
    "SUFFICIENCY_PROMPT",
    "SUMMARY_PROMPT",
    "Decision",
    "EmbeddingGate",
    "InMemoryStreamIndex",
    "LexicalGate",
    "MemoryItem",
    "MemoryStream",
    "RecalledMemory",
    "SCMContext",
    "SCMController",
    "SCMIndexError",
    "SCMStream",
    "SCMTurn",
    "SelfControlledMemory",
    "StreamIndex",
    "parse_yes_no",
    "render_memory_block",
]
