"""The adapter kit: everything the LangChain and LlamaIndex adapters share, framework-free.

A small package with one module per concept rather than one file, because the concepts are used by different
adapters and have different dependencies (the inner-loop helpers need the engine, the tree helpers the tree;
neither belongs in the settings every FragRel wrapper imports):

- :mod:`.wrapper_settings` -- every setting of the FragRel wrappers (retrievers, postprocessor): one check per
  setting, preset resolution and defaults (:class:`~.wrapper_settings.WrapperSettings`), the missing-position
  policy and its spellings, metadata key names and the score metadata written on every result;
- :mod:`.pools` -- a candidate pool: locations read from metadata, the missing-position fallbacks (isolated
  keys, PREVIOUS/NEXT runs), the base's scores, the re-ranking step that maps hits back to the framework's
  items, and positions written at indexing time;
- :mod:`.tree_search` -- the surprise-tree retrievers: their settings, building a tree, hits as metadata;
- :mod:`.loop_runs` -- the inner-loop adapters: the engine behind an adapter, retrieved items as core hits;
- :mod:`.answer_step` -- the grounded-answer steps: retrieved items as cited fragments, the model and its settings;
- :mod:`.chat_turns`, :mod:`.keyed_stream`, :mod:`.store_index` -- the SCM chat adapters: their core memory,
  complete interactions, the stream in a namespaced key-value store, the stream in a framework's vector store;
- :mod:`.triplet_views`, :mod:`.triplet_graph` -- the framework views of a triplet store (LangGraph store, agent
  tools, LlamaIndex property graph);
- :mod:`.arguments` -- small argument helpers (a store or a path, kwargs split between an adapter and the core).

Each adapter declares its framework's fields, converts its framework's types and delegates here. This package
imports only :mod:`.wrapper_settings` eagerly (the engine imports the score keys; the other modules import the
engine).

>>> from fragrel_integrations import adapters
>>> adapters.check_on_missing_position("error")
'raise'
"""

from .wrapper_settings import *  # noqa: F403
from .wrapper_settings import __all__ as _settings_all

__all__ = list(_settings_all)
