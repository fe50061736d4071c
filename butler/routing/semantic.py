"""The semantic stage: "am I overdrawn?" is near "bank account balance" though they
share no word.

A static embedding model: each token has a vector, a text's vector is the mean of its
tokens' (WordLlama's inference: no special tokens, mean pooling, unit length), and two
texts are as close as the cosine of their vectors. The weights and the tokenizer are
the files the ``wordllama`` package ships in its wheel (installed by the ``semantic``
extra, ``pip install 'butler-a2a[semantic]'``); nothing is downloaded, ever. The files
are read directly rather than through ``WordLlama.load``, which looks for a cache
directory and may try the network first, and imports pydantic for its config.

Loaded once per process, on the first task that needs it. The weight matrix is mapped,
not read: only the rows of tokens that cards and tasks use become resident memory.
Without the package (or numpy, or tokenizers) ``available()`` is false and the router
runs its other stages.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

MODEL = "l2_supercat_256"
WEIGHTS = f"weights/{MODEL}.safetensors"
TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
# A task's first words are enough to place it; a paragraph's tail only blurs the mean.
EMBEDDED_TOKENS = 256


def _package_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("wordllama")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


@cache
def available() -> bool:
    """Whether the semantic stage can run here (its packages and files are installed)."""
    where = _package_dir()
    return (where is not None and (where / WEIGHTS).is_file() and (where / TOKENIZER).is_file()
            and all(importlib.util.find_spec(m) is not None for m in ("numpy", "tokenizers")))


class Embedder:
    def __init__(self, where: Path) -> None:
        import numpy as np
        from tokenizers import Tokenizer

        self._np = np
        self._tokenizer = Tokenizer.from_file(str(where / TOKENIZER))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        # A plain array over the mapping: indexing a np.memmap goes through Python.
        self._weights = np.asarray(_map_safetensors(where / WEIGHTS, np))

    def embed_one(self, text: str) -> Vectors | None:
        """One text's unit vector (None: no token), without ``embed``'s batch arrays:
        this runs for every task."""
        ids = self._tokenizer.encode(text.casefold(), add_special_tokens=False).ids
        if not ids:
            return None
        v = self._weights[ids[:EMBEDDED_TOKENS]].mean(axis=0, dtype=self._np.float32)
        norm = float(v @ v) ** 0.5
        return v / norm if norm > 0 else None

    def embed(self, texts: list[str]) -> Vectors:
        """Unit vectors, one row per text (a text with no token is a zero row)."""
        np = self._np
        out = np.zeros((len(texts), self._weights.shape[1]), dtype=np.float32)
        for row, text in enumerate(texts):
            # One at a time: encode_batch hands a single text to a thread pool.
            ids = self._tokenizer.encode(text.casefold(), add_special_tokens=False).ids
            ids = ids[:EMBEDDED_TOKENS]
            if ids:
                out[row] = self._weights[ids].mean(axis=0, dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)  # type: ignore[no-any-return]


@cache
def embedder() -> Embedder:
    """The one embedder of this process (check ``available()`` first)."""
    where = _package_dir()
    if where is None:
        raise RuntimeError("the semantic stage needs the wordllama package "
                           "(pip install 'butler-a2a[semantic]')")
    return Embedder(where)


def _map_safetensors(path: Path, np: Any) -> Any:
    """The file's one tensor, mapped read-only. The format: an 8-byte little-endian
    header length, a JSON header giving each tensor's dtype, shape and byte offsets
    (after the header), then the data."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    (meta,) = (v for k, v in header.items() if k != "__metadata__")
    dtype = {"F16": np.float16, "F32": np.float32}[meta["dtype"]]
    start, _ = meta["data_offsets"]
    return np.memmap(path, dtype=dtype, mode="r", offset=8 + size + start,
                     shape=tuple(meta["shape"]))


class SemanticIndex:
    """The candidates' texts (one per candidate: its card in one text, see
    ``RouteCandidate.text``) embedded once; a task's closeness to a candidate is the
    cosine of their vectors. One text, not one per example: a card's many examples then
    blur into what it mostly does rather than each reaching out for tasks of its own."""

    def __init__(self, texts: list[str]) -> None:
        self._embedder = embedder()
        self._rows = self._embedder.embed(texts)

    def score(self, text: str) -> list[float]:
        v = self._embedder.embed_one(text)
        if v is None:
            return [0.0] * len(self._rows)
        sims: list[float] = (self._rows @ v).tolist()
        return [s if s > 0.0 else 0.0 for s in sims]
