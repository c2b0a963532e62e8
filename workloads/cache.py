"""On-disk cache of a dataset file's tokenized pairs.

Tokenizing ShareGPT takes seconds, so the result for every pair (before any
filter) is kept in `$PAGEDBENCH_CACHE_DIR` (default ~/.cache/pagedbench) as
an .npz named by a hash of everything that determines it: the loader and its
version, the file's absolute path, size and mtime_ns, and the tokenizer's
fingerprint. Filters and sampling run after loading, so one cache entry
serves every config over the same file and tokenizer. A cache file that
cannot be read is ignored and rebuilt; writes go to a temporary name and are
renamed into place, so a reader never sees half a file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pagedbench.workloads.pairs import TokenizedPairs, tokenize_pairs

log = logging.getLogger("workloads")

CACHE_DIR_ENV = "PAGEDBENCH_CACHE_DIR"


def cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "pagedbench"


def cache_key(loader: str, version: int, path: Path, tokenizer_fingerprint: str) -> str:
    """A hex digest that changes whenever the cached pairs could."""
    path = path.resolve()
    stat = path.stat()
    parts = {
        "loader": loader,
        "version": version,
        "path": str(path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "tokenizer": tokenizer_fingerprint,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cached_pairs(
    loader: str,
    version: int,
    path: Path,
    tokenizer,
    build: Callable[[], tuple[TokenizedPairs, dict]],
) -> tuple[TokenizedPairs, dict]:
    """The pairs and info dict for `path` from the cache, or from `build()`
    (then stored). `info` is a small JSON-able dict the loader wants back on
    a cache hit, such as how many records the file held."""
    key = cache_key(loader, version, path, tokenizer.fingerprint)
    file = cache_dir() / f"{loader}-{key[:24]}.npz"
    if file.exists():
        hit = _read(file, key)
        if hit is not None:
            log.info("%s: loaded %d tokenized pairs from cache %s", loader, len(hit[0]), file)
            return hit
    pairs, info = build()
    _write(file, key, pairs, info)
    return pairs, info


def _read(file: Path, key: str) -> tuple[TokenizedPairs, dict] | None:
    try:
        with np.load(file, allow_pickle=False) as npz:
            if str(npz["key"]) != key:
                raise ValueError("key mismatch")
            pairs = TokenizedPairs(
                prompt_ids=npz["prompt_ids"].astype(np.int32, copy=False),
                prompt_offsets=npz["prompt_offsets"].astype(np.int64, copy=False),
                output_lens=npz["output_lens"].astype(np.int32, copy=False),
            )
            info = json.loads(str(npz["info"]))
        if not isinstance(info, dict):
            raise ValueError("info is not a mapping")
        return pairs, info
    except Exception as err:  # any unreadable cache file is rebuilt, never fatal
        log.warning("ignoring unreadable cache file %s (%s: %s); rebuilding", file, type(err).__name__, err)
        return None


def _write(file: Path, key: str, pairs: TokenizedPairs, info: dict) -> None:
    tmp_name = None
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=file.parent, prefix=file.stem, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(
                f,
                key=np.array(key),
                prompt_ids=pairs.prompt_ids,
                prompt_offsets=pairs.prompt_offsets,
                output_lens=pairs.output_lens,
                info=np.array(json.dumps(info)),
            )
        os.replace(tmp_name, file)
        log.info("wrote tokenized pairs to cache %s", file)
    except OSError as err:
        log.warning("could not write cache file %s (%s); continuing without it", file, err)
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)


def read_and_tokenize(loader: str, version: int, path: Path, tokenizer,
                      read: Callable[[Path], tuple[list[tuple[str, str]], dict]]) -> tuple[TokenizedPairs, dict]:
    """`read` the file's (prompt, completion) pairs and tokenize them, or take both from the cache."""
    def build() -> tuple[TokenizedPairs, dict]:
        start = time.perf_counter()
        pairs, info = read(path)
        read_s = time.perf_counter() - start
        tokenized = tokenize_pairs(pairs, tokenizer)
        log.info("%s: read %d pairs in %.1f s, tokenized them with %s in %.1f s",
                 loader, len(pairs), read_s, tokenizer.name, time.perf_counter() - start - read_s)
        return tokenized, info

    return cached_pairs(loader, version, path, tokenizer, build)
