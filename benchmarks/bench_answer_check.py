"""The support check of grounded answers before and after issue 34, on the book questions with the embedded models.

For each question: the staged hybrid retrieval of ``fragrel ask`` (top 5 fragments), the evidence sentences of
:func:`~fragrel_integrations.core.grounding.select_evidence` (3, MiniLM), ONE free reply of SmolLM2-135M to
:func:`~core.grounding.answer_messages` (temperature 0, 48 tokens, as ``grounded_answer``), then
both checks on that same reply: the check before issue 34 (:func:`word_overlap_check`, kept here as the baseline:
at least half the reply's new words anywhere in the evidence, every name and number among them) and the span
check (:func:`~core.grounding.answer_span`). Outcome per check: right (the printed answer holds
an accepted answer), wrong (printed, holds none) or "not stated". Evidence hit: an accepted answer or the gold
phrase in a quoted sentence, for the bounded evidence (BM25 first, ``MAX_EMBEDDED_SENTENCES`` embedded) and for
every sentence embedded (the selection before issue 34), with the number of sentences each embedded.

    python benchmarks/bench_answer_check.py --part dev                      # the transformers runtime
    python benchmarks/bench_answer_check.py --part dev --runtime llamacpp   # the runtime of the stored numbers
"""

from __future__ import annotations

import re
import sys
import time

from _common import CachedEmbedder, book_parser, default_data_dir, loadavg, machine_info, save_results
from bench_book_answers import BENCH_DIR, norm, right
from bench_book_questions import gold_fragments

from fragrel_integrations import ContextRelation, FragRelIndex
from fragrel_integrations.core import grounding as core_answer
from fragrel_integrations.core.grounding import answer_messages, answer_span, select_evidence
from fragrel_integrations.core.presets import preset
from fragrel_integrations.core.staged import StagedHybridScorer
from fragrel_integrations.core.windows import window_words_for

_WORD = re.compile(r"\w+")
_LEAD = re.compile(r"^(?:the\s+)?answer\b(?:\s+to\s+(?:this|the)\s+question)?(?:\s+is)?\s*[:,-]?\s*", re.IGNORECASE)
_FUNCTION = frozenset(
    """a about above after again against all am an and any are as at be been before being below between both but by
    can could did do does doing down during each few for from further had has have having he her here hers herself
    him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves also called named name s t
    answer question text passage context says said stated state mentioned""".split()  # noqa: SIM905
)


def _stem(token: str) -> str:
    for end in ("'s", "’s", "es", "s"):
        if token.endswith(end) and len(token) - len(end) >= 3:
            return token[: -len(end)]
    return token


def word_overlap_check(reply: str, evidence: list[str], question: str) -> str | None:
    """The check before issue 34 (the baseline): the printed text (first line, leading "The answer is" off) when at
    least half its words that are not function or question words occur anywhere in the evidence and every name and
    number among them does; else None."""
    text = reply.strip().splitlines()[0] if reply.strip() else ""
    text = _LEAD.sub("", text.strip()).strip().strip("\"'“”‘’ ").strip()
    asked = {_stem(t) for t in _WORD.findall(question.lower())}
    tokens = _WORD.findall(text)
    words = {_stem(t.lower()) for t in tokens if t.lower() not in _FUNCTION} - asked
    if not words:
        return None
    names = {_stem(t.lower()) for i, t in enumerate(tokens) if (i and t[0].isupper()) or any(c.isdigit() for c in t)}
    found = words & {_stem(t) for s in evidence for t in _WORD.findall(s.lower())}
    return None if 2 * len(found) < len(words) or not (names & words) <= found else text


class Counting:
    """An embedder wrapper that counts the texts embedded."""

    def __init__(self, inner: CachedEmbedder) -> None:
        self.inner, self.embedded = inner, 0

    def embed_documents(self, texts):
        self.embedded += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def outcome(text: str | None, accepted: list[str]) -> str:
    return "not stated" if text is None else ("right" if right(text, accepted) else "wrong")


def run(args) -> dict:
    import json

    spec = json.loads((BENCH_DIR / "data" / "book_questions.json").read_text())
    book = (args.data or default_data_dir()) / "babilong" / "noise_books" / spec["books"][args.part]
    questions = spec[args.part][: args.limit]
    general = preset("general")
    emb = CachedEmbedder(f"books_{args.part}")
    load0 = loadavg()
    bm25_only = FragRelIndex.from_texts(
        [book.read_text(encoding="utf-8")], doc_ids=[book.name], fragment_words=general.fragment_words,
        scorer="bm25", show_progress=False,
    )  # fmt: skip
    fragments = bm25_only.fragments
    scorer = StagedHybridScorer(
        [f.text for f in fragments], emb, candidates=32, window_words=window_words_for(emb.model)
    )
    index = FragRelIndex(
        fragments, scorer=scorer, relation=ContextRelation(general.w_rel), alpha=general.alpha,
        top_m=general.top_m, show_progress=False,
    )  # fmt: skip
    if args.runtime == "llamacpp":
        from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

        model = LlamaCppChatModel(n_ctx=4096, seed=0)
    else:
        from fragrel_integrations.models.transformers_chat import TransformersChatModel

        model = TransformersChatModel(context_window=4096, seed=0)
    rows = []
    for q in questions:
        accepted, question = q["answers"], q["question"]
        gold = gold_fragments(bm25_only, q["phrases"])
        hits = index.retrieve(question, k=5)
        counted = Counting(emb)
        evidence = select_evidence(question, hits, embedder=counted, max_sentences=3)
        bounded_embedded, counted.embedded = counted.embedded, 0
        bound = core_answer.MAX_EMBEDDED_SENTENCES
        core_answer.MAX_EMBEDDED_SENTENCES = 10**9  # every sentence embedded: the selection before issue 34
        try:
            unbounded = select_evidence(question, hits, embedder=counted, max_sentences=3)
        finally:
            core_answer.MAX_EMBEDDED_SENTENCES = bound
        quotes = [e.quote for e in evidence]

        def holds(quoted: list[str], q=q, accepted=accepted) -> bool:
            return any(right(s, accepted) or any(norm(p) in norm(s) for p in q["phrases"]) for s in quoted)

        t0 = time.perf_counter()
        reply = model.invoke(answer_messages(question, quotes), temperature=0.0, max_tokens=48)
        seconds = time.perf_counter() - t0
        span = answer_span(reply, quotes, question)
        new_text = None if span is None else quotes[span[0]][span[1] : span[2]]
        old_text = word_overlap_check(reply, quotes, question)
        row = {
            "question": question,
            "answers": accepted,
            "gold_in_top5": any(fragments.index(h.fragment) in gold for h in hits),
            "evidence_hit": holds(quotes),
            "evidence_hit_all_embedded": holds([e.quote for e in unbounded]),
            "sentences_embedded": bounded_embedded,
            "sentences_embedded_all": counted.embedded,
            "reply": reply,
            "reply_seconds": seconds,
            "before": {"answer": old_text, "outcome": outcome(old_text, accepted)},
            "after": {"answer": new_text, "outcome": outcome(new_text, accepted)},
        }
        rows.append(row)
        print(f"{question}\n  reply {reply[:90]!r}: before {row['before']['outcome']}, after {row['after']['outcome']}",
              file=sys.stderr, flush=True)  # fmt: skip
    model.close()
    return {
        "part": args.part,
        "book": book.name,
        "questions": len(questions),
        "rows": rows,
        "runtime": type(model).__name__,
        "machine": machine_info(load0),
    }


def report(result: dict) -> str:
    rows, n = result["rows"], result["questions"]
    lines = [
        f"Part {result['part']} ({result['book']}, {n} questions), SmolLM2-135M "
        f"({result.get('runtime', 'LlamaCppChatModel')}) free reply to the prompt "
        f"{result.get('prompt')!r}, one run; the same reply judged by both checks.",
        "",
        "| check | right | wrong (printed) | not stated |",
        "|---|---|---|---|",
    ]
    for key, name in (("before", "word overlap (before issue 34)"), ("after", "span of one sentence (issue 34)")):
        counts = [sum(r[key]["outcome"] == o for r in rows) for o in ("right", "wrong", "not stated")]
        lines.append(f"| {name} | {counts[0]}/{n} | {counts[1]}/{n} | {counts[2]}/{n} |")
    embedded = [r["sentences_embedded"] for r in rows]
    embedded_all = [r["sentences_embedded_all"] for r in rows]
    lines += [
        "",
        "| evidence (3 sentences of the top 5 fragments) | evidence hit | sentences embedded per question (max) |",
        "|---|---|---|",
        f"| every sentence embedded (before) | {sum(r['evidence_hit_all_embedded'] for r in rows)}/{n} | "
        f"{max(embedded_all)} |",
        f"| BM25 first, {core_answer.MAX_EMBEDDED_SENTENCES} embedded (issue 34) | "
        f"{sum(r['evidence_hit'] for r in rows)}/{n} | "
        f"{max(embedded)} |",
        "",
        f"Answer passage among the top 5 fragments: {sum(r['gold_in_top5'] for r in rows)}/{n}. Printed answers:",
        "",
    ]
    for r in rows:
        if r["before"]["answer"] is not None or r["after"]["answer"] is not None:
            lines.append(
                f"- {r['question']} before: {r['before']['answer']!r} ({r['before']['outcome']}); after: "
                f"{r['after']['answer']!r} ({r['after']['outcome']})"
            )
    m = result["machine"]
    lines += ["", f"Machine: {m['cpus']} CPUs, load {m['loadavg_start']} -> {m['loadavg_end']}."]
    return "\n".join(lines)


def main() -> None:
    ap = book_parser(__doc__)
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions")
    ap.add_argument(
        "--runtime", choices=["transformers", "llamacpp"], default="transformers", help="the embedded LLM runtime"
    )
    ap.add_argument("--prompt", default=None, help="another system prompt (default: core.grounding.ANSWER_PROMPT)")
    ap.add_argument("--stem", default=None, help="results file name (default: answer_check_<part>)")
    args = ap.parse_args()
    if args.prompt is not None:
        core_answer.ANSWER_PROMPT = args.prompt  # answer_messages reads it at each call
    result = run(args)
    result["prompt"] = core_answer.ANSWER_PROMPT
    result["command"] = "python benchmarks/" + " ".join(["bench_answer_check.py", *sys.argv[1:]])
    save_results(args.stem or f"answer_check_{args.part}", result, report)


if __name__ == "__main__":
    main()
