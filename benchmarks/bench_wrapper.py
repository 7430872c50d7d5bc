"""The drop-in path: FragRel wrappers with their DEFAULT arguments around the retrievers users already have.

For each conversation of LoCoMo (one Document / node per turn, tagged with ``add_positions`` / ``PositionTagger``),
the user's base retriever is asked for k = 5 and compared with ``FragRelRetriever(base, k=5)`` (no other
argument), with ``alpha=0`` (the same pool and independent scores, no environment) and with the previous defaults
(``preset="general", lexical=0``), in the same run, on the same objects:

  LangChain   InMemoryVectorStore(...).as_retriever()   (the store's relevance scores)
              BM25Retriever (langchain-community)        (the wrapper reads its BM25 scores)
              the same BM25Retriever behind a plain BaseRetriever that hides its scores   (lc-bm25-noscore)
              a generic score-less BaseRetriever over bm25s (a ``k`` field, Documents only)  (lc-generic)
              EnsembleRetriever([bm25, vector])           (weighted RRF; the wrapper fuses the members' scores)
              FAISS(...).as_retriever(search_kwargs={"filter": ...})  (post-filtering store)  (lc-faiss-filter)
  LlamaIndex  VectorStoreIndex(...).as_retriever()       (node scores)
              the same over FaissVectorStore(IndexFlatL2)  (squared L2 distances as node scores)  (li-faiss-l2)
              BM25Retriever (llama-index-retrievers-bm25)
              QueryFusionRetriever([vector, bm25], num_queries=1, mode="reciprocal_rerank")  (hybrid, RRF)

Embeddings: the embedded all-MiniLM-L6-v2 through a text -> vector cache (``benchmarks/out``), so the vector
stores hold exactly what the core benchmarks use. Recall@5 = share of a question's evidence turns in the top 5.

    python benchmarks/bench_wrapper.py                 # dev: LoCoMo conversations 0-4
    python benchmarks/bench_wrapper.py --split heldout # conversations 5-9, once, with the fixed defaults
    python benchmarks/bench_wrapper.py --bases lc-vector --configs 'lex3={"lexical": 0.3}'   # a dev sweep
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import warnings

import numpy as np
from _common import (
    RESULTS_DIR,
    CachedEmbedder,
    default_data_dir,
    load_babilong,
    load_hotpotqa,
    load_locomo,
    load_mtbench,
    paired_bootstrap,
    recall_at_k,
)

__all__ = ["main"]

K = 5
DATASETS = ("locomo", "mtbench", "hotpotqa", "hotpotqa-sent", "babilong-8k")
#: Wrapper settings measured beside the base (name -> keyword arguments; "fragrel" = no argument).
CONFIGS: dict[str, dict] = {
    "alpha0": {"alpha": 0.0},
    "fragrel": {},
    "before": {"preset": "general", "lexical": 0.0},
}


class _LCEmbeddings:
    """LangChain Embeddings over the benchmark's cached MiniLM."""

    def __init__(self, cached: CachedEmbedder) -> None:
        self.cached = cached

    def embed_documents(self, texts):
        return self.cached.embed_documents(texts).tolist()

    def embed_query(self, text):
        return self.cached.embed_query(text).tolist()


def _langchain_bases(docs, cached):
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    class Emb(_LCEmbeddings, Embeddings):
        pass

    vs = InMemoryVectorStore(Emb(cached))
    vs.add_documents(docs)
    vector = vs.as_retriever(search_kwargs={"k": K})
    bm25 = BM25Retriever.from_documents(docs, k=K)
    bases = {}
    with contextlib.suppress(ImportError):  # faiss-cpu: the test / bench extra
        from langchain_community.vectorstores import FAISS

        # FAISS filters after its search (fetch_k, 20 by default): a metadata filter as users scope a search
        scoped = {"source": docs[0].metadata["source"]}
        faiss_vs = FAISS.from_documents(docs, Emb(cached))
        bases["lc-faiss-filter"] = faiss_vs.as_retriever(search_kwargs={"k": K, "filter": scoped})
    return bases | {
        "lc-vector": vector,
        "lc-bm25": bm25,
        "lc-bm25-noscore": _hidden_scores(bm25),
        "lc-generic": _generic_retriever(docs),
        "lc-ensemble": EnsembleRetriever(retrievers=[bm25, vector], weights=[0.5, 0.5]),
    }


def _hidden_scores(bm25):
    """A plain BaseRetriever around ``bm25`` (its ``k`` field set per call): Documents only, no scores."""
    from langchain_core.retrievers import BaseRetriever

    class NoScoreBM25(BaseRetriever):
        inner: object
        k: int = K

        def _get_relevant_documents(self, query, *, run_manager):
            return self.inner.model_copy(update={"k": self.k}).invoke(query)

    return NoScoreBM25(inner=bm25)


def _generic_retriever(docs):
    """A custom score-less retriever as users write them: bm25s over the documents, a ``k`` field, Documents only."""
    from langchain_core.retrievers import BaseRetriever

    from fragrel_integrations.core.scorers import BM25Scorer

    scorer = BM25Scorer([d.page_content for d in docs])

    class GenericRetriever(BaseRetriever):
        documents: list
        k: int = K

        def _get_relevant_documents(self, query, *, run_manager):
            scores = scorer(query)
            return [self.documents[i] for i in np.argsort(-scores, kind="stable")[: self.k]]

    return GenericRetriever(documents=list(docs))


def _llama_bases(nodes, cached):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.retrievers.bm25 import BM25Retriever

    class Emb(BaseEmbedding):
        def _get_query_embedding(self, query):
            return cached.embed_query(query).tolist()

        async def _aget_query_embedding(self, query):
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text):
            return cached.embed_documents([text])[0].tolist()

        def _get_text_embeddings(self, texts):
            return cached.embed_documents(texts).tolist()

    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever

    index = VectorStoreIndex(nodes, embed_model=Emb(model_name="minilm-cached"), show_progress=False)
    vector = index.as_retriever(similarity_top_k=K)
    bases = {}
    with contextlib.suppress(ImportError):  # faiss-cpu + llama-index-vector-stores-faiss: the test / bench extra
        import faiss
        from llama_index.core import StorageContext
        from llama_index.vector_stores.faiss import FaissVectorStore

        # as LlamaIndex's FAISS guide builds it: IndexFlatL2, whose node scores are squared L2 distances
        store = FaissVectorStore(faiss_index=faiss.IndexFlatL2(cached.matrix.shape[1]))
        storage = StorageContext.from_defaults(vector_store=store)
        l2 = VectorStoreIndex(nodes, storage_context=storage, embed_model=Emb(model_name="minilm-cached"))
        bases["li-faiss-l2"] = l2.as_retriever(similarity_top_k=K)
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=K)
    fusion = QueryFusionRetriever(
        [vector, bm25], similarity_top_k=K, num_queries=1, mode="reciprocal_rerank", use_async=False, llm=MockLLM()
    )  # num_queries=1 writes no query variants: the llm is never called
    return bases | {"li-vector": vector, "li-bm25": bm25, "li-fusion": fusion}


def _public(kwargs: dict) -> dict:
    """The wrapper arguments of a config (keys starting with ``_`` are benchmark-only knobs)."""
    return {k: v for k, v in kwargs.items() if not k.startswith("_")}


@contextlib.contextmanager
def _rank_depth(depth: int | None):
    """Dev sweep knob ``_rank_depth``: rank this many candidates of a score-less pool (instead of max(4k, 20))."""
    rerank_module = sys.modules["fragrel_integrations.core.rerank"]
    if depth is None:
        yield
        return
    saved = rerank_module.rank_pool_size
    rerank_module.rank_pool_size = lambda k: depth
    try:
        yield
    finally:
        rerank_module.rank_pool_size = saved


def load_dataset(name: str, split: str, questions: int | None = None):
    """The evaluation set ``name`` (dev or held-out part, as in ``bench_quality.py``); ``questions`` keeps the first
    that many BABILong-style questions per task (a smaller dev check)."""
    dev = split == "dev"
    data = default_data_dir()
    if name == "locomo":
        return load_locomo(data, range(0, 5) if dev else range(5, 10))
    if name == "mtbench":
        return load_mtbench(data, range(0, 27) if dev else range(27, 54))
    if name.startswith("hotpotqa"):
        level = "sentence" if name == "hotpotqa-sent" else "paragraph"
        return load_hotpotqa(data, range(0, 50) if dev else range(50, 100), level=level)
    if name == "babilong-8k":
        part = range(0, 50) if dev else range(100, 150)
        return load_babilong(data, words=8000, questions=part if questions is None else part[:questions])
    raise SystemExit(f"unknown dataset {name!r}; choose from {DATASETS}")


def run(
    split: str,
    n_boot: int,
    only: tuple[str, ...] = (),
    dataset: str = "locomo",
    configs: dict | None = None,
    questions: int | None = None,
) -> dict:
    from langchain_core.documents import Document
    from llama_index.core.schema import TextNode

    from fragrel_integrations.langchain import FragRelRetriever as LCFragRel
    from fragrel_integrations.langchain import add_positions
    from fragrel_integrations.llama_index import FragRelRetriever as LIFragRel
    from fragrel_integrations.llama_index import tag_positions

    configs = CONFIGS if configs is None else configs
    ds = load_dataset(dataset, split, questions)
    cached = CachedEmbedder(ds.cache_name)
    rec: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for corpus in ds.corpora:
        texts = [f.text for f in corpus.fragments]
        cached.ensure(texts)
        index_of = {t: i for i, t in enumerate(texts)}
        # one document per source (a conversation, an article, a haystack), tagged as a user would
        docs = add_positions([Document(f.text, metadata={"source": f.doc_id}) for f in corpus.fragments])
        nodes = tag_positions(
            [
                TextNode(text=f.text, id_=f"{corpus.name}-{i}", metadata={"doc_id": f.doc_id})
                for i, f in enumerate(corpus.fragments)
            ]
        )
        bases = {**_langchain_bases(docs, cached), **_llama_bases(nodes, cached)}
        bases = {n: b for n, b in bases.items() if not only or n in only}
        for name, base in bases.items():
            if name.startswith("lc"):
                wrappers = {m: LCFragRel(base_retriever=base, k=K, **_public(kw)) for m, kw in configs.items()}
                methods = {"base": lambda q, b=base: b.invoke(q)[:K]}
                methods |= {m: (lambda q, w=w: w.invoke(q)) for m, w in wrappers.items()}
                text_of = lambda d: d.page_content  # noqa: E731
            else:
                wrappers = {m: LIFragRel(base, similarity_top_k=K, **_public(kw)) for m, kw in configs.items()}
                methods = {"base": lambda q, b=base: b.retrieve(q)[:K]}
                methods |= {m: (lambda q, w=w: w.retrieve(q)) for m, w in wrappers.items()}
                text_of = lambda n: n.node.get_content()  # noqa: E731
            for q in corpus.queries:
                for m, fn in methods.items():
                    depth = configs.get(m, {}).get("_rank_depth")
                    with warnings.catch_warnings(), _rank_depth(depth):
                        warnings.simplefilter("ignore")
                        got = [index_of[text_of(x)] for x in fn(q.text)]
                    rec.setdefault(f"{name}|{m}", []).append(recall_at_k(got, q.gold, K))
    out = {"split": split, "dataset": dataset, "k": K, "n_queries": ds.n_queries, "configs": configs}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    table = {}
    for key, vals in rec.items():
        name, m = key.split("|")
        base = np.asarray(rec[f"{name}|base"])
        arr = np.asarray(vals)
        lo, hi = paired_bootstrap(arr, base, n_boot=n_boot) if m != "base" else (0.0, 0.0)
        table.setdefault(name, {})[m] = {
            "r5": round(100 * arr.mean(), 1),
            "diff": round(100 * (arr.mean() - base.mean()), 1),
            "ci": [round(100 * lo, 1), round(100 * hi, 1)],
        }
    out["recall_at_5"] = table
    return out


def to_markdown(res: dict) -> str:
    configs = res["configs"]
    lines = [
        f"# FragRel wrappers with default arguments, {res.get('dataset', 'locomo')} ({res['split']} part)",
        "",
        f"{res['n_queries']} questions, recall@{res['k']} in %, difference to the base asked for k={res['k']} and its "
        f"paired-bootstrap 95% CI. Run time {res['seconds']} s. Columns: wrapper settings beside the base "
        "(*fragrel* = `FragRelRetriever(base, k=5)` with no other argument): "
        + "; ".join(f"*{m}* = `{json.dumps(kw)}`" for m, kw in configs.items())
        + ".",
        "",
        "| base | alone | " + " | ".join(configs) + " |",
        "|---|---:|" + "---:|" * len(configs),
    ]
    for name, row in res["recall_at_5"].items():
        cells = [f"{row['base']['r5']}"]
        for m in configs:
            c = row[m]
            cells.append(f"{c['r5']} ({c['diff']:+.1f} [{c['ci'][0]:+.1f}, {c['ci'][1]:+.1f}])")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=("dev", "heldout"), default="dev")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--bases", nargs="*", default=[], help="only these bases (e.g. lc-bm25); results go to *_partial")
    p.add_argument("--dataset", choices=DATASETS, default="locomo")
    p.add_argument(
        "--configs",
        nargs="*",
        default=[],
        help="NAME=JSON wrapper keyword arguments measured instead of the default columns; results go to *_sweep",
    )
    p.add_argument("--tag", default="", help="suffix of the result files")
    p.add_argument("--questions", type=int, default=None, help="BABILong-style: the first N questions per task")
    args = p.parse_args(argv)
    configs = dict(CONFIGS)
    if args.configs:
        configs = {c.split("=", 1)[0]: json.loads(c.split("=", 1)[1]) for c in args.configs}
    res = run(args.split, args.n_boot, tuple(args.bases), args.dataset, configs, args.questions)
    res["command"] = "python benchmarks/bench_wrapper.py " + " ".join(argv if argv is not None else sys.argv[1:])
    stem = "" if args.dataset == "locomo" else f"_{args.dataset}"
    name = f"wrapper{stem}_{args.split}" + ("_partial" if args.bases else "") + ("_sweep" if args.configs else "")
    name += f"_{args.tag}" if args.tag else ""
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(res, indent=1))
    (RESULTS_DIR / f"{name}.md").write_text(to_markdown(res))
    print(to_markdown(res))
    return res


if __name__ == "__main__":
    main()
