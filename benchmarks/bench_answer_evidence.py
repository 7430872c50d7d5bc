"""Where the answer sentence ranks among the evidence sentences `fragrel ask` chooses from (dev: Jane Eyre).

The CLI's default retrieval (staged hybrid score, 32 candidates, preset general, 500-word fragments) returns the
top 5 fragments; the answer step ranks their sentences and quotes the best 3. "Answer sentence" = a sentence of a
gold fragment (it holds a quoted phrase of the answer passage) that holds an accepted answer. Each ranking is
measured beside today's (hybrid: 0.5 min-max BM25 + 0.5 min-max MiniLM cosine) on the same sentences, same run:

- sentence rankings over the top 5 fragments: hybrid, MiniLM alone, BM25 alone, the hybrid of the sentence and of
  its 3-sentence window, the same plus the fragment's FragRel score (0.2);
- candidate sets for today's ranking: the top 5 fragments, plus the fragment after each, plus before and after.

    python benchmarks/bench_answer_evidence.py               # dev only: this is where answer-step ideas are chosen
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import BENCH_DIR, RESULTS_DIR, CachedEmbedder, default_data_dir, loadavg, machine_info, write_json
from bench_book_questions import gold_fragments

from fragrel_integrations import ContextRelation, FragRelIndex
from fragrel_integrations.core.grounding import split_sentences
from fragrel_integrations.core.presets import preset
from fragrel_integrations.core.scorers import make_scorer, tokenize
from fragrel_integrations.core.staged import StagedHybridScorer
from fragrel_integrations.core.windows import window_words_for

TOP = 5
QUOTED = 3


def minmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


def sentences(fragment_ids: list[int], texts: list[str], scores: dict[int, float]) -> list[dict]:
    out = []
    for f in fragment_ids:
        t = texts[f]
        for a, b in split_sentences(t):
            if tokenize(t[a:b]):
                out.append({"fragment": f, "text": t[a:b], "fragment_score": scores.get(f, 0.0)})
    return out


def rank_of(scores: np.ndarray, good: list[int]) -> int | None:
    if not good:
        return None
    order = list(np.argsort(-scores, kind="stable"))
    return min(order.index(i) for i in good)


def rankings(sents: list[dict], question: str, emb: CachedEmbedder) -> dict[str, np.ndarray]:
    texts = [s["text"] for s in sents]
    q = np.asarray(emb.embed_query(question))
    dense = np.asarray(emb.embed_documents(texts)) @ q
    bm25 = np.asarray(make_scorer("bm25", texts)(question))
    windows = []  # the sentence with its neighbours in the same fragment
    for i, s in enumerate(sents):
        near = range(max(0, i - 1), min(len(sents), i + 2))
        windows.append(" ".join(sents[j]["text"] for j in near if sents[j]["fragment"] == s["fragment"]))
    w_dense = np.asarray(emb.embed_documents(windows)) @ q
    w_bm25 = np.asarray(make_scorer("bm25", windows)(question))
    frag = np.array([s["fragment_score"] for s in sents])
    sent_win = [minmax(bm25), minmax(dense), minmax(w_bm25), minmax(w_dense)]
    return {
        "hybrid (today)": 0.5 * minmax(bm25) + 0.5 * minmax(dense),
        "MiniLM cosine alone": dense,
        "BM25 alone": bm25,
        "hybrid of the sentence and of its 3-sentence window": 0.25 * sum(sent_win),
        "the same + the fragment's FragRel score (0.2)": 0.2 * sum(sent_win) + 0.2 * minmax(frag),
    }


def run(data_dir: Path) -> dict:
    spec = json.loads((BENCH_DIR / "data" / "book_questions.json").read_text())
    book = data_dir / "babilong" / "noise_books" / spec["books"]["dev"]
    questions = spec["dev"]
    load0 = loadavg()
    general = preset("general")
    emb = CachedEmbedder("books_dev")
    lexical = FragRelIndex.from_texts(
        [book.read_text(encoding="utf-8")], doc_ids=[book.name], fragment_words=general.fragment_words,
        scorer="bm25", show_progress=False,
    )  # fmt: skip
    fragments = lexical.fragments
    texts = [f.text for f in fragments]
    scorer = StagedHybridScorer(texts, emb, candidates=32, window_words=window_words_for(emb.model))
    index = FragRelIndex(
        fragments, scorer=scorer, relation=ContextRelation(general.w_rel), alpha=general.alpha,
        top_m=general.top_m, show_progress=False,
    )  # fmt: skip
    candidate_sets: dict[str, Callable[[list[int]], list[int]]] = {
        "top 5 fragments (today)": lambda top: top,
        "+ the fragment after each": lambda top: sorted({*top, *(p + 1 for p in top if p + 1 < len(fragments))}),
        "+ the fragments before and after": lambda top: sorted(
            {*top, *(p + d for p in top for d in (-1, 1) if 0 <= p + d < len(fragments))}
        ),
    }
    rows = []
    for q in questions:
        gold = gold_fragments(lexical, q["phrases"])
        hits = index.retrieve(q["question"], k=TOP)
        top = [fragments.index(h.fragment) for h in hits]
        scores = {fragments.index(h.fragment): h.score for h in hits}

        def good(sents: list[dict], q: dict = q, gold: set[int] = gold) -> list[int]:
            return [
                i for i, s in enumerate(sents)
                if s["fragment"] in gold and any(a.lower() in s["text"].lower() for a in q["answers"])
            ]  # fmt: skip

        sents = sentences(top, texts, scores)
        row = {"question": q["question"], "gold_in_top5": bool(gold & set(top)), "answerable": bool(good(sents))}
        row["rankings"] = {n: rank_of(s, good(sents)) for n, s in rankings(sents, q["question"], emb).items()}
        row["candidates"] = {}
        for name, widen in candidate_sets.items():
            wide = sentences(widen(top), texts, scores)
            row["candidates"][name] = rank_of(rankings(wide, q["question"], emb)["hybrid (today)"], good(wide))
        rows.append(row)
        print(q["question"], json.dumps(row["rankings"]), json.dumps(row["candidates"]), flush=True)
    return {"book": book.name, "questions": len(questions), "rows": rows, "machine": machine_info(load0)}


def count(ranks: list[int | None]) -> str:
    found = [r for r in ranks if r is not None]
    return f"{sum(r == 0 for r in found)} | {sum(r < QUOTED for r in found)} | {sum(r < 5 for r in found)}"


def report(result: dict) -> str:
    rows = result["rows"]
    answerable = [r for r in rows if r["answerable"]]
    lines = [
        "# Answer evidence: where the answer sentence ranks (dev, Jane Eyre)",
        "",
        f"`python benchmarks/bench_answer_evidence.py`; {result['questions']} questions, the CLI's default retrieval "
        f"(top {TOP} fragments); the answer sentence is in the top 5 fragments for {len(answerable)}. Counts: "
        f"the answer sentence first | among the {QUOTED} quoted | in the top 5 sentences.",
        "",
        f"| sentence ranking (sentences of the top 5 fragments; {len(answerable)} answerable questions) "
        "| first | quoted | top 5 |",
        "|---|---|---|---|",
    ]
    for name in answerable[0]["rankings"] if answerable else []:
        lines.append(f"| {name} | {count([r['rankings'][name] for r in answerable])} |")
    lines += ["", f"| candidate sentences, today's hybrid ranking ({len(rows)} questions) | first | quoted | top 5 |"]
    lines.append("|---|---|---|---|")
    for name in rows[0]["candidates"]:
        lines.append(f"| {name} | {count([r['candidates'][name] for r in rows])} |")
    lines += ["", f"Machine: {result['machine']}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.data or default_data_dir())
    write_json(RESULTS_DIR / "answer_evidence_dev.json", result)
    (RESULTS_DIR / "answer_evidence_dev.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
