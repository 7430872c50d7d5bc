"""LLM steps on the embedded offline model, each beside its baseline from the same run.

    python benchmarks/bench_llm_steps.py --steps scm     # (or python benchmarks/bench_scm_activation.py)

The ``scm`` step of ``bench_llm_steps.py`` (kept in its own file; it writes ``llm_steps_scm.md``):

* ``scm`` - SCM activation accuracy on the labelled set ``benchmarks/data/scm_activation.json``: does answering
  a user message need memory of earlier turns? Each item is asked after a LoCoMo dev conversation (its turns are
  the memory, its last turn the flash memory); "memory" items are LoCoMo questions about that conversation,
  "no memory" items self-contained requests written for the set. Gates, all on the same items: the controller
  with the embedded SmolLM2-135M parsing its text reply (the baseline), the same controller deciding by
  P(yes) / (P(yes) + P(no)) of the first reply token, the model-free lexical gate, and the embedding gate
  (max cosine, all-MiniLM-L6-v2, with a stored turn). Thresholds are chosen on the set's dev part and reported
  once on its held-out part.

Data is read from ``../shared/data`` (or ``--data``); nothing is copied into the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_DIR,
    RESULTS_DIR,
    CachedEmbedder,
    default_data_dir,
    load_locomo,
    loadavg,
    machine_info,
    write_json,
)

from fragrel_integrations.core.scm import (
    ACTIVATION_EXAMPLES,
    DEFAULT_ACTIVATION_THRESHOLD,
    DEFAULT_SIMILARITY_THRESHOLD,
    LexicalGate,
    MemoryItem,
    SCMController,
)
from fragrel_integrations.core.scm.gates import NameVocabulary

STEPS = ("scm",)
SCM_SET = BENCH_DIR / "data" / "scm_activation.json"


# --------------------------------------------------------------------------------------------- SCM activation


@dataclass(frozen=True)
class ActivationItem:
    """One labelled message and the conversation it is asked after."""

    id: str
    split: str
    needs_memory: bool
    text: str
    conversation: int


def load_activation_set(data: Path, path: Path = SCM_SET) -> list[ActivationItem]:
    """The labelled set with LoCoMo questions resolved from ``data`` (checked against their stored hashes)."""
    spec = json.loads(path.read_text())
    locomo = json.loads((data / "locomo" / "locomo10.json").read_text())
    items = []
    for it in spec["items"]:
        if "text" in it:
            text = it["text"]
        else:
            text = locomo[it["conversation"]]["qa"][it["qa_index"]]["question"]
            if hashlib.sha256(text.encode()).hexdigest()[:12] != it["sha256_12"]:
                raise ValueError(f"{it['id']}: the LoCoMo question differs from the one the set was built with")
        items.append(ActivationItem(it["id"], it["split"], it["label"] == "memory", text, it["conversation"]))
    return items


def metrics(labels: Sequence[bool], predicted: Sequence[bool]) -> dict[str, float | int]:
    """Accuracy, precision and recall of "needs memory" (precision is 0 when nothing is predicted)."""
    y, p = np.asarray(labels, bool), np.asarray(predicted, bool)
    tp, fp, fn = int((y & p).sum()), int((~y & p).sum()), int((y & ~p).sum())
    return {
        "n": len(y),
        "accuracy": float((y == p).mean()) if len(y) else 0.0,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "yes_rate": float(p.mean()) if len(p) else 0.0,
    }


def best_threshold(labels: Sequence[bool], scores: Sequence[float]) -> float:
    """The threshold (score >= t means yes) with the best accuracy on ``labels``: the middle one of the tied
    best midpoints between sorted distinct scores."""
    s = np.unique(np.asarray(scores, dtype=np.float64))
    cands = np.concatenate([[s[0] - 1e-6], (s[:-1] + s[1:]) / 2, [s[-1] + 1e-6]])
    y = np.asarray(labels, bool)
    acc = np.array([((np.asarray(scores) >= t) == y).mean() for t in cands])
    best = cands[np.flatnonzero(acc == acc.max())]
    return float(best[len(best) // 2])


def scm_activation(
    data: Path, *, n_ctx: int = 2048, runtime: str = "transformers", progress: Callable[[str], None] | None = None
) -> dict:
    """Every gate on every item of the set, on the embedded model's ``runtime``; thresholds chosen on dev."""

    items = load_activation_set(data)
    convs = {c.name: c for c in load_locomo(data, range(0, 5)).corpora}
    corpora = list(convs.values())
    histories = {i: [f.text for f in corpora[i].fragments] for i in range(5)}

    t0 = time.perf_counter()
    if runtime == "llamacpp":
        from fragrel_integrations.models.llama_cpp_chat import LlamaCppChatModel

        model = LlamaCppChatModel(n_ctx=n_ctx)
    else:
        from fragrel_integrations.models.transformers_chat import TransformersChatModel

        model = TransformersChatModel(context_window=n_ctx)
    load_s = time.perf_counter() - t0
    controllers = {  # the LLM gates: (controller, by probability)
        "text": (SCMController(model, decision="text"), False),  # the behaviour before: one message, parsed
        "text_fewshot": (SCMController(model, decision="text", activation_examples=ACTIVATION_EXAMPLES), False),
        "p_yes_1msg": (SCMController(model, activation_examples=()), True),
        "p_yes": (SCMController(model), True),  # the default with a model that gives probabilities: few-shot
    }
    out: dict = {"items": {}, "seconds": {}, "load_seconds": load_s}
    rows: dict[str, dict] = {it.id: {"split": it.split, "label": it.needs_memory} for it in items}
    try:
        for gate_name, (controller, by_probability) in controllers.items():
            t1 = time.perf_counter()
            for n, it in enumerate(items):
                flash = MemoryItem(f"conv{it.conversation}", 0, histories[it.conversation][-1], "")
                if by_probability:
                    rows[it.id][gate_name] = model.yes_no_probability(controller.activation_messages(it.text, flash))
                else:
                    d = controller.needs_memory(it.text, flash)
                    rows[it.id][gate_name] = {"value": d.value, "parsed": d.parsed, "reply": d.raw}
                if progress and n % 20 == 0:
                    progress(f"{gate_name}: {n}/{len(items)}")
            out["seconds"][gate_name] = (time.perf_counter() - t1) / len(items)
    finally:
        model.close()

    gate = LexicalGate()
    vocab = {i: NameVocabulary(h[:-1]) for i, h in histories.items()}  # the flash turn is not long-term memory
    t1 = time.perf_counter()
    for it in items:
        d = gate.decide_known(it.text, vocab[it.conversation])
        rows[it.id]["lexical"] = {"value": d.value, "why": d.raw}
    out["seconds"]["lexical"] = (time.perf_counter() - t1) / len(items)

    emb = CachedEmbedder("locomo")
    emb.ensure([t for h in histories.values() for t in h] + [it.text for it in items], progress=False)
    t1 = time.perf_counter()
    for it in items:
        turns = emb.get(histories[it.conversation][:-1])
        q = emb.get([it.text])[0]
        cos = turns @ q / np.maximum(np.linalg.norm(turns, axis=1) * np.linalg.norm(q), 1e-12)
        rows[it.id]["max_cosine"] = float(cos.max())
    out["seconds"]["embedding"] = (time.perf_counter() - t1) / len(items)

    dev = [r for r in rows.values() if r["split"] == "dev"]
    p1_thr = best_threshold([r["label"] for r in dev], [r["p_yes_1msg"] for r in dev])
    p_thr = best_threshold([r["label"] for r in dev], [r["p_yes"] for r in dev])
    c_thr = best_threshold([r["label"] for r in dev], [r["max_cosine"] for r in dev])
    t_p, t_c = DEFAULT_ACTIVATION_THRESHOLD, DEFAULT_SIMILARITY_THRESHOLD
    out["thresholds"] = {
        "probability_default": t_p,
        "probability_1msg_dev_best": p1_thr,
        "probability_fewshot_dev_best": p_thr,
        "embedding_default": t_c,
        "embedding_dev_best": c_thr,
    }
    gates: dict[str, Callable[[dict], bool]] = {
        "always yes (activation=False)": lambda r: True,
        "text reply, one-message prompt (baseline)": lambda r: r["text"]["value"],
        "text reply, few-shot prompt": lambda r: r["text_fewshot"]["value"],
        f"P(yes) >= {t_p:g}, one-message prompt": lambda r: r["p_yes_1msg"] >= t_p,
        f"P(yes) >= {p1_thr:.3f} (dev best), one-message prompt": lambda r: r["p_yes_1msg"] >= p1_thr,
        f"**P(yes) >= {t_p:g}, few-shot prompt (default)**": lambda r: r["p_yes"] >= t_p,
        f"P(yes) >= {p_thr:.3f} (dev best), few-shot prompt": lambda r: r["p_yes"] >= p_thr,
        "**lexical (default)**": lambda r: r["lexical"]["value"],
        f"**embedding cos >= {t_c:g} (default)**": lambda r: r["max_cosine"] >= t_c,
        f"embedding cos >= {c_thr:.3f} (dev best)": lambda r: r["max_cosine"] >= c_thr,
    }
    out["metrics"] = {
        split: {name: metrics([r["label"] for r in part], [fn(r) for r in part]) for name, fn in gates.items()}
        for split, part in (("dev", dev), ("heldout", [r for r in rows.values() if r["split"] == "heldout"]))
    }
    for gate_name in ("text", "text_fewshot"):
        out[f"{gate_name}_parsed_pct"] = 100 * float(np.mean([r[gate_name]["parsed"] for r in rows.values()]))
        out[f"{gate_name}_replies"] = sorted({r[gate_name]["reply"].strip() for r in rows.values()})
    for split in ("dev", "heldout"):
        for label in (True, False):
            part = [r for r in rows.values() if r["split"] == split and r["label"] == label]
            out.setdefault("score_means", {})[f"{split} {'memory' if label else 'no_memory'}"] = {
                key: float(np.mean([r[key] for r in part])) for key in ("p_yes_1msg", "p_yes", "max_cosine")
            }
    out["items"] = rows
    out["model"] = f"SmolLM2-135M-Instruct ({type(model).__name__}), temperature 0"
    return out


def report_scm(res: dict, command: str, machine: dict) -> str:
    r = res["scm"]
    lines = [
        "# SCM activation gates with the embedded model",
        "",
        f"Command: `{command}`. Machine: {machine['cpus']} CPUs, load {machine['loadavg_start']} -> "
        f"{machine['loadavg_end']}.",
        "",
        "**Set.** `benchmarks/data/scm_activation.json`: 50 LoCoMo questions about the conversation they are asked "
        "after (conversations 0-4, the dev part of LoCoMo; 10 per conversation, categories 1-4) labelled *needs "
        'memory*, and 50 self-contained requests written for the set ("Write a haiku about autumn.", "What is '
        "17*3?\") labelled *no memory*, each also asked after one of those conversations. The set's dev part "
        "(conversations 0-2, 30 + 30) chooses thresholds; its held-out part (conversations 3-4, 20 + 20) is "
        "reported once.",
        "",
        f"**Gates**, all in this run on the same items. Model: {r['model']} (load {r['load_seconds']:.1f} s). "
        "*text reply*: `SCMController(decision='text')` parses the reply; with the *one-message prompt* "
        "(`ACTIVATION_PROMPT`) this is the behaviour before this change, with the *few-shot prompt* the request is "
        "`ACTIVATION_SYSTEM_PROMPT` + the six `ACTIVATION_EXAMPLES` as chat turns + the message. *P(yes)*: answer "
        "yes when P(yes) / (P(yes) + P(no)) of the first reply token >= threshold (the default for a model that "
        "gives probabilities: few-shot prompt, threshold 0.5). *lexical*: `LexicalGate()` (memory cues, names "
        "seen in earlier turns); *embedding*: max cosine (all-MiniLM-L6-v2) of the message with a stored turn "
        "(the flash turn excluded) >= threshold. Accuracy, and precision / recall of *needs memory*. *dev best* "
        "thresholds are chosen on the dev part and applied unchanged to the held-out part.",
        "",
    ]
    for split in ("dev", "heldout"):
        lines += [
            f"## {'Dev' if split == 'dev' else 'Held-out'} part",
            "",
            "| gate | n | accuracy | precision | recall | says yes |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, m in r["metrics"][split].items():
            lines.append(
                f"| {name} | {m['n']} | {m['accuracy']:.2f} | {m['precision']:.2f} | {m['recall']:.2f} | "
                f"{100 * m['yes_rate']:.0f}% |"
            )
        lines.append("")
    lines += [
        "## Scores",
        "",
        "| part | mean P(yes), one-message | mean P(yes), few-shot | mean max cosine |",
        "|---|---:|---:|---:|",
    ]
    for key, v in r["score_means"].items():
        lines.append(f"| {key} | {v['p_yes_1msg']:.3f} | {v['p_yes']:.3f} | {v['max_cosine']:.3f} |")
    s = r["seconds"]
    lines += [
        "",
        f"Text replies parsed: one-message {r['text_parsed_pct']:.0f}%, few-shot {r['text_fewshot_parsed_pct']:.0f}%; "
        f"distinct replies (one-message): {r['text_replies'][:8]}; (few-shot): {r['text_fewshot_replies'][:8]}.",
        f"Seconds per message (2 shared CPUs): text {s['text']:.3f} / {s['text_fewshot']:.3f} (one-message / "
        f"few-shot), P(yes) {s['p_yes_1msg']:.3f} / {s['p_yes']:.3f}, lexical {s['lexical']:.6f}, "
        f"embedding (cached vectors; cosine only) {s['embedding']:.6f}.",
        f"Thresholds: {json.dumps({k: round(v, 4) for k, v in r['thresholds'].items()})}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--steps", default="scm", help=f"comma-separated sections: {', '.join(STEPS)}")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--runtime", choices=["transformers", "llamacpp"], default="transformers")
    ap.add_argument("--stem", default="llm_steps_scm", help="report file name")
    args = ap.parse_args(argv)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        ap.error(f"unknown --steps {unknown}; choose from {list(STEPS)}")
    command = "python benchmarks/bench_llm_steps.py " + " ".join(argv if argv is not None else sys.argv[1:])
    start = loadavg()
    res: dict = {}
    if "scm" in steps:
        res["scm"] = scm_activation(
            args.data, runtime=args.runtime, progress=lambda msg: print(msg, file=sys.stderr, flush=True)
        )
        machine = machine_info(start)
        res["machine"] = machine
        write_json(args.out_dir / f"{args.stem}.json", res)
        (args.out_dir / f"{args.stem}.md").write_text(report_scm(res, command, machine))
    return res


if __name__ == "__main__":
    main()
