"""The CLI's main job: questions about a whole book, answered by `fragrel retrieve FILE QUESTION`.

Questions in the reader's words (``benchmarks/data/book_questions.json``) about the two public-domain books in
``../shared/data/babilong/noise_books``; gold = the 500-word fragments that hold a quoted phrase of the answer
passage. Jane Eyre is the dev part (settings are chosen on it); Robinson Crusoe, whose first question is the
README's, is held out (``--part heldout``, report once). Every row is one independent score (dense MiniLM over
152-word sub-windows, BM25, hybrid = 0.5 min-max each) with one relation setting; ``plain`` (alpha 0) is the
baseline without FragRel. Reported: questions answered in the top 5 (hit@5), in the top 10, and the mean
reciprocal rank of the first gold fragment.

    python benchmarks/bench_book_questions.py                 # dev: Jane Eyre
    python benchmarks/bench_book_questions.py --part heldout  # once, after choosing on dev
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import BENCH_DIR, RESULTS_DIR, CachedEmbedder, default_data_dir, loadavg, machine_info, write_json

from fragrel_integrations import ContextRelation, FragRelIndex
from fragrel_integrations.core.presets import PRESETS

#: name -> (w_rel, alpha, top_m): the presets, the baseline, and the neighbours of the presets.
SETTINGS: dict[str, tuple[float, float, int | None]] = {
    "plain (alpha 0)": (0.3, 0.0, None),
    **{f"preset {p.name}": (p.w_rel, p.alpha, p.top_m) for p in PRESETS.values()},
    "w0.3 a1.0 all": (0.3, 1.0, None),
    "w0.3 a1.0 top10": (0.3, 1.0, 10),
    "w0.3 a0.5 top10": (0.3, 0.5, 10),
    "w0.5 a0.5 all": (0.5, 0.5, None),
    "w0.5 a1.0 top10": (0.5, 1.0, 10),
    "w0.2 a0.5 top10": (0.2, 0.5, 10),
}
SCORERS = ("dense", "bm25", "hybrid")


def gold_fragments(index: FragRelIndex, phrases: list[str]) -> set[int]:
    """Fragments whose whitespace-normalised text holds one of ``phrases``."""
    texts = [" ".join(f.text.split()) for f in index.fragments]
    return {i for i, t in enumerate(texts) if any(p in t for p in phrases)}


def first_rank(s_rel: np.ndarray, gold: set[int]) -> int:
    order = np.argsort(-s_rel, kind="stable")
    return 1 + min(int(np.flatnonzero(order == g)[0]) for g in gold)


def run(part: str, data_dir: Path, fragment_words: int) -> dict:
    spec = json.loads((BENCH_DIR / "data" / "book_questions.json").read_text())
    book = data_dir / "babilong" / "noise_books" / spec["books"][part]
    emb = CachedEmbedder(f"books_{part}")
    from fragrel_integrations.core.windows import window_words_for

    window = window_words_for(emb.model)
    t0 = time.perf_counter()
    base = FragRelIndex.from_texts(
        [book.read_text(encoding="utf-8")],
        doc_ids=[book.name],
        fragment_words=fragment_words,
        window_words=window,
        embedder=emb,
        show_progress=False,
    )
    build_s = time.perf_counter() - t0
    questions = spec[part]
    golds = [gold_fragments(base, q["phrases"]) for q in questions]
    missing = [q["question"] for q, g in zip(questions, golds, strict=True) if not g]
    if missing:
        raise ValueError(f"no fragment holds the phrases of {missing}")
    windows = (base.window_embeddings, base.window_offsets)
    rows = []
    for scorer in SCORERS:
        for name, (w_rel, alpha, top_m) in SETTINGS.items():
            index = FragRelIndex(
                base.fragments,
                embedder=emb,
                window_embeddings=windows,
                scorer=scorer,
                relation=ContextRelation(w_rel),
                alpha=alpha,
                top_m=top_m,
                show_progress=False,
            )
            ranks = [first_rank(index.scores(q["question"])[2], g) for q, g in zip(questions, golds, strict=True)]
            rows.append(
                {
                    "scorer": scorer,
                    "setting": name,
                    "hit@5": sum(r <= 5 for r in ranks),
                    "hit@10": sum(r <= 10 for r in ranks),
                    "mrr": float(np.mean([1 / r for r in ranks])),
                    "ranks": ranks,
                }
            )
    return {
        "part": part,
        "book": book.name,
        "fragments": len(base),
        "questions": len(questions),
        "window_words": window,
        "fragment_words": fragment_words,
        "build_seconds": build_s,
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--fragment-words", type=int, default=500)
    ap.add_argument("--data", type=Path, default=None)
    args = ap.parse_args()
    load0 = loadavg()
    result = run(args.part, args.data or default_data_dir(), args.fragment_words)
    result["machine"] = machine_info(load0)
    n = result["questions"]
    print(f"{result['book']}: {result['fragments']} fragments, {n} questions ({args.part})")
    print("| scorer | setting | hit@5 | hit@10 | MRR | first gold rank per question |\n|---|---|---|---|---|---|")
    for r in result["rows"]:
        ranks = " ".join(map(str, r["ranks"]))
        print(f"| {r['scorer']} | {r['setting']} | {r['hit@5']}/{n} | {r['hit@10']}/{n} | {r['mrr']:.3f} | {ranks} |")
    write_json(RESULTS_DIR / f"book_questions_{args.part}_{args.fragment_words}.json", result)


if __name__ == "__main__":
    main()
