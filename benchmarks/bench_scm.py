"""SCM memory (Wang et al.): recall of its retrieval path on LoCoMo and MTBench+, and its latency per turn.

Protocol
--------
*Quality.* Every turn of a conversation is written into one ``SelfControlledMemory`` stream (SQLite, in memory)
with ``record(turn, "")``: one LoCoMo turn (``speaker: text`` plus the image caption, as in ``bench_quality.py``)
or one MTBench+ human turn = one interaction, so the stored item text is ``User: <turn>\\nAssistant: `` and its
vector is the embedding of that text (all-MiniLM-L6-v2 through the cached embedder of ``_common.py``). Then each
question is asked with ``prepare(question)``:

* the controller is **not asked** (``activation=False``, i.e. treated as always answering "yes, memory is
  needed") and there are **no summaries** (``summarize=False``, the full turn text is embedded): the embedded
  135M model is far too slow for thousands of turns on 2 CPUs. ``--controller-sample`` measures the controller's
  yes-rate with the embedded LLM on a small sample separately;
* what SCM shows = the flash turn (the last stored turn, always) + the ``k`` activated turns (top-k of the other
  turns by the memory's own scoring, re-ordered by time), i.e. k + 1 turns; *SCM (k-1) + flash* is the same with
  ``k - 1`` activated turns, so it shows exactly k turns like plain top-k;
* SCM is run with each of its scorers: dense (cosine of the stored vectors, the paper's choice), BM25 (over the
  candidate turns' texts, rebuilt per question, the flash turn excluded) and hybrid (0.5 min-max BM25 + 0.5
  min-max dense). Plain top-k over all stored turns is given for the same three scores;
* SCM + FragRel: ``relation=ContextRelation(w_rel)`` and ``alpha`` of the memory: (0.8, 0.5), the paper's chat
  setting, and (0.3, 1.0), the dialogue default tuned in ``bench_quality.py``; plain dense + FragRel (0.3, 1.0)
  over all turns is the matching plain row;
* SCM through an external index: *SCM (k + flash), index = LangChain InMemoryVectorStore* is SCM dense with
  ``index=`` a LangChain ``VectorStoreStreamIndex(InMemoryVectorStore(MiniLMEmbeddings(<the cached embedder>)))``
  (one vector store for all conversations of a part, filtered by session). The memory asks the store for k + 1
  candidates and re-scores them with the same vectors, so it should show the same turns as *SCM (k + flash)* up to
  ties; the number of questions where the shown turns differ is reported.

Recall@k = share of a question's gold turns (LoCoMo evidence turns; MTBench+ turns of the topics the probe refers
to) among the turns shown. Differences are to plain dense top-k at the same k, with paired-bootstrap 95% CIs.
Default parts are the dev parts of DESIGN.md (LoCoMo conversations 0-4, MTBench+ first half); ``--split all``
adds the held-out parts (LoCoMo 5-9, MTBench+ second half), reported separately.

*Latency.* A stream pre-filled with N turns (1e3, 1e4; HashingEmbedder vectors of dimension 384, so no model
time is included), then per turn ``prepare(question)`` + ``record(question, reply)`` with k = 5, for a SQLite
stream in memory and in a file (``synchronous=FULL``), with and without FragRel; next to plain top-k on an
in-memory numpy matrix (embed the query, cosine, top-k, append the new turn's vector) in the same run. The same
protocol, in the same run, for the other backends: the LangGraph store stream
(``LangGraphStoreStream(InMemoryStore())``, with and without FragRel), and the SQLite stream in memory with an
external index: a LangChain ``VectorStoreStreamIndex(InMemoryVectorStore(...))`` whose ``Embeddings`` return the
same HashingEmbedder vectors, and a LlamaIndex ``VectorStoreStreamIndex(SimpleVectorStore())``. Streams are
pre-filled with one ``append`` per turn; the vector stores with the documents (LangChain) or nodes (LlamaIndex) that
the adapter's ``add`` builds for each turn, written 1000 at a time (the adapters have no batch method). A path
stops early once it has spent ``--path-budget`` seconds (60; at least 5 turns), so slow backends at N = 1e4 are
measured on fewer turns (the report gives the count per path).

Usage::

    python benchmarks/bench_scm.py                       # dev parts (a few minutes once embeddings are cached)
    python benchmarks/bench_scm.py --split all           # dev and held-out parts: 8 min cold on 2 shared CPUs
    python benchmarks/bench_scm.py --controller-sample 0 # skip the embedded-LLM controller sample
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from _common import (
    RESULTS_DIR,
    CachedEmbedder,
    Dataset,
    default_data_dir,
    load_locomo,
    load_mtbench,
    paired_bootstrap,
    recall_at_k,
    write_json,
)

from fragrel_integrations import ContextRelation
from fragrel_integrations.core.scm import (
    MemoryItem,
    MemoryStream,
    SCMController,
    SCMStream,
    SelfControlledMemory,
    StreamIndex,
)
from fragrel_integrations.core.scorers import BM25Scorer, minmax
from fragrel_integrations.testing import HashingEmbedder, ScriptedChatModel

__all__ = ["main"]

KS = (3, 5, 10)
BASELINE = "plain dense top-k"
SCM_VARIANTS = {  # name -> (scorer, (w_rel, alpha) of the memory's relation or None)
    "SCM (k + flash)": ("dense", None),
    "SCM + FragRel (0.8, 0.5) (k + flash)": ("dense", (0.8, 0.5)),
    "SCM + FragRel (0.3, 1.0) (k + flash)": ("dense", (0.3, 1.0)),
    "SCM BM25 (k + flash)": ("bm25", None),
    "SCM BM25 + FragRel (0.3, 1.0) (k + flash)": ("bm25", (0.3, 1.0)),
    "SCM hybrid (k + flash)": ("hybrid", None),
    "SCM hybrid + FragRel (0.3, 1.0) (k + flash)": ("hybrid", (0.3, 1.0)),
}
EQUAL = "SCM (k-1) + flash"
PLAIN_FRAGREL = "plain dense + FragRel (0.3, 1.0) top-k"
# SCM dense with a LangChain InMemoryVectorStore (MiniLM, the same cached vectors) as the memory's index
VIA_INDEX = "SCM (k + flash), index = LangChain InMemoryVectorStore"
METHODS = (
    BASELINE,
    "plain BM25 top-k",
    "plain hybrid top-k",
    PLAIN_FRAGREL,
    *SCM_VARIANTS,
    EQUAL,
    VIA_INDEX,
)
# Self-contained messages (written for this benchmark) that need no memory: the controller should say "no".
NO_MEMORY_MESSAGES = (
    "What is the capital of France?",
    "Hello! How are you today?",
    "Can you explain what photosynthesis is?",
    "Write a haiku about the sea.",
    "How many days are there in a leap year?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Give me a tip for sleeping better.",
    "Who wrote Romeo and Juliet?",
    "Thanks, that was helpful. Goodbye!",
)


def _never(messages: object) -> str:
    raise RuntimeError("the SCM controller must not be called here (activation and summaries are off)")


def make_memory(
    stream: MemoryStream,
    embedder: object,
    relation: tuple[float, float] | None,
    k: int = 5,
    scorer: str = "dense",
    index: StreamIndex | None = None,
):
    """A memory on ``stream`` that never asks the controller (activation off = always recall; no summaries)."""
    rel, alpha = (None, 0.5) if relation is None else (ContextRelation(relation[0]), relation[1])
    return SelfControlledMemory(
        ScriptedChatModel(_never),
        stream=stream,
        embedder=embedder,
        k=k,
        relation=rel,
        alpha=alpha,
        scorer=scorer,
        activation=False,
        summarize=False,
        index=index,
    )


class _Collector:
    """Stands in for the vector store while an index adapter's ``add`` runs, so the adapter builds exactly the
    documents (LangChain: texts, metadata, ids) or nodes (LlamaIndex) it would write, one call per turn."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.metadatas: list[dict] = []
        self.ids: list[str] = []
        self.nodes: list = []

    def add_texts(self, texts, metadatas=None, *, ids=None, **kwargs):  # LangChain VectorStore
        self.texts += list(texts)
        self.metadatas += list(metadatas)
        self.ids += list(ids)
        return list(ids)

    def add(self, nodes, **kwargs):  # LlamaIndex vector store
        self.nodes += list(nodes)
        return [n.node_id for n in nodes]


def bulk_index(index: StreamIndex, items: Sequence[MemoryItem], batch: int = 1000) -> None:
    """Index stored turns in batches. The adapters add one turn per call (no batch method), so their ``add``
    builds each turn's document against a :class:`_Collector` (the same ids, metadata and text as
    ``memory.reindex``) and the documents are then written to the real store ``batch`` at a time."""
    attr = "vectorstore" if hasattr(index, "vectorstore") else "vector_store"
    store, collector = getattr(index, attr), _Collector()
    setattr(index, attr, collector)
    try:
        for it in items:
            index.add(it, it.summary or it.text, it.embedding)
    finally:
        setattr(index, attr, store)
    for lo in range(0, len(items), batch):
        if attr == "vectorstore":
            sl = slice(lo, lo + batch)
            store.add_texts(collector.texts[sl], metadatas=collector.metadatas[sl], ids=collector.ids[sl])
        else:
            store.add(collector.nodes[lo : lo + batch])


def item_text(turn: str) -> str:
    """The text SCM embeds for a turn written with an empty reply and no summary."""
    return MemoryItem("s", 0, turn, "").text


def shown_turns(memory: SelfControlledMemory, question: str, session: str, ks: Sequence[int]) -> dict[int, set[int]]:
    """Turns the memory shows for each k in ``ks``, from one ``prepare`` with the largest k: the memory's top-k is
    a stable sort by score, so the top k' < k are the k' best recalled turns (ties to the earlier turn)."""
    memory.k = max(ks)
    ctx = memory.prepare(question, session_id=session)
    ranked = sorted(ctx.memories, key=lambda m: (-m.score, m.item.index))
    flash = set() if ctx.flash is None else {ctx.flash.index}
    return {k: {m.item.index for m in ranked[:k]} | flash for k in ks}


# --------------------------------------------------------------------------------------------- quality


def evaluate(ds: Dataset, emb: CachedEmbedder, n_boot: int, seed: int) -> dict:
    """Recall@k per method and query on one dataset (one memory stream, one session per conversation)."""
    emb.ensure(
        [item_text(f.text) for c in ds.corpora for f in c.fragments] + [q.text for c in ds.corpora for q in c.queries]
    )
    from langchain_core.vectorstores import InMemoryVectorStore

    from fragrel_integrations.langchain.embeddings import MiniLMEmbeddings
    from fragrel_integrations.langchain.scm_index import VectorStoreStreamIndex

    stream = SCMStream(":memory:")
    memories = {name: make_memory(stream, emb, rel, scorer=sc) for name, (sc, rel) in SCM_VARIANTS.items()}
    plain_mem, fragrel_mem = memories["SCM (k + flash)"], memories["SCM + FragRel (0.3, 1.0) (k + flash)"]
    # the same stream, with one LangChain vector store (the cached MiniLM vectors) holding every conversation
    via_index = make_memory(
        stream, emb, None, index=VectorStoreStreamIndex(InMemoryVectorStore(embedding=MiniLMEmbeddings(emb)))
    )
    per = {m: {k: [] for k in KS} for m in METHODS}
    flash_gold, mismatches, n_checked = 0, 0, 0
    index_differs = {k: 0 for k in KS}
    t0 = time.perf_counter()
    for corpus in ds.corpora:
        session = corpus.name
        for f in corpus.fragments:
            plain_mem.record(f.text, "", session_id=session)
        items = stream.items(session)
        if len(items) != len(corpus.fragments) or any(it.index != i for i, it in enumerate(items)):
            raise RuntimeError(f"stream of {session} does not match its turns")
        bulk_index(via_index.index, items)
        vectors = np.stack([it.embedding for it in items])
        bm25 = BM25Scorer([it.text for it in items])
        for q in corpus.queries:
            qv = emb.embed_query(q.text)
            dense = plain_mem.scores(qv, items, vectors)
            lexical = bm25(q.text)
            bases = {
                BASELINE: dense,
                "plain BM25 top-k": lexical,
                "plain hybrid top-k": 0.5 * minmax(lexical) + 0.5 * minmax(dense),
                PLAIN_FRAGREL: fragrel_mem.scores(qv, items, vectors),
            }
            for name, s in bases.items():
                ranking = np.argsort(-s, kind="stable")
                for k in KS:
                    per[name][k].append(recall_at_k(ranking, q.gold, k))
            flash_gold += int(len(items) - 1 in q.gold)
            for name, memory in memories.items():
                shown_by_k = shown_turns(memory, q.text, session, (*KS, *(k - 1 for k in KS)))
                for k in KS:
                    shown = shown_by_k[k]
                    per[name][k].append(len(q.gold & shown) / len(q.gold))
                    if name == "SCM (k + flash)":  # the memory's path = flash + top-k of the rest by cosine
                        expected = set(np.argsort(-dense[:-1], kind="stable")[:k].tolist()) | {len(items) - 1}
                        mismatches += int(expected != shown)
                        n_checked += 1
                        per[EQUAL][k].append(len(q.gold & shown_by_k[k - 1]) / len(q.gold))
                if name == "SCM (k + flash)":
                    plain_shown = shown_by_k
            by_index = shown_turns(via_index, q.text, session, KS)
            for k in KS:
                per[VIA_INDEX][k].append(len(q.gold & by_index[k]) / len(q.gold))
                index_differs[k] += int(by_index[k] != plain_shown[k])
    seconds = time.perf_counter() - t0
    stream.close()
    base = {k: np.array(per[BASELINE][k]) for k in KS}
    summary = {}
    for m in METHODS:
        summary[m] = {}
        for k in KS:
            a = np.array(per[m][k])
            lo, hi = paired_bootstrap(a, base[k], n_boot=n_boot, seed=seed)
            summary[m][k] = {
                "recall": 100 * float(a.mean()),
                "diff": 100 * float((a - base[k]).mean()),
                "ci": [100 * lo, 100 * hi],
            }
    return {
        "dataset": ds.name,
        "notes": ds.notes,
        "n_queries": ds.n_queries,
        "n_turns": ds.n_fragments,
        "turns_per_conversation": [len(c.fragments) for c in ds.corpora],
        "flash_turn_is_gold_pct": 100 * flash_gold / max(ds.n_queries, 1),
        "scm_path_check": {"checked": n_checked, "mismatches": mismatches},
        "index_path_check": {"questions": ds.n_queries, "differs_from_scm": index_differs},
        "seconds": seconds,
        "summary": summary,
        "per_query": {m: {str(k): [round(x, 4) for x in per[m][k]] for k in KS} for m in METHODS},
    }


# --------------------------------------------------------------------------------------------- controller


def controller_sample(datasets: Sequence[Dataset], n: int, seed: int) -> dict:
    """Yes-rate of the SCM controller with the embedded SmolLM2-135M on ``n`` LoCoMo dev questions (all need
    memory) and on the self-contained messages above (none need memory)."""
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

    locomo = next(d for d in datasets if d.name == "locomo")
    pairs = [(c, q) for c in locomo.corpora for q in c.queries]
    rng = np.random.default_rng(seed)
    chosen = [pairs[i] for i in sorted(rng.choice(len(pairs), size=min(n, len(pairs)), replace=False))]
    t0 = time.perf_counter()
    model = LlamaCppChatModel(n_ctx=2048)
    load_s = time.perf_counter() - t0
    controller = SCMController(model)
    out = {}
    try:
        for name, cases in (
            ("locomo_questions", [(q.text, c.name, c.fragments[-1].text) for c, q in chosen]),
            ("self_contained", [(m, "demo", "I'm fine, thanks for asking.") for m in NO_MEMORY_MESSAGES]),
        ):
            decisions, t1 = [], time.perf_counter()
            for text, session, last in cases:
                flash = MemoryItem(session, 0, last, "")
                decisions.append(controller.needs_memory(text, flash))
            out[name] = {
                "n": len(cases),
                "yes_pct": 100 * sum(d.value for d in decisions) / len(decisions),
                "parsed_pct": 100 * sum(d.parsed for d in decisions) / len(decisions),
                "seconds_per_call": (time.perf_counter() - t1) / len(cases),
                "replies": sorted({d.raw.strip() for d in decisions}),
            }
    finally:
        model.close()
    out["model"] = "SmolLM2-135M-Instruct (GGUF, llama.cpp), temperature 0, max 4 tokens"
    out["load_seconds"] = load_s
    return out


# --------------------------------------------------------------------------------------------- latency


def _fill(stream: MemoryStream, session: str, texts: Sequence[str], vectors: np.ndarray) -> None:
    for t, v in zip(texts, vectors, strict=True):
        stream.append(session, t, "", embedding=v)


def _turns(memory: SelfControlledMemory, qs: Sequence[str], budget: float, min_turns: int = 5) -> dict:
    """prepare + record per question, stopping early once ``budget`` seconds are spent (at least ``min_turns``)."""
    prep, rec = [], []
    t_start = time.perf_counter()
    for q in qs:
        t0 = time.perf_counter()
        memory.prepare(q, session_id="s")
        t1 = time.perf_counter()
        memory.record(q, "Noted.", session_id="s")
        prep.append(t1 - t0)
        rec.append(time.perf_counter() - t1)
        if len(prep) >= min_turns and time.perf_counter() - t_start > budget:
            break
    return _stats(prep, rec)


def latency(
    sizes: Sequence[int],
    turns: int,
    pool: Sequence[str],
    questions: Sequence[str],
    dim: int = 384,
    budget: float = 60.0,
) -> list:
    """Per-turn prepare + record at N stored turns, next to plain numpy top-k, in the same run: SQLite streams,
    the LangGraph store stream, and the SQLite stream with a LangChain / LlamaIndex vector store as index."""
    from langchain_core.vectorstores import InMemoryVectorStore
    from langgraph.store.memory import InMemoryStore
    from llama_index.core.vector_stores import SimpleVectorStore

    from fragrel_integrations.langchain.embeddings import MiniLMEmbeddings
    from fragrel_integrations.langchain.scm_index import VectorStoreStreamIndex as LangChainIndex
    from fragrel_integrations.langchain.scm_store import LangGraphStoreStream
    from fragrel_integrations.llama_index.scm_index import VectorStoreStreamIndex as LlamaIndexIndex

    embedder = HashingEmbedder(dim=dim)
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_scm_"))
    for n in sizes:
        texts = [f"{pool[i % len(pool)]} (#{i})" for i in range(n)]
        vectors = embedder.embed_documents([item_text(t) for t in texts])
        qs = [questions[i % len(questions)] for i in range(turns)]
        row: dict = {"n": n, "turns": turns, "k": 5, "fill_s": {}}
        for backend in ("memory", "file", "LangGraph InMemoryStore"):
            t_fill = time.perf_counter()
            if backend == "memory":
                stream = SCMStream(":memory:")
                _fill(stream, "s", texts, vectors)
            elif backend == "file":
                path = tmp / f"scm_{n}.sqlite"
                with SCMStream(path, synchronous="OFF") as fill:
                    _fill(fill, "s", texts, vectors)
                stream = SCMStream(path)  # synchronous=FULL, the default
            else:  # one append per turn through the stream (it has no bulk method)
                stream = LangGraphStoreStream(InMemoryStore())
                _fill(stream, "s", texts, vectors)
            row["fill_s"][backend] = time.perf_counter() - t_fill
            for label, rel in (("SCM", None), ("SCM + FragRel (0.3, 1.0)", (0.3, 1.0))):
                row[f"{label} [{backend}]"] = _turns(make_memory(stream, embedder, rel), qs, budget)
            stream.close()
        # the SQLite stream in memory with an external index (the memory's default pool: k + 1 candidates)
        indexes = {
            "LangChain InMemoryVectorStore": lambda: LangChainIndex(
                InMemoryVectorStore(embedding=MiniLMEmbeddings(embedder))  # the store embeds: the same vectors
            ),
            "LlamaIndex SimpleVectorStore": lambda: LlamaIndexIndex(SimpleVectorStore()),
        }
        for name, make_index in indexes.items():
            t_fill = time.perf_counter()
            stream = SCMStream(":memory:")
            _fill(stream, "s", texts, vectors)
            index = make_index()
            bulk_index(index, stream.items("s"))
            row["fill_s"][name] = time.perf_counter() - t_fill
            held = (
                len(index.vectorstore.store)
                if name.startswith("LangChain")
                else len(index.vector_store.data.embedding_dict)
            )
            check = index.search("s", item_text(texts[0]), vectors[0], 3)
            if held != n or len(check) != 3 or check[0][0] != 0:
                raise RuntimeError(f"the {name} index was not filled as the adapter would fill it: {held}, {check}")
            row[f"SCM + index [{name}]"] = _turns(make_memory(stream, embedder, None, index=index), qs, budget)
            stream.close()
        # plain top-k: the same vectors in a numpy matrix, the new turn appended after each query
        matrix = np.zeros((n + turns, dim), np.float32)
        matrix[:n] = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        size, prep, rec = n, [], []
        for q in qs:
            t0 = time.perf_counter()
            qv = embedder.embed_query(q)
            s = matrix[:size] @ (qv / max(float(np.linalg.norm(qv)), 1e-12))
            top = np.argpartition(-s, 5)[:5]
            top[np.argsort(-s[top])]
            t1 = time.perf_counter()
            v = embedder.embed_documents([item_text(q)])[0]
            matrix[size] = v / max(float(np.linalg.norm(v)), 1e-12)
            size += 1
            prep.append(t1 - t0)
            rec.append(time.perf_counter() - t1)
        row["plain top-k [numpy]"] = _stats(prep, rec)
        rows.append(row)
    return rows


def _stats(prep: list[float], rec: list[float]) -> dict:
    total = [a + b for a, b in zip(prep, rec, strict=True)]
    return {
        "prepare_ms": 1e3 * float(np.median(prep)),
        "record_ms": 1e3 * float(np.median(rec)),
        "turn_ms": 1e3 * float(np.median(total)),
        "turn_p90_ms": 1e3 * float(np.percentile(total, 90)),
        "turns": len(total),
    }


# --------------------------------------------------------------------------------------------- report


def _cell(s: dict, base: bool) -> str:
    if base:
        return f"{s['recall']:.1f}"
    lo, hi = s["ci"]
    return f"{s['recall']:.1f} ({s['diff']:+.1f} [{lo:+.1f}, {hi:+.1f}])"


def report(res: dict) -> str:
    lines = [
        "# SCM memory: recall of its retrieval path and latency per turn",
        "",
        f"Command: `{res['command']}`. Machine: {res['machine']}; load average {res['load_start']} at the start, "
        f"{res['load_end']} at the end (shared with other jobs: compare ratios, not absolute times). Whole run "
        f"{res['seconds']:.0f} s (embedding {res['embed_seconds']:.0f} s for {res['embedded']} new texts).",
        "",
        '**Setting.** Each turn is written into one `SelfControlledMemory` stream with `record(turn, "")`; each '
        "question is asked with `prepare(question)`. The controller is *not* asked (`activation=False`: treated "
        "as always answering yes) and there are *no summaries* (`summarize=False`: the full turn text is "
        "embedded), because the embedded 135M model is too slow for thousands of turns on 2 CPUs. SCM rows use "
        "the memory's own scorer (dense = all-MiniLM-L6-v2 cosine, the paper's choice; BM25 and hybrid over the "
        "candidate turns); plain rows rank all stored turns with the same scores. *k + flash* shows k activated "
        "turns plus the flash turn (the last stored turn), i.e. k + 1 turns; *(k-1) + flash* shows k turns, the "
        "same budget as plain top-k. Recall in %; in brackets the difference to plain dense top-k at the same k "
        f"and its paired-bootstrap 95% CI ({res['n_boot']} resamples, seed {res['seed']}).",
        "",
    ]
    for part, results in res["quality"].items():
        for d in results:
            chk = d["scm_path_check"]
            lines += [
                f"## {d['dataset']} ({part}): {d['notes']}",
                "",
                f"{d['n_queries']} questions, {d['n_turns']} turns (per conversation "
                f"{min(d['turns_per_conversation'])}-{max(d['turns_per_conversation'])}); the flash turn is a gold "
                f"turn for {d['flash_turn_is_gold_pct']:.1f}% of the questions. SCM path check: the memory's "
                f"recalled set equals flash + top-k of the other turns by cosine in "
                f"{chk['checked'] - chk['mismatches']}/{chk['checked']} cases. {d['seconds']:.0f} s.",
                "",
            ]
            ipc = d.get("index_path_check")
            if ipc:
                diffs = ", ".join(f"k = {k}: {v}" for k, v in ipc["differs_from_scm"].items())
                lines += [
                    f"*{VIA_INDEX}*: the same memory (dense, no relation) with `index=` a LangChain "
                    "`VectorStoreStreamIndex(InMemoryVectorStore(MiniLMEmbeddings(<the cached MiniLM>)))` holding "
                    "every conversation of the part (the session filter picks the conversation); the memory asks "
                    "it for 11 candidates (k + 1 at k = 10; smaller k take the best of them, as in the other SCM rows) "
                    "and re-scores them by cosine. Shown turns differ from *SCM (k + flash)* for "
                    f"{diffs} of {ipc['questions']} questions.",
                    "",
                ]
            lines += [
                "| method | " + " | ".join(f"R@{k}" for k in KS) + " |",
                "|---|" + "---:|" * len(KS),
            ]
            for m in METHODS:
                cells = [_cell(d["summary"][m][str(k)], m == BASELINE) for k in KS]
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
            lines.append("")
    c = res.get("controller")
    if c:
        lq, sc = c["locomo_questions"], c["self_contained"]
        lines += [
            "## Controller yes-rate with the embedded LLM (sample)",
            "",
            f"{c['model']}; load {c['load_seconds']:.1f} s. `SCMController.needs_memory(message, flash)` with the "
            "conversation's last turn as the flash memory.",
            "",
            "| messages | n | says yes (memory needed) | reply parsed | s per call |",
            "|---|---:|---:|---:|---:|",
            f"| LoCoMo dev questions (all need memory) | {lq['n']} | {lq['yes_pct']:.0f}% | {lq['parsed_pct']:.0f}% "
            f"| {lq['seconds_per_call']:.2f} |",
            f"| self-contained messages (none need memory) | {sc['n']} | {sc['yes_pct']:.0f}% | "
            f"{sc['parsed_pct']:.0f}% | {sc['seconds_per_call']:.2f} |",
            "",
            f"Distinct replies: LoCoMo {lq['replies'][:8]}; self-contained {sc['replies'][:8]}.",
            "",
        ]
    lines += [
        "## Latency per turn (prepare + record, k = 5)",
        "",
        "HashingEmbedder (dimension 384) for every vector, so no model time is included; medians over the turns "
        "(p90 in brackets), ms. `[memory]` = SQLite in memory, `[file]` = SQLite file with `synchronous=FULL` "
        "(one fsync per record); `[LangGraph InMemoryStore]` = `LangGraphStoreStream(InMemoryStore())`. "
        "`SCM + index [...]` = the SQLite stream in memory with an external index (`index=` a "
        "`VectorStoreStreamIndex`; the memory asks it for k + 1 candidates and re-scores them): LangChain "
        "`InMemoryVectorStore` whose `Embeddings` return the same HashingEmbedder vectors, or LlamaIndex "
        "`SimpleVectorStore` (it stores the memory's vectors). Plain top-k = the same vectors in a numpy matrix: "
        "embed the query, cosine, top-k, append the turn's vector. Each path is measured on the same questions "
        f"and stops early after {res.get('path_budget_s', 60):.0f} s (at least 5 turns): see the turns column.",
        "",
        "Pre-filling: SQLite and LangGraph streams get one `append` per turn; the vector stores get the documents "
        "(LangChain: text, metadata, id) or nodes (LlamaIndex) that the adapter's `add` builds for each turn, "
        "written to the store 1000 at a time (the adapters have no batch method).",
        "",
    ]
    for row in res["latency"]:
        plain = row["plain top-k [numpy]"]["turn_ms"]
        fill = ", ".join(f"{k} {v:.1f} s" for k, v in row.get("fill_s", {}).items())
        lines += [
            f"N = {row['n']} stored turns, up to {row['turns']} measured turns (pre-fill: {fill}):",
            "",
            "| path | prepare | record | turn (p90) | x plain top-k | turns |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for key, s in row.items():
            if isinstance(s, dict) and "turn_ms" in s:
                lines.append(
                    f"| {key} | {s['prepare_ms']:.2f} | {s['record_ms']:.2f} | {s['turn_ms']:.2f} "
                    f"({s['turn_p90_ms']:.2f}) | {s['turn_ms'] / max(plain, 1e-9):.0f} | {s.get('turns', '')} |"
                )
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=default_data_dir(), help="the shared data folder")
    p.add_argument("--split", choices=("dev", "all"), default="dev", help="all: held-out parts too, reported apart")
    p.add_argument(
        "--controller-sample", type=int, default=50, help="LoCoMo questions for the LLM controller (0: skip)"
    )
    p.add_argument("--sizes", type=lambda x: [int(float(v)) for v in x.split(",")], default=[1000, 10000])
    p.add_argument("--turns", type=int, default=30, help="measured turns per size and path")
    p.add_argument(
        "--path-budget", type=float, default=60.0, help="seconds per latency path before it stops early (min 5 turns)"
    )
    p.add_argument("--quick", action="store_true", help="smoke test: LoCoMo conversation 0, 3 controller calls, N=1e3")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = p.parse_args(argv)
    t_start = time.perf_counter()
    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    emb = CachedEmbedder("scm")
    if a.quick:
        a.controller_sample, a.sizes, a.turns = min(a.controller_sample, 3), [1000], 5
    parts = {"dev": (range(0, 1) if a.quick else range(0, 5), None)}
    if a.split == "all":
        n_sessions = 54  # MTBench+ sessions; the loader's default (dev) is the first half
        parts["heldout"] = (range(5, 10), range(n_sessions // 2, n_sessions))
    quality = {}
    dev_sets = []
    for part, (conv, sessions) in parts.items():
        sets = [load_locomo(a.data, conv), load_mtbench(a.data, sessions)]
        if part == "dev":
            dev_sets = sets
        quality[part] = []
        for ds in sets:
            r = evaluate(ds, emb, a.n_boot, a.seed)
            quality[part].append(r)
            print(
                f"{part} {ds.name}: {r['seconds']:.0f} s", {m: round(r["summary"][m][5]["recall"], 1) for m in METHODS}
            )
    controller = controller_sample(dev_sets, a.controller_sample, a.seed) if a.controller_sample > 0 else None
    pool = [f.text for c in dev_sets[0].corpora for f in c.fragments]
    questions = [q.text for c in dev_sets[0].corpora for q in c.queries]
    lat = latency(a.sizes, a.turns, pool, questions, budget=a.path_budget)
    res = {
        "command": " ".join(
            [
                *(f"{v}={os.environ[v]}" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if v in os.environ),
                "python benchmarks/bench_scm.py",
                *(sys.argv[1:] if argv is None else argv),
            ]
        ),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), Python {platform.python_version()}, "
        f"BLAS threads {_blas_threads()}",
        "load_start": load_start,
        "load_end": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "seconds": time.perf_counter() - t_start,
        "embed_seconds": emb.embed_seconds,
        "embedded": emb.n_embedded,
        "n_boot": a.n_boot,
        "seed": a.seed,
        "ks": list(KS),
        "path_budget_s": a.path_budget,
        "quality": quality,
        "controller": controller,
        "latency": lat,
    }
    res = _jsonable(res)
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / "scm.json", res)
    (a.out / "scm.md").write_text(report(res))
    print((a.out / "scm.md").read_text())
    return res


def _blas_threads() -> str:
    """Threads of the BLAS numpy uses (``OPENBLAS_NUM_THREADS=1`` keeps a shared 2-CPU machine from thrashing)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    return "/".join(str(n) for n in sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.floating | np.integer):
        return obj.item()
    return obj


if __name__ == "__main__":
    main()
