"""Replies held to a regular expression token by token, for the in-process torch runtime.

The pattern becomes a DFA (``interegular``); every vocabulary token walks it at once with numpy, so a step
costs a few array gathers rather than a Python loop over the vocabulary. A token is allowed when the reply it
makes can still end in a match; the end of the reply is allowed once the reply matches.

>>> vocab = RegexVocabulary(["", "ye", "s", "no", "y", "x"])
>>> step = vocab.allowed_ids(r"yes|no", eos_ids=[0])
>>> [np.flatnonzero(step(ids)).tolist() for ids in ([], [1], [1, 2])]
[[1, 3, 4], [2], [0]]
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

__all__ = ["RegexVocabulary"]


class _Pattern:
    """One pattern's DFA over a vocabulary: the transition table, the states that can still reach a match, and
    each token's characters as the DFA's symbol classes (tokens sorted longest first)."""

    def __init__(self, regex: str, vocabulary: RegexVocabulary) -> None:
        import interegular
        from interegular.fsm import anything_else

        fsm = interegular.parse_pattern(regex).to_fsm()
        index = {s: i for i, s in enumerate(sorted(fsm.states))}
        n_states, n_symbols = len(index), max(fsm.alphabet.values()) + 1
        table = np.full((n_states + 1, n_symbols + 1), n_states, dtype=np.int32)  # row n_states: no match
        table[:, n_symbols] = np.arange(n_states + 1)  # past a token's last character: stay
        for state, row in fsm.map.items():
            for symbol, target in row.items():
                table[index[state], symbol] = index[target]
        self.table, self.start = table, index[fsm.initial]
        self.finals = {index[s] for s in fsm.finals}
        self.live = np.zeros(n_states + 1, dtype=bool)
        self.live[list(self.finals)] = True
        for _ in range(n_states):  # states that reach a final one
            grown = self.live | self.live[table[:, :n_symbols]].any(axis=1)
            if (grown == self.live).all():
                break
            self.live = grown
        other = fsm.alphabet[anything_else]
        lookup = np.array([fsm.alphabet.get(c, other) for c in vocabulary.chars] + [n_symbols])
        self.symbols = lookup[vocabulary.codes]  # code -1 (past the end) -> the "stay" column
        self.vocabulary = vocabulary

    def ends(self, state: int) -> np.ndarray:
        """The state each token leads to from ``state`` (indexed by token id)."""
        v = self.vocabulary
        states = np.full(len(v.order), state, dtype=np.int32)
        for column, rows in enumerate(v.rows_longer_than):
            states[:rows] = self.table[states[:rows], self.symbols[:rows, column]]
        out = np.empty_like(states)
        out[v.order] = states
        return out


class RegexVocabulary:
    """A tokenizer's vocabulary (``texts[i]``: the text token ``i`` adds to a reply; ``""`` for special tokens)
    as arrays a pattern's DFA can walk; patterns are compiled once and kept."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.chars = sorted(set("".join(texts)))
        code = {c: i for i, c in enumerate(self.chars)}
        lengths = np.array([len(t) for t in texts], dtype=np.int64)
        self.order = np.argsort(-lengths, kind="stable")  # longest first: a column touches only the rows it needs
        width = int(lengths.max(initial=0))
        self.codes = np.full((len(texts), max(width, 1)), -1, dtype=np.int64)
        for row, token in enumerate(self.order):
            self.codes[row, : lengths[token]] = [code[c] for c in texts[token]]
        self.rows_longer_than = [int((lengths > column).sum()) for column in range(width)]
        self.empty = lengths == 0
        self._patterns: dict[str, _Pattern] = {}

    def compiles(self, regex: str) -> bool:
        """Whether ``regex`` is within what the DFA supports (no look-arounds, back-references, anchors)."""
        try:
            self._pattern(regex)
        except Exception:  # interegular raises its own errors for syntax it does not support
            return False
        return True

    def _pattern(self, regex: str) -> _Pattern:
        if regex not in self._patterns:
            self._patterns[regex] = _Pattern(regex, self)
        return self._patterns[regex]

    def allowed_ids(self, regex: str, eos_ids: Collection[int]) -> Callable[[list[int]], np.ndarray]:
        """``allowed(reply ids so far)``: a mask of the ids that may come next, for one reply (called once per
        step, in order)."""
        pattern = self._pattern(regex)
        state, ends = pattern.start, pattern.ends(pattern.start)

        def allowed(ids: list[int]) -> np.ndarray:
            nonlocal state, ends
            if ids:
                state = int(ends[ids[-1]])
                ends = pattern.ends(state)
            ok = pattern.live[ends] & ~self.empty
            if state in pattern.finals or not ok.any():
                ok[list(eos_ids)] = True
            return ok

        return allowed
