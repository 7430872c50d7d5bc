"""Surprise tree (ILM-TR on RAPTOR) vs plain chunk retrieval: multi-needle-in-a-haystack on the Paul Graham essays.

    python benchmarks/bench_tree.py --lengths 8k,16k,32k,64k      # embedded SmolLM2-135M (the reported run)
    python benchmarks/bench_tree.py --lengths 8k --trials 3       # three haystacks of 8k tokens
    python benchmarks/bench_tree.py --base-url http://127.0.0.1:8080/v1 --model NAME   # OpenAI-compatible
    python benchmarks/bench_tree.py --summariser extractive --lengths 8k,16k,32k,64k   # no LLM (seconds)
    python benchmarks/bench_tree.py --summariser both --lengths 8k      # LLM and extractive on the same haystack
    python benchmarks/bench_tree.py --summariser extractive --also-mean-vectors --lengths 8k,16k,32k

Haystack: the essays in sorted file order, started at a seeded essay, cut into sentences (at most 40 words) and
filled until the text has about L tokens (counted with the summary model's tokenizer). Three needles written for
this benchmark (made-up facts about three made-up places) go in between sentences. Depths (``--depths grid``,
the default): ``3 x H`` evenly spaced points from 0 % to 100 % for the ``H`` haystacks of the run, dealt
round-robin (haystack ``h`` gets points ``h, h + H, ...``, assigned to the needles in seeded order), so every
haystack spans its text and the run covers the 0-100 % grid; ``--depths random`` draws one depth uniformly in
each third instead. Each trial starts at a new seeded essay.
One tree is built per haystack with ``TreeConfig(chunk_tokens=200,
summary_tokens=48, surprise_tokens=24)``: ILM-TR uses 600-token chunks, but all-MiniLM-L6-v2 reads only its first
256 word pieces, so most of a 600-token chunk is never embedded (``--chunk-tokens 600`` gives the paper setting;
the report counts the needles that start inside the embedder's window). Short summaries keep the embedded model
affordable. ``--chunk-tokens 600,default`` builds one tree per setting on the same haystacks (``default``: what
``TreeConfig`` does when ``chunk_tokens`` is left out, which fits the embedder: 200 for MiniLM), side by side.

``--summariser``: who writes the summaries and surprise notes: ``llm`` (the model above, ILM-TR's prompt),
``extractive`` (no model: the most central sentences as the summary, novelty outliers as the surprise, see
``fragrel_integrations.core.tree.extractive``; the model's tokenizer still counts the tokens, so budgets and
haystacks are the same) or ``both`` (two trees per haystack, reported side by side from the same run).

Each needle has its own question. Six retrievals on the SAME tree, the same embedder and the same ``k``:

* ``tree+surprise``: collapsed tree over every node text (leaf chunks, summaries, surprise facts);
* ``tree``: collapsed tree without surprise facts (``fields=("text", "summary")``);
* ``chunks``: leaf chunks only (``fields=("text",)``) = plain dense chunk retrieval;
* ``surprise``: surprise notes only (``fields=("surprise",)``): do the notes alone find the needles?
* ``tree+surprise+fragrel``: ``tree+surprise`` with FragRel over the tree (``TreeRelation()``: texts of one node,
  of parent and child, and leaf chunks by position; untuned defaults, ``alpha=0.5``);
* ``chunks+fragrel``: ``chunks`` with the same relation, which among leaf texts is FragRel's context relation
  (``0.3 ** distance``).

needle recall@k: the share of (haystack, needle) pairs where one of the ``k`` best hits either is a leaf chunk
whose text contains the needle sentence verbatim, or is a summary / surprise text (of any node) that contains
every key word of the needle's fact (case-insensitive substring, e.g. ``saldane`` and ``orange``). The first rule
is the usual one; the second credits a summary that carried the fact up the tree. Hits are ranked once with
``k = max(--ks)`` and cut for the smaller ``k`` (collapsed retrieval without a token budget is a plain top-k).

``--also-mean-vectors`` adds one more extractive tree per haystack whose multi-sentence summaries and surprise
notes get the mean of their sentence vectors instead of an embedding of their text, so the two can be compared on
recall and build time in one run.

Also measured per tree: build seconds (wall and process CPU time: CPU time moves less with the load other jobs
put on a shared machine; it counts every thread of the process, llama.cpp's and torch's), LLM calls, cache hits,
replies the parser could not split into (Summary)/(Surprise), failed calls, nodes and layers, against the number
of leaf chunks, and how many leaves got a surprise note at all (an extractive note that is not a needle is a false
alarm; the LLM writes one for nearly every chunk). Replies are cached in SQLite under the gitignored
``benchmarks/out/``, so a rerun with the same settings makes no calls (its build time
is then not the model's). Writes ``benchmarks/results/tree.md`` and ``tree.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from _common import OUT_DIR, RESULTS_DIR, book_sentences, default_data_dir, loadavg, machine_info, write_json

from fragrel_integrations.core.tree import FIELDS, SurpriseTree, TreeConfig, TreeHit, TreeRelation, cluster_embeddings
from fragrel_integrations.models.embedder import embed_documents
from fragrel_integrations.models.response_cache import CachedChatModel

# Three needles written for this benchmark: (sentence, question, key words of the fact).
NEEDLES = (
    (
        "Every spring the lighthouse keeper of Port Saldane paints the lamp room bright orange "
        "to honour his grandmother.",
        "What colour does the lighthouse keeper of Port Saldane paint the lamp room?",
        ("saldane", "orange"),
    ),
    (
        "The only bakery in the village of Vellmoor sells bread shaped like owls, and only on Thursdays.",
        "What shape is the bread sold by the bakery in Vellmoor?",
        ("vellmoor", "owl"),
    ),
    (
        "The chess club of Quillan Bay meets under the sea in a glass dome built by a retired submarine captain.",
        "Where does the chess club of Quillan Bay meet?",
        ("quillan", "dome"),
    ),
)
#: FragRel over the tree: untuned defaults (w_pos 0.3 = FragRel's story setting; w_tree, w_node 0.5), alpha 0.5.
RELATION, ALPHA = TreeRelation(), 0.5
#: method -> (fields that compete, relation)
METHODS = {
    "tree+surprise": (FIELDS, None),
    "tree": (("text", "summary"), None),
    "chunks": (("text",), None),
    "surprise": (("surprise",), None),
    "tree+surprise+fragrel": (FIELDS, RELATION),
    "chunks+fragrel": (("text",), RELATION),
}


def parse_length(text: str) -> int:
    """``"8k"`` -> 8000 tokens, ``"12000"`` -> 12000."""
    text = text.strip().lower()
    value = int(float(text[:-1]) * 1000) if text.endswith("k") else int(text)
    if value < 1000:
        raise ValueError(f"a haystack length must be at least 1000 tokens, got {text!r}")
    return value


def norm(text: str) -> str:
    return " ".join(text.split()).lower()


def grid_depths(n_haystacks: int) -> list[list[float]]:
    """``3 * n`` evenly spaced depths from 0 to 1, dealt round-robin: haystack ``h`` gets every ``n``-th one, so
    every haystack spans the text and together they cover 0-100 %.

    >>> grid_depths(2)
    [[0.0, 0.4, 0.8], [0.2, 0.6, 1.0]]
    """
    points = np.linspace(0.0, 1.0, len(NEEDLES) * n_haystacks)
    return [[round(float(d), 3) for d in points[h::n_haystacks]] for h in range(n_haystacks)]


def make_haystack(
    essays: list[list[str]], tokens: int, trial: int, seed: int, count, depths: list[float] | None = None
) -> dict:
    """About ``tokens`` tokens of essays with the three needles at ``depths`` (dealt to the needles in seeded
    order) or, without them, at seeded depths one per third; needles go in between sentences."""
    rng = np.random.default_rng([seed, trial, tokens, 7])
    needle_tokens = sum(count(n[0]) for n in NEEDLES)
    filler, total, e = [], 0, int(rng.integers(len(essays)))
    while total < tokens - needle_tokens:
        for sentence in essays[e % len(essays)]:
            filler.append(sentence)
            total += count(sentence) + 1
            if total >= tokens - needle_tokens:
                break
        e += 1
    # stratified: one depth in each third of the haystack (so the needles never share one chunk), in seeded order
    thirds = rng.permutation(len(NEEDLES))
    if depths is None:
        depths = (thirds + rng.uniform(0.0, 1.0, size=len(NEEDLES))) / len(NEEDLES)
    else:
        depths = np.asarray(depths, dtype=np.float64)[thirds]
    slots = [round(float(d) * len(filler)) for d in depths]
    parts = list(filler)
    for i in sorted(range(len(NEEDLES)), key=lambda i: -slots[i]):  # insert from the back: earlier slots stay valid
        parts.insert(slots[i], NEEDLES[i][0])
    text = " ".join(parts)
    return {"text": text, "depths": [round(float(d), 3) for d in depths], "tokens": count(text)}


def needle_found(hit: TreeHit, needle: int) -> str | None:
    """How a hit covers a needle: ``"text"`` (the sentence is in the chunk), ``"summary"``/``"surprise"`` (the
    fact's key words are all in that text), or None."""
    sentence, _, keys = NEEDLES[needle]
    if hit.field == "text":
        return "text" if norm(sentence) in norm(hit.text) else None
    low = hit.text.lower()
    return hit.field if all(k in low for k in keys) else None


def evaluate(tree: SurpriseTree, ks: list[int]) -> dict:
    out: dict = {}
    kmax = max(ks)
    for method, (fields, relation) in METHODS.items():
        rows = []
        for i, (_, question, _) in enumerate(NEEDLES):
            hits = tree.retrieve(question, k=kmax, fields=fields, relation=relation, alpha=ALPHA)
            ways = [needle_found(h, i) for h in hits]
            first = next((r for r, w in enumerate(ways) if w), None)
            rows.append(
                {
                    "needle": i,
                    "first_rank": None if first is None else first + 1,
                    "found_by": None if first is None else ways[first],
                    "hits": [[h.node_id, h.layer, h.field, round(h.score, 4)] for h in hits],
                }
            )
        out[method] = {
            "recall": {
                str(k): float(np.mean([r["first_rank"] is not None and r["first_rank"] <= k for r in rows])) for k in ks
            },
            "needles": rows,
        }
    return out


def embedder_window(embedder: object) -> tuple[int | None, object]:
    """(max input word pieces, tokenizer) of a sentence-transformers embedder, else (None, None)."""
    st = getattr(embedder, "_model", None)
    return getattr(st, "max_seq_length", None), getattr(st, "tokenizer", None)


def needle_leaf_notes(tree: SurpriseTree) -> list[dict]:
    """For each needle: the leaf holding it, whether the embedder sees the needle (it starts inside the
    embedder's input window) and what the model wrote for that leaf (to judge the summaries)."""
    window, tokenizer = embedder_window(tree.embedder)
    notes = []
    for i, (sentence, _, keys) in enumerate(NEEDLES):
        leaf = next((n for n in tree.leaves() if norm(sentence) in norm(n.text)), None)
        if leaf is None:
            notes.append({"needle": i, "leaf": None})
            continue
        parents = tree.parents()
        up, chain = leaf.id, []
        while up in parents:
            up = parents[up][0]
            chain.append(up)
        offset = None
        if tokenizer is not None:
            start = norm(leaf.text).find(norm(sentence))
            offset = len(tokenizer(" ".join(leaf.text.split())[:start], add_special_tokens=False)["input_ids"])
        notes.append(
            {
                "needle": i,
                "leaf": leaf.id,
                "wordpiece_offset": offset,
                "embedder_window": window,
                "visible_to_embedder": None if offset is None or window is None else offset + 2 < window,
                "parsed": leaf.parsed,
                "summary": leaf.summary,
                "surprise": leaf.surprise,
                "fact_in_leaf_summary": all(k in leaf.summary.lower() for k in keys),
                "fact_in_leaf_surprise": all(k in leaf.surprise.lower() for k in keys),
                "fact_in_ancestors": any(
                    all(k in (tree.nodes[a].summary + " " + tree.nodes[a].surprise).lower() for k in keys)
                    for a in chain
                ),
            }
        )
    return notes


def reducer_in_effect(config: TreeConfig) -> str:
    """The dimension reduction the clustering used: ``auto`` means UMAP when umap-learn is installed, else PCA."""
    if config.reducer != "auto":
        return config.reducer
    return "umap (auto)" if importlib.util.find_spec("umap") is not None else "pca (auto, umap-learn not installed)"


def make_model(args: argparse.Namespace) -> tuple[object, str]:
    if args.base_url:
        from fragrel_integrations.models.openai_chat import OpenAIChatModel

        if not args.model:
            raise SystemExit("--base-url needs --model")
        return OpenAIChatModel(args.model, base_url=args.base_url, context_window=args.context_window), args.model
    from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

    return LlamaCppChatModel(), "SmolLM2-135M-Instruct (embedded, llama.cpp)"


def one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


SUMMARISER_LABEL = {
    "llm": "LLM summariser",
    "extractive": "extractive summariser (no LLM)",
    "extractive-mean": "extractive summariser (no LLM), summary vectors = mean of sentence vectors",
}
#: label -> (TreeConfig.summariser, compose summary vectors from sentence vectors; None = the default)
VARIANTS = {"llm": ("llm", None), "extractive": ("extractive", None), "extractive-mean": ("extractive", True)}


def label(who: str) -> str:
    """The long name of a tree variant: ``"extractive @600"`` = the extractive summariser with 600-token chunks."""
    base, _, chunks = who.partition(" @")
    if not chunks:
        return SUMMARISER_LABEL[base]
    return f"{SUMMARISER_LABEL[base]}, chunk_tokens " + ("left at the default" if chunks == "default" else chunks)


def parse_chunk_tokens(text: str) -> list[int | None]:
    """``"600,default"`` -> ``[600, None]`` (None: TreeConfig's default, which fits the embedder)."""
    out: list[int | None] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "default":
            out.append(None)
        elif part.isdigit() and int(part) > 0:
            out.append(int(part))
        else:
            raise SystemExit(f"--chunk-tokens takes positive ints or 'default', comma-separated; got {part!r}")
    if not out:
        raise SystemExit("--chunk-tokens needs at least one value")
    return out


def auto_summary(res: dict, who: str) -> list[str]:
    agg, k = res["aggregate"][who], str(res["k_main"])
    lines = []
    r = {m: agg["recall"][m][k] for m in METHODS}
    if agg.get("chunk_tokens"):
        lines.append(f"- Leaf chunks of at most {', '.join(map(str, agg['chunk_tokens']))} tokens.")
    lines.append(
        f"- needle recall@{k} over {agg['pairs']} (haystack, needle) pairs: "
        f"tree+surprise {100 * r['tree+surprise']:.0f} %, "
        f"tree without surprise {100 * r['tree']:.0f} %, plain chunks {100 * r['chunks']:.0f} %, "
        f"surprise notes alone {100 * r['surprise']:.0f} %."
    )
    by = agg["found_by"]["tree+surprise"]
    lines.append(
        f"- What found the needle for tree+surprise (best-ranked covering hit): leaf chunk text {by.get('text', 0)}, "
        f"summary {by.get('summary', 0)}, surprise {by.get('surprise', 0)}, none {by.get('none', 0)}."
    )
    lines.append(
        f"- Leaf summaries that kept the needle's fact: {agg['fact_in_leaf_summary']} of {agg['pairs']}; "
        f"leaf surprise texts that kept it: {agg['fact_in_leaf_surprise']}; any ancestor summary/surprise: "
        f"{agg['fact_in_ancestors']}. Leaves with a surprise note at all: {agg['leaves_with_surprise']} of "
        f"{agg['leaves']}."
    )
    lines.append(
        f"- Needles that start inside the embedder's input window (all-MiniLM-L6-v2 reads 256 word pieces) of "
        f"their leaf chunk: {agg['visible_to_embedder']} of {agg['pairs']}; the rest of a longer chunk is cut off "
        "before embedding, so plain chunk retrieval cannot match a needle there."
    )
    if agg["llm_calls"]:
        lines.append(
            f"- Cost: {agg['llm_calls']} LLM calls for {agg['leaves']} leaf chunks ({agg['calls_per_leaf']:.2f} per "
            f"chunk), {agg['parse_failures']} replies not in the (Summary)/(Surprise) format "
            f"({100 * agg['parse_failures'] / max(1, agg['llm_calls']):.0f} %), {agg['call_failures']} failed "
            f"calls; build {agg['build_seconds']:.0f} s in total "
            f"({agg['build_seconds'] / max(1, agg['leaves']):.1f} s per chunk)."
        )
    else:
        lines.append(
            f"- Cost: no LLM calls; build {agg['build_seconds']:.1f} s in total for {agg['leaves']} leaf chunks "
            f"({agg['build_seconds'] / max(1, agg['leaves']):.2f} s per chunk, embedding included); embedding the "
            f"leaf chunks alone (what a plain dense index of them costs) took {agg['chunk_embedding_seconds']:.1f} s "
            "in the same run."
        )
    f = {m: agg["recall"][m][k] for m in METHODS}
    lines.append(
        f"- FragRel (TreeRelation defaults, alpha {ALPHA}): tree+surprise {100 * f['tree+surprise']:.0f} % -> "
        f"{100 * f['tree+surprise+fragrel']:.0f} %; plain chunks {100 * f['chunks']:.0f} % -> "
        f"{100 * f['chunks+fragrel']:.0f} % (position relation only) at k={k}."
    )
    if agg["cache_hits"]:
        lines.append(f"- {agg['cache_hits']} replies came from the response cache: build times understate the model.")
    if r["tree+surprise"] <= r["chunks"] and r["tree"] <= r["chunks"]:
        lines.append(
            "- With this summariser the summary and surprise texts add no needle recall over plain chunks at this k."
        )
    return lines


def side_by_side(res: dict) -> list[str]:
    """One row per summariser: build cost, recall@k_main per method, needles kept in the notes."""
    k = str(res["k_main"])
    llm = res["aggregate"].get("llm")
    out = [
        "| summariser | build s (total) | build CPU s | LLM build / this build | s per chunk | "
        "chunk embedding alone s (CPU s) | LLM calls | "
        + " | ".join(f"{m} @{k}" for m in METHODS)
        + " | needles in leaf surprise | leaves with a surprise note |",
        "|---|---|---|---|---|---|---|" + "---|" * len(METHODS) + "---|---|",
    ]
    for who in res["summarisers"]:
        agg = res["aggregate"][who]
        ratio = (
            f"{llm['build_seconds'] / agg['build_seconds']:.1f}x wall, "
            f"{llm['build_cpu_seconds'] / agg['build_cpu_seconds']:.1f}x CPU"
            if llm and agg.get("build_cpu_seconds")
            else "–"
        )
        out.append(
            f"| {who} | {agg['build_seconds']:.1f} | {agg.get('build_cpu_seconds', float('nan')):.1f} | {ratio} | "
            f"{agg['build_seconds'] / max(1, agg['leaves']):.2f} | "
            f"{agg['chunk_embedding_seconds']:.1f} ({agg.get('chunk_embedding_cpu_seconds', float('nan')):.1f}) | "
            f"{agg['llm_calls']} | "
            + " | ".join(f"{100 * agg['recall'][m][k]:.0f} %" for m in METHODS)
            + f" | {agg['fact_in_leaf_surprise']} of {agg['pairs']} | {agg['leaves_with_surprise']} of "
            f"{agg['leaves']} |"
        )
    return out


def report(res: dict) -> str:
    ks = res["ks"]
    m = res["machine"]
    whos = res["summarisers"]
    out = [
        "# Surprise tree: multi-needle-in-a-haystack retrieval",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {m['cpus']} CPUs ({m['processor']}), Python {m['python']}, "
        f"load average at start {m['loadavg_start']}, "
        f"at end {m['loadavg_end']} (other jobs shared the machine: timings are noisy).  ",
        f"Trees: {'; '.join(label(w) for w in whos)}. Model: {res['model']} "
        + ("(writes the LLM summaries" if "llm" in whos else "(not called")
        + "; its tokenizer counts the tokens); embedder: all-MiniLM-L6-v2 (embedded). "
        f"Wall time {res['wall_seconds']:.0f} s, of which {res['warmup_seconds']:.0f} s one-off warm-up before the "
        "first build (embedder load, UMAP's numba compilation), not counted in build times.  ",
        f"Tree: {res['config']}  ",
        f"Haystacks: lengths {', '.join(str(x) for x in res['lengths'])} tokens (SmolLM2 tokenizer), "
        f"{res['trials']} per length, seed {res['seed']}; 3 needles per haystack at "
        + (
            "grid depths (3 x haystacks points from 0 to 100 %, dealt round-robin)."
            if res.get("depth_scheme") == "grid"
            else "seeded depths (one per third)."
        ),
        "",
        "Only what is listed below was run. needle recall@k: a needle counts when one of the k best hits is a leaf "
        "chunk containing its sentence, or a summary/surprise text containing all its key words.",
        "",
    ]
    if len(whos) > 1:
        out += ["## Side by side (same haystacks, same run)", "", *side_by_side(res), ""]
    for who in whos:
        out += [f"## Summary: {label(who)}", "", *auto_summary(res, who), ""]
    out += [
        "## needle recall@k (%)",
        "",
        "| summariser | method | " + " | ".join(f"@{k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    for who in whos:
        agg = res["aggregate"][who]
        for method in METHODS:
            out.append(
                f"| {who} | {method} | " + " | ".join(f"{100 * agg['recall'][method][str(k)]:.0f}" for k in ks) + " |"
            )
    out += [
        "",
        "## Per haystack",
        "",
        "| haystack | summariser | tokens | needle depths | leaves | nodes | layers | LLM calls | parse fail | "
        "call fail | leaves with surprise | build s (CPU s) | chunk embedding s (CPU s) | "
        f"first rank {' / '.join(METHODS)} (k ≤ {max(ks)}) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for h in res["haystacks"]:
        b = h["build"]
        ranks = " ; ".join(
            "/".join(str(h["eval"][mm]["needles"][i]["first_rank"] or "–") for mm in METHODS)
            for i in range(len(NEEDLES))
        )
        out.append(
            f"| {h['name']} | {h['summariser']} | {h['tokens']} | {', '.join(f'{d:.2f}' for d in h['depths'])} | "
            f"{b['leaves']} | {b['nodes']} | {b['layers']} | {b['llm_calls']} | {b['parse_failures']} | "
            f"{b['call_failures']} | {b['leaves_with_surprise']} | {b['seconds']:.1f} "
            f"({b.get('cpu_seconds', float('nan')):.1f}) | {b['chunk_embedding_seconds']:.1f} "
            f"({b.get('chunk_embedding_cpu_seconds', float('nan')):.1f}) | {ranks} |"
        )
    out += [
        "",
        "## By needle depth",
        "",
        f"First rank of the needle (– = not in the top {max(ks)}), every (haystack, needle) pair sorted by depth.",
        "",
        "| depth | haystack | summariser | needle | " + " | ".join(METHODS) + " |",
        "|---|---|---|---|" + "---|" * len(METHODS),
    ]
    pairs = [(h["depths"][i], h, i) for h in res["haystacks"] for i in range(len(NEEDLES))]
    for depth, h, i in sorted(pairs, key=lambda t: (t[0], t[1]["name"], t[1]["summariser"])):
        ranks = " | ".join(str(h["eval"][mm]["needles"][i]["first_rank"] or "–") for mm in METHODS)
        out.append(f"| {depth:.2f} | {h['name']} | {h['summariser']} | {i} | {ranks} |")
    out += ["", "## What the summariser wrote for the leaves holding the needles", ""]
    for h in res["haystacks"]:
        for note in h["needle_leaves"]:
            if note["leaf"] is None:
                out.append(f"- {h['name']} ({h['summariser']}) needle {note['needle']}: not found whole in any leaf")
                continue
            out.append(
                f"- {h['name']} ({h['summariser']}) needle {note['needle']} (leaf {note['leaf']}, starts at word "
                f"piece {note['wordpiece_offset']}, parsed {note['parsed']}): "
                f"summary “{one_line(note['summary'])}”; surprise “{one_line(note['surprise']) or '—'}”"
            )
    out += [
        "",
        "## Needles (written for this benchmark)",
        "",
        *[f"{i}. {s} — question: {q} — key words: {', '.join(k)}" for i, (s, q, k) in enumerate(NEEDLES)],
        "",
    ]
    return "\n".join(out)


def aggregate(haystacks: list[dict], ks: list[int]) -> dict:
    rows = {mm: [r for h in haystacks for r in h["eval"][mm]["needles"]] for mm in METHODS}
    found_by = {}
    for mm, rs in rows.items():
        counts: dict[str, int] = {}
        for r in rs:
            key = r["found_by"] or "none"
            counts[key] = counts.get(key, 0) + 1
        found_by[mm] = counts
    notes = [n for h in haystacks for n in h["needle_leaves"] if n["leaf"] is not None]
    builds = [h["build"] for h in haystacks]
    leaves = sum(b["leaves"] for b in builds)
    calls = sum(b["llm_calls"] for b in builds)
    with_surprise = sum(b["leaves_with_surprise"] for b in builds)
    return {
        "chunk_tokens": sorted({b["chunk_tokens"] for b in builds if "chunk_tokens" in b}),
        "pairs": len(rows["chunks"]),
        "recall": {
            mm: {str(k): float(np.mean([r["first_rank"] is not None and r["first_rank"] <= k for r in rs])) for k in ks}
            for mm, rs in rows.items()
        },
        "found_by": found_by,
        "fact_in_leaf_summary": sum(n["fact_in_leaf_summary"] for n in notes),
        "fact_in_leaf_surprise": sum(n["fact_in_leaf_surprise"] for n in notes),
        "fact_in_ancestors": sum(n["fact_in_ancestors"] for n in notes),
        "visible_to_embedder": sum(bool(n["visible_to_embedder"]) for n in notes),
        "leaves": leaves,
        "leaves_with_surprise": with_surprise,
        "llm_calls": calls,
        "calls_per_leaf": calls / max(1, leaves),
        "cache_hits": sum(b["cache_hits"] for b in builds),
        "parse_failures": sum(b["parse_failures"] for b in builds),
        "call_failures": sum(b["call_failures"] for b in builds),
        "build_seconds": sum(b["seconds"] for b in builds),
        "build_cpu_seconds": sum(b.get("cpu_seconds", 0.0) for b in builds),
        "chunk_embedding_seconds": sum(b["chunk_embedding_seconds"] for b in builds),
        "chunk_embedding_cpu_seconds": sum(b.get("chunk_embedding_cpu_seconds", 0.0) for b in builds),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir(), help="the shared data folder")
    ap.add_argument("--lengths", default="8k,16k", help="haystack lengths in tokens, comma-separated (8k, 12000)")
    ap.add_argument("--trials", type=int, default=1, help="haystacks (trees) per length, each with new depths")
    ap.add_argument(
        "--depths",
        choices=("grid", "random"),
        default="grid",
        help="grid: 3 x haystacks depths from 0 to 100 %% over the run; random: one seeded depth per third",
    )
    ap.add_argument("--ks", default="1,3,5,10", help="k values for recall@k")
    ap.add_argument("--k-main", type=int, default=5, help="the k the summary lines quote")
    ap.add_argument(
        "--chunk-tokens",
        default="200",
        help="tokens per leaf chunk, comma-separated for one tree per value on the same haystacks; 'default': "
        "TreeConfig's default (fits the embedder: 200 for MiniLM's 256 word pieces); ILM-TR: 600",
    )
    ap.add_argument("--summary-tokens", type=int, default=48)
    ap.add_argument("--surprise-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-url", default=None, help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default=None, help="the model name that server serves")
    ap.add_argument("--context-window", type=int, default=None, help="the served model's context window (tokens)")
    ap.add_argument(
        "--summariser",
        choices=("llm", "extractive", "both"),
        default="llm",
        help="who writes summaries and surprise notes (both: two trees per haystack, side by side)",
    )
    ap.add_argument(
        "--also-mean-vectors",
        action="store_true",
        help="add an extractive tree whose multi-sentence summaries get the mean of their sentence vectors "
        "(ExtractiveSummariser(mean_vectors=True)), to compare recall and build time on the same haystacks",
    )
    ap.add_argument("--out", type=Path, default=None, help="default: results/tree.md (llm), tree_<summariser>.md")
    ap.add_argument(
        "--llm-cache",
        type=Path,
        default=OUT_DIR / "tree_llm_cache.sqlite",
        help="SQLite cache of the LLM replies (a new path = every call made, so LLM build times are the model's)",
    )
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = RESULTS_DIR / ("tree.md" if args.summariser == "llm" else f"tree_{args.summariser}.md")
    summarisers = ["llm", "extractive"] if args.summariser == "both" else [args.summariser]
    if args.also_mean_vectors:
        summarisers.append("extractive-mean")
    chunk_settings = parse_chunk_tokens(args.chunk_tokens)
    if len(chunk_settings) > 1:  # one tree per (summariser, chunk setting), labelled "extractive @600"
        summarisers = [f"{w} @{'default' if c is None else c}" for w in summarisers for c in chunk_settings]
    ks = sorted({int(x) for x in args.ks.split(",") if x.strip()})
    if args.trials < 1 or not ks or ks[0] < 1 or args.k_main not in ks:
        raise SystemExit("--trials and every k must be positive, and --k-main one of --ks")
    lengths = [parse_length(x) for x in args.lengths.split(",") if x.strip()]

    wall = time.perf_counter()
    loadavg_start = loadavg()
    base, model_name = make_model(args)
    args.llm_cache.parent.mkdir(parents=True, exist_ok=True)
    model = CachedChatModel(base, args.llm_cache)
    from fragrel_integrations.models.local import default_embedder

    embedder = default_embedder()
    config = TreeConfig(
        chunk_tokens=chunk_settings[0],
        summary_tokens=args.summary_tokens,
        surprise_tokens=args.surprise_tokens,
        seed=args.seed,
    )
    warm = time.perf_counter()  # one-off costs kept out of the build times: model load, UMAP's numba compile
    embedder.embed_query("warm-up")
    noise = np.random.default_rng(0).normal(size=(40, embedder.dim)).astype(np.float32)
    cluster_embeddings(noise, [10] * 40, max_cluster_tokens=100, dim=config.reduction_dim, method=config.reducer)
    warmup_seconds = time.perf_counter() - warm
    folder = args.data / "needle_haystack" / "PaulGrahamEssays"
    essays = [book_sentences(p) for p in sorted(folder.glob("*.txt"))]
    if not essays:
        raise SystemExit(f"no essays under {folder}")

    haystacks = []
    grid = grid_depths(len(lengths) * args.trials) if args.depths == "grid" else None
    for n_length, tokens in enumerate(lengths):
        for trial in range(args.trials):
            depths = None if grid is None else grid[n_length * args.trials + trial]
            hay = make_haystack(essays, tokens, trial, args.seed, model.count_tokens, depths)
            name = f"{tokens // 1000}k-{trial}"
            for who in summarisers:
                variant, _, chunks = who.partition(" @")
                kind, mean_vectors = VARIANTS[variant]
                chunk_tokens = (None if chunks == "default" else int(chunks)) if chunks else config.chunk_tokens
                tree = SurpriseTree(
                    model,
                    embedder,
                    config=replace(config, summariser=kind, chunk_tokens=chunk_tokens),
                    max_concurrency=1,
                    show_progress=False,
                )
                if mean_vectors is not None:
                    tree.summariser.cached_embedder.compose = mean_vectors
                hits_before, start, cpu = model.hits, time.perf_counter(), time.process_time()
                rep = tree.build([hay["text"]], doc_ids=[name])
                seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
                build = {
                    "chunk_tokens": tree.config.chunk_tokens,
                    "leaves": len(tree.leaves()),
                    "nodes": len(tree),
                    "layers": tree.n_layers,
                    "llm_calls": rep.llm_calls,
                    "cache_hits": model.hits - hits_before,
                    "parse_failures": rep.parse_failures,
                    "call_failures": rep.call_failures,
                    "leaves_with_surprise": sum(bool(n.surprise) for n in tree.leaves()),
                    "seconds": seconds,
                    "cpu_seconds": cpu_seconds,
                }
                start, cpu = time.perf_counter(), time.process_time()  # the floor any dense index of these pays
                embed_documents(embedder, [n.text for n in tree.leaves()])
                build["chunk_embedding_seconds"] = time.perf_counter() - start
                build["chunk_embedding_cpu_seconds"] = time.process_time() - cpu
                ev = evaluate(tree, ks)
                haystacks.append(
                    {
                        "name": name,
                        "summariser": who,
                        "tokens": hay["tokens"],
                        "depths": hay["depths"],
                        "build": build,
                        "eval": ev,
                        "needle_leaves": needle_leaf_notes(tree),
                    }
                )
                print(
                    f"{name} ({who}): {build['leaves']} leaves, {build['nodes']} nodes, {build['llm_calls']} calls, "
                    f"{build['parse_failures']} parse failures, {seconds:.1f} s; recall@{args.k_main} "
                    + ", ".join(f"{mm} {ev[mm]['recall'][str(args.k_main)]:.2f}" for mm in METHODS),
                    file=sys.stderr,
                )

    res = {
        "command": " ".join(["python benchmarks/bench_tree.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(loadavg_start),
        "model": model_name,
        "config": {
            "chunk_tokens": ["default" if c is None else c for c in chunk_settings],
            **{k: getattr(config, k) for k in ("summary_tokens", "surprise_tokens", "seed")},
            "reducer": reducer_in_effect(config),
        },
        "seed": args.seed,
        "trials": args.trials,
        "lengths": lengths,
        "ks": ks,
        "k_main": args.k_main,
        "depth_scheme": args.depths,
        "methods": {
            mm: {"fields": list(f), "relation": None if r is None else asdict(r), "alpha": ALPHA}
            for mm, (f, r) in METHODS.items()
        },
        "needles": [{"text": s, "question": q, "keys": list(k)} for s, q, k in NEEDLES],
        "wall_seconds": time.perf_counter() - wall,
        "warmup_seconds": warmup_seconds,
        "summarisers": summarisers,
        "aggregate": {who: aggregate([h for h in haystacks if h["summariser"] == who], ks) for who in summarisers},
        "haystacks": haystacks,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(res), encoding="utf-8")
    write_json(args.out.with_suffix(".json"), res)
    print(report(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
