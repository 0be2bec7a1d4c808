"""A cheap embedder for suites that test the API's contract, not its recall: a tenant may name any
Embedder by dotted path (MEMORY_EMBEDDER, Tenant.embedder), and this one hashes words into a
vector in microseconds where the local model takes milliseconds a text."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from memory_platform.embeddings.base import Embedder


class HashingEmbedder(Embedder):
    name = "hashing"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split()[:2000] or [""]:
                digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                slot = int.from_bytes(digest[:4], "little") % self.dim
                out[row, slot] += 1.0 if digest[4] & 1 else -1.0
            if not out[row].any():
                out[row, 0] = 1.0
            out[row] /= np.linalg.norm(out[row])
        return out
