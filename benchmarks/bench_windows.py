"""Long fragments and the embedder's input window: cut (what the model reads) vs sub-windows (max/mean/centroid).

all-MiniLM-L6-v2 reads 256 word pieces (~190 words); the paper's 500-word fragments are mostly cut off. This
compares, on 500-word fragments (dev data only):

- bAbI haystacks (qa1-qa3, dev questions, Robinson Crusoe filler, ``--words`` words each) joined into one text
  and split into word fragments; gold = the fragments holding a supporting fact; recall@3/5;
- the README question on Robinson Crusoe: rank of the fragment where Friday is named.

Independent scores: dense (cut = the model's own truncation; max/mean of the 152-word sub-window cosines;
centroid = cosine with the normalised mean window vector), BM25, hybrid (0.5 min-max BM25 + 0.5 min-max dense);
then the context relation of the presets (plain = alpha 0, story, haystack).

    python benchmarks/bench_windows.py --questions 20 --words 8000
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import RESULTS_DIR, CachedEmbedder, default_data_dir, load_babilong

from fragrel_integrations import ContextRelation, Fragment, FragRelIndex
from fragrel_integrations.core.relation_aware import environment_from_sums
from fragrel_integrations.core.scorers import BM25Scorer, minmax

README_QUESTION = "What name did I give the savage I rescued?"
README_NEEDLE = "his name should be Friday"
SETTINGS = {"plain": (0.3, 0.0), "story": (0.3, 0.5), "haystack": (0.9, 0.1)}


def dense_variants(fragments: list[Fragment], emb: CachedEmbedder, query: str) -> dict[str, np.ndarray]:
    """Dense independent scores of every fragment: cut, and max/mean/centroid over 152-word windows."""
    win = FragRelIndex(fragments, embedder=emb, window_words=152, alpha=0.0, show_progress=False)
    cut = FragRelIndex(fragments, embedder=emb, window_words=None, alpha=0.0, show_progress=False)
    q = emb.embed_query(query)
    q = q / np.linalg.norm(q)
    sims, off = win.window_embeddings @ q, win.window_offsets
    counts = np.diff(np.append(off, len(sims)))
    return {
        "cut": cut.embeddings @ q,
        "max": np.maximum.reduceat(sims, off),
        "mean": np.add.reduceat(sims, off) / counts,
        "centroid": win.embeddings @ q,
    }


def all_scores(fragments: list[Fragment], emb: CachedEmbedder, query: str) -> dict[tuple[str, str], np.ndarray]:
    """``(setting, scorer) -> s_rel`` for every preset setting and independent score."""
    dense = dense_variants(fragments, emb, query)
    bm = minmax(BM25Scorer([f.text for f in fragments])(query))
    layout = FragRelIndex(fragments, scorer="bm25").layout
    out = {}
    for setting, (w_rel, alpha) in SETTINGS.items():
        prepared = ContextRelation(w_rel).prepare(layout)
        bases = {"bm25": bm} | {f"dense-{k}": v for k, v in dense.items()}
        bases |= {f"hybrid-{k}": 0.5 * bm + 0.5 * minmax(v) for k, v in dense.items()}
        for name, s in bases.items():
            out[(setting, name)] = s + alpha * environment_from_sums(*prepared.sums(s))
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--questions", type=int, default=20, help="dev questions per bAbI task (<= 100)")
    p.add_argument("--words", type=int, default=8000, help="words per haystack")
    p.add_argument("--fragment-words", type=int, default=500)
    args = p.parse_args(argv)
    fw = args.fragment_words
    emb = CachedEmbedder("windows_babi")
    recall: dict[str, list[float]] = {}
    ds = load_babilong(args.data, words=args.words, questions=range(0, args.questions))
    for corpus in ds.corpora:
        query = corpus.queries[0]
        words: list[str] = []
        gold_words: set[int] = set()
        for i, f in enumerate(corpus.fragments):
            w = f.text.split()
            if i in query.gold:
                gold_words.update(range(len(words), len(words) + len(w)))
            words += w
        starts = range(0, len(words), fw)
        fragments = [Fragment(" ".join(words[s : s + fw]), corpus.name, p) for p, s in enumerate(starts)]
        gold = {p for p, s in enumerate(starts) if gold_words & set(range(s, s + fw))}
        for (setting, scorer), s in all_scores(fragments, emb, query.text).items():
            ranking = np.argsort(-s, kind="stable")
            for k in (3, 5):
                hit = len(gold & set(ranking[:k].tolist())) / len(gold)
                recall.setdefault(f"{setting}/{scorer}/R@{k}", []).append(hit)
    book = (args.data / "babilong" / "noise_books" / "Robinson_Crusoe_pg521.txt").read_text(encoding="utf-8")
    fragments = FragRelIndex.from_texts([book], fragment_words=fw, scorer="bm25").fragments
    gold_i = next(i for i, f in enumerate(fragments) if README_NEEDLE in f.text)
    readme = {
        f"{setting}/{scorer}": int((s > s[gold_i]).sum()) + 1
        for (setting, scorer), s in all_scores(fragments, CachedEmbedder("windows_book"), README_QUESTION).items()
    }
    result = {
        "babi": {k: round(100 * float(np.mean(v)), 1) for k, v in recall.items()},
        "babi_haystacks": len(ds.corpora),
        "readme_rank": readme,
        "settings": vars(args) | {"data": str(args.data)},
    }
    lines = [
        f"# Sub-windows vs cut ({fw}-word fragments)",
        "",
        f"bAbI qa1-qa3 dev questions 0-{args.questions - 1}, {len(ds.corpora)} haystacks of {args.words} words; "
        "README question: rank of the Friday-naming fragment (1 = first).",
        "",
        "| setting | score | R@3 | R@5 | README rank |",
        "|---|---|---|---|---|",
    ]
    for setting in SETTINGS:
        for scorer in sorted({k.split("/")[1] for k in readme}):
            r3, r5 = result["babi"][f"{setting}/{scorer}/R@3"], result["babi"][f"{setting}/{scorer}/R@5"]
            lines.append(f"| {setting} | {scorer} | {r3} | {r5} | {readme[f'{setting}/{scorer}']} |")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "windows.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (RESULTS_DIR / "windows.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
