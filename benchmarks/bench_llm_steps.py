"""Per-step benchmark of the LLM steps on the embedded offline model (SmolLM2-135M-Instruct, greedy).

    python benchmarks/bench_llm_steps.py                       # every step
    python benchmarks/bench_llm_steps.py --steps tree,triplets # some steps

Each step is measured with and without constrained decoding (the ``ReplyFormat`` a step asks for) in the same
run, so every number stands beside its baseline. Sections (each in its own functions, so other steps can be added
without touching these): ``tree`` (surprise-tree summary replies that parse, on chunks of Robinson Crusoe),
``triplets`` (RET-LLM triplet extraction on bAbI dev statements: replies that parse, and precision / recall of
subject and object against gold derived from the sentences). Writes ``benchmarks/results/llm_steps.md`` and
``llm_steps.json``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"

#: step name -> function(args) returning (markdown section, json-able results)
STEPS: dict[str, Callable[[argparse.Namespace], tuple[str, dict]]] = {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="all", help=f"comma-separated steps among {sorted(STEPS)} or 'all'")
    parser.add_argument("--data", type=Path, default=None, help="the shared data folder (default ../shared/data)")
    args = parser.parse_args(argv)
    names = sorted(STEPS) if args.steps == "all" else [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        parser.error(f"unknown steps {unknown}; choose among {sorted(STEPS)}")
    for name in names:
        STEPS[name](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
