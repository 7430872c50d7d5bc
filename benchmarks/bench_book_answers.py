"""`fragrel ask` on a whole book: answer accuracy, evidence and the time of a first and a second question.

Questions in the reader's words with accepted short answers (``benchmarks/data/book_questions.json``); Jane Eyre
is dev (choose here), Robinson Crusoe held out (``--part heldout``, run once). Three parts, one run:

1. **Retrieval**: hit@5 / hit@10 / MRR of the CLI's default (hybrid, preset general, 500-word fragments) with
   the whole book embedded (today) and with the staged score (BM25 over the book, MiniLM only for its
   ``--candidates`` best fragments per question), and how many fragments each embeds.
2. **Answers** on the top-5 fragments: today's `fragrel ask` (the five fragments to SmolLM2, free answer; today's
   retrieval) beside the grounded answer (:func:`~fragrel_integrations.core.grounding.grounded_answer`, staged
   retrieval): constrained to a quote of the evidence (llama.cpp grammar) and free. Right = the printed answer
   holds an accepted answer; "not stated" = the grounded answer printed evidence and no answer.
3. **Speed**: the CLI as a user runs it (a fresh process, an empty cache folder): a first question on the book,
   a second one, and the first again; today's path (``--dense-candidates 0``) the same way.

    python benchmarks/bench_book_answers.py                  # dev: Jane Eyre
    python benchmarks/bench_book_answers.py --part heldout   # once, after choosing on dev
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    BENCH_DIR,
    REPO_ROOT,
    CachedEmbedder,
    book_parser,
    default_data_dir,
    loadavg,
    machine_info,
    save_results,
)
from bench_book_questions import first_rank, gold_fragments

from fragrel_integrations import ContextRelation, FragRelIndex
from fragrel_integrations.core.grounding import grounded_answer
from fragrel_integrations.core.presets import preset
from fragrel_integrations.core.staged import StagedHybridScorer
from fragrel_integrations.core.token_budget import fit_texts
from fragrel_integrations.core.windows import window_words_for
from fragrel_integrations.models.tokens import count_message_tokens


def norm(text: str) -> str:
    return " ".join(text.split()).lower()


def right(answer: str | None, accepted: list[str]) -> bool:
    return answer is not None and any(a.lower() in norm(answer) for a in accepted)


def rank_row(name: str, index: FragRelIndex, questions: list[dict], golds: list[set[int]]) -> dict:
    ranks = [first_rank(index.scores(q["question"])[2], g) for q, g in zip(questions, golds, strict=True)]
    return {
        "setting": name,
        "hit@5": sum(r <= 5 for r in ranks),
        "hit@10": sum(r <= 10 for r in ranks),
        "mrr": float(np.mean([1 / r for r in ranks])),
        "ranks": ranks,
    }


#: The instruction `fragrel ask` gave the model before grounded answers (today's path, the baseline).
PLAIN_PROMPT = "Answer the question using only the context. Reply in one short sentence."


def plain_messages(question: str, contexts: list[str]) -> list[dict[str, str]]:
    context = "\n\n".join(c.strip() for c in contexts)
    return [
        {"role": "system", "content": PLAIN_PROMPT},
        {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {question}"},
    ]


def plain_answer(model, question: str, hits, max_tokens: int = 128) -> str:
    """What `fragrel ask` printed before grounded answers: the fragments that fit, in reading order, free reply."""
    window = model.context_window
    room = window - max_tokens - count_message_tokens(model, plain_messages(question, [])) - 16
    kept = fit_texts([h.fragment.text for h in hits], room, model)
    used = hits[: len(kept)]
    order = sorted(range(len(used)), key=lambda i: used[i].fragment.position)
    return model.invoke(plain_messages(question, [kept[i] for i in order]), temperature=0.0, max_tokens=max_tokens)


def cli_time(book: Path, question: str, cache: Path, *extra: str) -> dict:
    """Wall seconds, CPU seconds (user + system of the child: what a busy shared machine does not inflate) and
    the load average of one `fragrel ask` run in a fresh process."""
    cmd = [sys.executable, "-m", "fragrel_integrations.cli", "ask", str(book), question, "--quiet", "--json",
           "--cache-dir", str(cache), *extra]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000, check=False)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": seconds, "cpu": cpu, "loadavg": loadavg(), "answer": json.loads(done.stdout)["answer"]}


def run(args: argparse.Namespace) -> dict:
    spec = json.loads((BENCH_DIR / "data" / "book_questions.json").read_text())
    book = (args.data or default_data_dir()) / "babilong" / "noise_books" / spec["books"][args.part]
    questions = spec[args.part]
    general = preset("general")
    emb = CachedEmbedder(f"books_{args.part}")
    window = window_words_for(emb.model)
    result: dict = {"part": args.part, "book": book.name, "questions": len(questions), "window_words": window}
    result["modes"] = args.modes if args.answers else []
    load0 = loadavg()

    # 1. retrieval: today's default (whole book embedded) and the staged score
    bm25_only = FragRelIndex.from_texts(
        [book.read_text(encoding="utf-8")], doc_ids=[book.name], fragment_words=general.fragment_words,
        scorer="bm25", show_progress=False,
    )  # fmt: skip
    fragments = bm25_only.fragments
    golds = [gold_fragments(bm25_only, q["phrases"]) for q in questions]
    texts = [f.text for f in fragments]
    rows = []
    full = None
    if args.full:  # every window of the book embedded (slow on a new book: what the staged score avoids)
        full = FragRelIndex(
            fragments, window_words=window, embedder=emb, show_progress=False, scorer="hybrid",
            relation=ContextRelation(general.w_rel), alpha=general.alpha, top_m=general.top_m,
        )  # fmt: skip
        rows.append({**rank_row("whole book embedded (today)", full, questions, golds), "embedded": len(full)})
    staged: dict[int, FragRelIndex] = {}
    for n in args.candidates:
        scorer = StagedHybridScorer(texts, emb, candidates=n, window_words=window)
        staged[n] = FragRelIndex(
            fragments, scorer=scorer, relation=ContextRelation(general.w_rel), alpha=general.alpha,
            top_m=general.top_m, show_progress=False,
        )  # fmt: skip
        row = rank_row(f"staged, {n} candidates", staged[n], questions, golds)
        rows.append({**row, "embedded": len(scorer.vectors)})
    result["fragments"] = len(fragments)
    result["retrieval"] = rows
    chosen = staged[args.answer_candidates]
    result["today_retrieval"] = "whole book embedded" if full is not None else f"staged, {args.answer_candidates}"

    # 2. evidence and answers
    if args.answers:
        if args.runtime == "llamacpp":
            from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

            model = LlamaCppChatModel(n_ctx=4096, seed=0)
        else:
            from fragrel_integrations.models.transformers_chat import TransformersChatModel

            model = TransformersChatModel(context_window=4096, seed=0)
        result["runtime"] = type(model).__name__
        answers = []
        for q, gold in list(zip(questions, golds, strict=True))[: args.limit]:
            accepted = q["answers"]
            hits = chosen.retrieve(q["question"], k=5)
            old_hits = (full or chosen).retrieve(q["question"], k=5)
            row = {
                "question": q["question"],
                "answers": accepted,
                "gold_in_top5": any(fragments.index(h.fragment) in gold for h in hits),
            }
            t0 = time.perf_counter()
            row["today"] = plain_answer(model, q["question"], old_hits)
            row["today_seconds"] = time.perf_counter() - t0
            row["today_right"] = right(row["today"], accepted)
            for mode in args.modes:
                constrain = mode == "quote"
                t0 = time.perf_counter()
                g = grounded_answer(
                    q["question"], hits, model, embedder=emb, max_sentences=args.sentences, constrain=constrain
                )
                row[mode] = g.as_dict()
                row[f"{mode}_seconds"] = time.perf_counter() - t0
                row[f"{mode}_outcome"] = (
                    "not stated" if g.text is None else ("right" if right(g.text, accepted) else "wrong")
                )
                row["evidence_holds_answer"] = any(
                    right(e.quote, accepted) or any(norm(p) in norm(e.quote) for p in q["phrases"]) for e in g.evidence
                )
            answers.append(row)
            print(f"{q['question']}\n  today: {row['today'][:100]!r} {row['today_right']}", flush=True)
            for mode in args.modes:
                print(f"  {mode}: {row[mode]['answer']!r} {row[mode + '_outcome']} (reply {row[mode]['reply'][:80]!r})")
        result["answers"] = answers
        model.close()

    # 3. speed of the CLI: first and second question on a new book, staged and today's path
    if args.timing:
        q1, q2 = questions[0]["question"], questions[1]["question"]
        timing = {}
        paths = {"staged": (), "today": ("--dense-candidates", "0")}
        for name, extra in ((p, paths[p]) for p in args.timing_paths):
            with tempfile.TemporaryDirectory() as cache:
                runs = {label: cli_time(book, q, Path(cache), *extra)
                        for label, q in (("first", q1), ("second", q2), ("first again", q1))
                        if label != "first again" or name == "staged"}  # fmt: skip
            for unit in ("wall", "cpu"):
                runs[f"ratio_{unit}"] = runs["first"][unit] / runs["second"][unit]
                if "first again" in runs:  # today's path: the second question already reads the whole cache
                    runs[f"ratio_again_{unit}"] = runs["first"][unit] / runs["first again"][unit]
            timing[name] = runs
            print(name, json.dumps(runs), flush=True)
        result["timing"] = {"questions": [q1, q2], **timing}
    result["machine"] = machine_info(load0)
    return result


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(result: dict) -> str:
    n = result["questions"]
    lines = [f"{result['book']}: {result['fragments']} fragments, {n} questions ({result['part']})", ""]
    lines += ["| retrieval | fragments embedded | hit@5 | hit@10 | MRR |", "|---|---|---|---|---|"]
    for r in result["retrieval"]:
        lines.append(f"| {r['setting']} | {r['embedded']} | {r['hit@5']}/{n} | {r['hit@10']}/{n} | {r['mrr']:.3f} |")
    if "answers" in result:
        a = result["answers"]
        m = len(a)
        count = lambda key, value: sum(r.get(key) == value for r in a)  # noqa: E731
        lines += ["", f"{len(a)} questions answered; today's answers read the top 5 of: {result['today_retrieval']}"]
        lines += ["", "| answer | right | wrong | not stated | mean seconds |", "|---|---|---|---|---|"]
        seconds = np.mean([r["today_seconds"] for r in a])
        lines.append(
            f"| today: 5 fragments, free reply | {count('today_right', True)}/{m} | "
            f"{count('today_right', False)}/{m} | - | {seconds:.1f} |"
        )
        for mode in result["modes"]:
            outcomes = " | ".join(f"{count(f'{mode}_outcome', o)}/{m}" for o in ("right", "wrong", "not stated"))
            seconds = np.mean([r[f"{mode}_seconds"] for r in a])
            lines.append(f"| grounded, {mode} | {outcomes} | {seconds:.1f} |")
        lines.append(f"\nanswer passage in the top 5: {count('gold_in_top5', True)}/{m}; evidence sentences hold the "
                     f"answer: {count('evidence_holds_answer', True)}/{m}")  # fmt: skip
    if "timing" in result:
        t = result["timing"]
        lines += ["", "| CLI path | seconds | first question | second | first again | first / second | "
                  "first / first again |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for name in (p for p in ("staged", "today") if p in t):
            r = t[name]
            for unit in ("wall", "cpu"):
                lines.append(
                    f"| {name} | {unit} | {r['first'][unit]:.1f} | {r['second'][unit]:.1f} | "
                    f"{_num(r.get('first again', {}).get(unit), 1)} | {r[f'ratio_{unit}']:.2f} | "
                    f"{_num(r.get(f'ratio_again_{unit}'), 2)} |"
                )
            loads = "; ".join(r[k]["loadavg"] for k in ("first", "second", "first again") if k in r)
            lines.append(f"| {name} | load average at each run | {loads} |")
    return "\n".join(lines)


def main() -> None:
    ap = book_parser(__doc__)
    ap.add_argument("--candidates", type=lambda s: [int(x) for x in s.split(",")], default=[16, 32, 48, 64, 96])
    ap.add_argument("--answer-candidates", type=int, default=32, help="the staged setting the answers use")
    ap.add_argument("--sentences", type=int, default=3, help="evidence sentences given to the model")
    ap.add_argument(
        "--modes",
        type=lambda s: s.split(","),
        default=["free", "quote"],
        help="grounded answer modes: free (the model answers freely), quote (llama.cpp grammar: a quote)",
    )
    ap.add_argument("--no-answers", dest="answers", action="store_false")
    ap.add_argument(
        "--timing-paths",
        type=lambda s: s.split(","),
        default=["staged", "today"],
        help="CLI paths to time: staged (the default), today (--dense-candidates 0: the whole book embedded first)",
    )
    ap.add_argument("--no-full", dest="full", action="store_false", help="skip embedding the whole book")
    ap.add_argument("--limit", type=int, default=None, help="answer only the first N questions")
    ap.add_argument(
        "--runtime", choices=["transformers", "llamacpp"], default="transformers", help="the embedded LLM runtime"
    )
    ap.add_argument("--no-timing", dest="timing", action="store_false")
    ap.add_argument("--out", default=None, help="results file stem (default book_answers_<part>)")
    args = ap.parse_args()
    if args.answer_candidates not in args.candidates:
        args.candidates.append(args.answer_candidates)
    result = run(args)
    result["command"] = "python benchmarks/bench_book_answers.py " + " ".join(sys.argv[1:])
    save_results(args.out or f"book_answers_{args.part}", result, report)


if __name__ == "__main__":
    main()
