"""The README's LlamaIndex query engine on a whole book: LlamaIndex's default response synthesizer beside
``GroundedSynthesizer``, on the same retrieved nodes, in one run.

The engine as the README builds it: ``VectorStoreIndex`` over the book (``SentenceSplitter(chunk_size=256)``,
``PositionTagger``, the embedded MiniLM), ``similarity_top_k=50``, ``FragRelPostprocessor(top_n=5)``; the LLM is
the embedded SmolLM2-135M (``FragRelLLM``, temperature 0, 48 new tokens). For each question of
``benchmarks/data/book_questions.json`` the five nodes are retrieved once and both synthesizers answer from them.
Right = the printed reply holds an accepted answer; for the grounded one, "not stated" = it printed evidence and
no answer. "Wrong" is what a reader is misled by.

    python benchmarks/bench_llama_index_answers.py                  # dev: Jane Eyre
    python benchmarks/bench_llama_index_answers.py --part heldout   # once
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from _common import BENCH_DIR, book_parser, default_data_dir, loadavg, machine_info, save_results
from bench_book_answers import right


def run(args: argparse.Namespace) -> dict:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.response_synthesizers import get_response_synthesizer

    from fragrel_integrations.llama_index import (
        FragRelLLM,
        FragRelPostprocessor,
        GroundedSynthesizer,
        MiniLMEmbedding,
        PositionTagger,
    )
    from fragrel_integrations.models.transformers_chat import default_chat_model

    spec = json.loads((BENCH_DIR / "data" / "book_questions.json").read_text())
    book = (args.data or default_data_dir()) / "babilong" / "noise_books" / spec["books"][args.part]
    questions = spec[args.part][: args.limit]
    start_load = loadavg()
    t0 = time.perf_counter()
    embed_model = MiniLMEmbedding()
    docs = [Document(text=book.read_text(encoding="utf-8"), id_=book.name)]
    splitter = [SentenceSplitter(chunk_size=256), PositionTagger()]
    index = VectorStoreIndex.from_documents(docs, transformations=splitter, embed_model=embed_model)
    index_seconds = time.perf_counter() - t0
    llm = FragRelLLM(model=default_chat_model(), temperature=0, max_tokens=48)
    retriever = index.as_retriever(similarity_top_k=50)
    postprocessor = FragRelPostprocessor(top_n=5)
    synthesizers = {
        "default": get_response_synthesizer(llm=llm),  # what as_query_engine uses without response_synthesizer
        "grounded": GroundedSynthesizer(llm, embed_model=embed_model),
    }
    rows, seconds = [], {name: 0.0 for name in synthesizers}
    for q in questions:
        nodes = postprocessor.postprocess_nodes(retriever.retrieve(q["question"]), query_str=q["question"])
        row = {"question": q["question"], "answers": q["answers"]}
        for name, synthesizer in synthesizers.items():
            t = time.perf_counter()
            reply = str(synthesizer.synthesize(q["question"], nodes))
            seconds[name] += time.perf_counter() - t
            stated = not reply.startswith("The retrieved text does not state")
            answer = reply.split("\n\nEvidence:")[0] if stated else None
            row[name] = reply
            row[f"{name}_outcome"] = (
                "not stated" if answer is None else ("right" if right(answer, q["answers"]) else "wrong")
            )
        rows.append(row)
    outcomes = {
        name: {o: sum(r[f"{name}_outcome"] == o for r in rows) for o in ("right", "wrong", "not stated")}
        for name in synthesizers
    }
    return {
        "part": args.part,
        "book": book.name,
        "questions": len(rows),
        "nodes": len(index.docstore.docs),
        "index_seconds": index_seconds,
        "answer_seconds": seconds,
        "outcomes": outcomes,
        "rows": rows,
        "machine": machine_info(start_load),
    }


def report(result: dict) -> str:
    n = result["questions"]
    lines = [
        f"{result['book']} ({result['part']}): {n} questions, {result['nodes']} nodes; the README's LlamaIndex engine",
        f"(index built in {result['index_seconds']:.0f} s), the same five nodes per question for both synthesizers.",
        "",
        "| response synthesizer | right | wrong (printed as the answer) | not stated (evidence shown) | answer time |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (("default", "LlamaIndex default (compact)"), ("grounded", "GroundedSynthesizer")):
        o, s = result["outcomes"][name], result["answer_seconds"][name]
        lines.append(f"| {label} | {o['right']}/{n} | {o['wrong']}/{n} | {o['not stated']}/{n} | {s / n:.1f} s |")
    lines += ["", f"Machine: {result['machine']}", "", "| question | default | grounded |", "|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['question']} | {r['default_outcome']} | {r['grounded_outcome']} |")
    return "\n".join(lines)


def main() -> None:
    ap = book_parser(__doc__)
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions")
    args = ap.parse_args()
    result = run(args)
    result["command"] = "python benchmarks/bench_llama_index_answers.py " + " ".join(sys.argv[1:])
    save_results(f"llama_index_answers_{args.part}", result, report)


if __name__ == "__main__":
    main()
