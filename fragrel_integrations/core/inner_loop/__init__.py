"""ILM-TR's inner loop with a short-term memory (STM), framework-free.

Modules: :mod:`.metric` (the LCS similarity that decides convergence), :mod:`.loop_prompts` (the instructions, the
round's messages and query), :mod:`.rounds` (rounds, results, the error) and :mod:`.engine` (the loop).

The answer model reads the question in rounds. Each round retrieves with the question *plus* the current STM
(joined by :func:`join_query`), shows the model the question, the retrieved passages and its current STM, and
takes the model's reply as the new STM: the answer so far together with the facts that support it. The loop
stops when two consecutive memories agree (:func:`lcs_similarity` >= ``threshold``) or after ``max_loops``
rounds; the final STM is the answer.

Stop reasons: ``"converged"``, ``"max_loops"``, and ``"empty_reply"`` (the model returned blank text: the
previous STM is kept as the answer and the loop stops, since asking again with the same memory would repeat the
same request). A retriever or model that raises ends the loop with :class:`InnerLoopError`, whose ``.result``
holds every completed round.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> story = ["Mary went to the kitchen.", "Mary picked up the apple.", "Mary walked to the garden."]
>>> model = ScriptedChatModel(["The apple is with Mary in the garden.", "The apple is with Mary in the garden."])
>>> engine = InnerLoopEngine(lambda query: story, model)
>>> result = engine.run("Where is the apple?")
>>> result.answer, len(result.rounds), result.stop_reason
('The apple is with Mary in the garden.', 2, 'converged')
>>> result.rounds[1].query
'Where is the apple?\\nThe apple is with Mary in the garden.'
"""

# importable from here as before, outside __all__: the adapters' shared helpers and the retriever types
from .engine import InnerLoopEngine
from .loop_prompts import DEFAULT_PROMPT_TEMPLATE, DEFAULT_SYSTEM_PROMPT, join_query
from .metric import lcs_length, lcs_similarity, lcs_tokens
from .rounds import AsyncRetriever as AsyncRetriever
from .rounds import InnerLoopError, InnerLoopResult, InnerLoopRound, RetrievedItem, StopReason, fragment_key
from .rounds import SyncRetriever as SyncRetriever

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "InnerLoopEngine",
    "InnerLoopError",
    "InnerLoopResult",
    "InnerLoopRound",
    "RetrievedItem",
    "StopReason",
    "fragment_key",
    "join_query",
    "lcs_length",
    "lcs_similarity",
    "lcs_tokens",
]
