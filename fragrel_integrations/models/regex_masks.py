"""Replies held to a regular expression token by token: the pattern's DFA (``interegular``) walked by every token at
once with numpy. A token is allowed when the reply can still match; tokens holding part of a character never are.

>>> vocab = RegexVocabulary(["", "ye", "s", "no", "y", "e", "n", "o", "x"])
>>> step = vocab.allowed_ids(r"yes|no", eos_ids=[0])
>>> [np.flatnonzero(step(ids)).tolist() for ids in ([], [1], [1, 2])]
[[1, 3, 4, 6], [2], [0]]
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

import numpy as np

__all__ = ["RegexVocabulary", "parses"]

MAX_PATTERNS = 16  #: compiled patterns kept per vocabulary


@functools.lru_cache(maxsize=256)
def parses(regex: str) -> bool:
    """Whether ``interegular`` reads ``regex`` (no back-references, anchors or word boundaries)."""
    import interegular

    try:
        interegular.parse_pattern(regex)
    except Exception:  # interegular's own errors
        return False
    return True


class _Pattern:
    """One pattern's DFA over a vocabulary: transitions, the states that can still match, tokens as symbols."""

    def __init__(self, regex: str, vocabulary: RegexVocabulary) -> None:
        import interegular
        from interegular.fsm import anything_else

        fsm = interegular.parse_pattern(regex).to_fsm()
        index = {s: i for i, s in enumerate(sorted(fsm.states))}
        n_states, n_symbols = len(index), max(fsm.alphabet.values()) + 1
        table = np.full((n_states + 1, n_symbols + 1), n_states, dtype=np.int32)  # row n_states: no match
        table[:, n_symbols] = np.arange(n_states + 1)  # past a token's last character: stay
        into: list[list[int]] = [[] for _ in range(n_states)]
        for state, row in fsm.map.items():
            for symbol, target in row.items():
                table[index[state], symbol] = index[target]
                into[index[target]].append(index[state])
        self.table, self.start = table, index[fsm.initial]
        self.finals = {index[s] for s in fsm.finals}
        self.live = np.zeros(n_states + 1, dtype=bool)  # states from which a final one is reachable
        todo = list(self.finals)
        self.live[todo] = True
        while todo:
            for source in into[todo.pop()]:
                if not self.live[source]:
                    self.live[source] = True
                    todo.append(source)
        other = fsm.alphabet[anything_else]
        dtype = np.uint8 if n_symbols < 255 else np.int32
        lookup = np.array([fsm.alphabet.get(c, other) for c in vocabulary.chars] + [n_symbols], dtype=dtype)
        self.symbols = lookup[vocabulary.codes]  # code -1 (past the end) -> the "stay" column
        # every symbol a transition uses is a whole token: no live state is a dead end
        single = set(self.symbols[vocabulary.single_rows, 0].tolist())
        used = {symbol for row in fsm.map.values() for symbol in row}
        self.complete = used <= single
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
    """A vocabulary (``texts[i]``: token ``i``'s text, ``""`` for special ones) as arrays a DFA can walk."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.chars = sorted(set("".join(texts)))
        code = {c: i for i, c in enumerate(self.chars)}
        lengths = np.array([len(t) for t in texts], dtype=np.int64)
        self.order = np.argsort(-lengths, kind="stable")  # longest first
        width = int(lengths.max(initial=0))
        self.codes = np.full((len(texts), max(width, 1)), -1, dtype=np.int32)
        for row, token in enumerate(self.order):
            self.codes[row, : lengths[token]] = [code[c] for c in texts[token]]
        self.rows_longer_than = [int((lengths > column).sum()) for column in range(width)]
        blocked = (lengths == 0) | np.array(["\ufffd" in t for t in texts], dtype=bool)
        self.usable = ~blocked
        self.single_rows = np.flatnonzero((lengths[self.order] == 1) & self.usable[self.order])
        self._patterns: OrderedDict[str, _Pattern] = OrderedDict()

    def _pattern(self, regex: str) -> _Pattern:
        if regex in self._patterns:
            self._patterns.move_to_end(regex)
        else:
            self._patterns[regex] = _Pattern(regex, self)
            if len(self._patterns) > MAX_PATTERNS:
                self._patterns.popitem(last=False)
        return self._patterns[regex]

    def allowed_ids(self, regex: str, eos_ids: Collection[int]) -> Callable[[list[int]], np.ndarray] | None:
        """``allowed(reply ids so far)``: the mask of next ids, for one reply (once per step); None when ``regex``
        cannot be enforced here."""
        try:
            pattern = self._pattern(regex)
        except Exception:  # interegular's own errors
            return None
        if not pattern.complete or not pattern.live[pattern.start]:
            return None  # a token would have to split a character, or nothing matches: left unenforced
        state, ends = pattern.start, pattern.ends(pattern.start)
        eos = list(eos_ids)

        def allowed(ids: list[int]) -> np.ndarray:
            nonlocal state, ends
            if ids:
                state = int(ends[ids[-1]])
                ends = pattern.ends(state)
            ok = pattern.live[ends] & self.usable
            if state in pattern.finals:
                ok[eos] = True
            return ok

        return allowed
