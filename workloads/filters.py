"""vLLM's benchmark length filters for dataset pairs."""
from __future__ import annotations

import numpy as np


def passes_filters(
    prompt_lens: np.ndarray, output_lens: np.ndarray, min_len: int, max_prompt_len: int, max_total_len: int
) -> np.ndarray:
    """A boolean mask of the pairs to keep: prompt and completion each at
    least `min_len` tokens (vLLM drops < 4, too short to measure), prompt at
    most `max_prompt_len`, and prompt + completion at most `max_total_len`
    (vLLM: 1024 and 2048, the longest that fits OPT's context)."""
    prompt_lens = np.asarray(prompt_lens, dtype=np.int64)
    output_lens = np.asarray(output_lens, dtype=np.int64)
    return (
        (prompt_lens >= min_len)
        & (output_lens >= min_len)
        & (prompt_lens <= max_prompt_len)
        & (prompt_lens + output_lens <= max_total_len)
    )
