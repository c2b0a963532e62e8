"""A run as vLLM's `benchmarks/benchmark_serving.py --save-result` writes one: `vllm_result.json`.

The same keys as vLLM's file, so tools that read vLLM's results read ours.
Units follow vLLM: the `<stat>_<metric>_ms` figures are in milliseconds;
`duration`, each `ttfts` entry and each `itls` entry are in seconds;
throughputs are per second (`request_throughput`, `request_goodput:` in
requests, `output_throughput`, `total_token_throughput` in tokens). The
`request_goodput:` key keeps vLLM's trailing colon.

As vLLM's:
- the per-request lists (`input_lens`, `output_lens`, `ttfts`, `itls`,
  `generated_texts`, `errors`) hold one entry per request sent, in id
  order; a request that did not finish (rejected, or cut off by
  `stop_at_last_arrival`) counts as failed: output length 0, TTFT 0.0, no
  ITLs, and why in `errors` ("" for a finished request);
- `completed`, the token totals, the throughputs and every statistic count
  finished requests only, over `duration` (our makespan: first arrival to
  last finish); TPOT is over outputs of more than one token; ITLs are
  pooled; `std` is the population standard deviation; the statistics of
  no value are 0.0 (null for ITL when the table has no token times);
- percentile keys are `p<P>_<metric>_ms`, P as `percentile_label` writes it,
  for the percentiles the summary reports (`measure.percentiles`);
- `request_goodput:` is null when the SLO bounds nothing.

The per-request lists are written, as vLLM's `--save-detailed` writes them,
only with `measure.vllm_detailed=true`: they are most of the file (a
one-hour sim run's ~3.6M ITLs take ~75 MB), and a capacity search writes
hundreds of runs. Without them the file holds every other key.

Ours: `generated_texts` are empty strings (the text is not kept);
`output_lens` counts every row of a request (n samples or beams), as the
summary's `output_tokens_per_s` does; `max_concurrency` is null (the
engine's `max_num_seqs` caps the batch, not the client); `tokenizer_id` is
the trace's tokenizer when the run's config names one, else the model. The
run's setting goes at the top level, as vLLM's `--metadata KEY=VALUE` puts
it: `engine`, `block_size`, `workload`, `seed`, `code_version`, with their
JSON types (vLLM's are strings); `backend`, vLLM's own key, holds ours
(sim or real).
"""
from __future__ import annotations

from dataclasses import dataclass
import datetime
import io
import json
import math
from typing import TextIO

import numpy as np
import pandas as pd

from results.record.summary import (SLO_BOUNDS, TokenGaps, percentile_label, request_latencies,
                                    summary_percentiles)

VLLM_RESULT = "vllm_result.json"
METRICS = ("ttft", "tpot", "itl", "e2el")     # vLLM's names; the summary's: ttft_s, tpot_s, itl_s, e2e_latency_s
UNFINISHED = "unfinished: the run stopped (stop_at_last_arrival) before this request finished"


@dataclass(slots=True, frozen=True)
class ITLs:
    """The `itls` list: each request's ITLs in seconds, [] for one that did not finish; one array until
    written, as a one-hour sim run has millions."""

    itl_s: np.ndarray       # [num_gaps] request after request
    counts: np.ndarray      # [num_requests] how many of them are each request's

    def tolist(self) -> list[list[float]]:
        ends = np.cumsum(self.counts)
        return [self.itl_s[e - n:e].tolist() for e, n in zip(ends, self.counts)]

    def write(self, f: TextIO, chunk: int = 4096) -> None:
        """As JSON text into `f`, `chunk` requests at a time (a long run's text is ~100 MB). Arrow formats
        the floats (the shortest digits that read back the same value, as repr) and joins each request's:
        several times faster than json.dumps, which took most of the time a long run spent on this file."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ends = np.cumsum(self.counts)
        f.write("[")
        for first in range(0, len(self.counts), chunk):
            counts, end = self.counts[first:first + chunk], ends[first:first + chunk]
            start = int(end[0] - counts[0])
            offsets = pa.array(np.concatenate([[0], end - start]), type=pa.int64())
            texts = pc.cast(pa.array(self.itl_s[start:int(end[-1])]), pa.string())
            joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, texts), ", ").to_pylist()
            f.write((", " if first else "") + ", ".join(f"[{text}]" for text in joined))
        f.write("]")


def stats_ms(values: np.ndarray | None, metric: str, percentiles: tuple[float, ...]) -> dict:
    """`mean_`, `median_`, `std_` and `p<P>_` `<metric>_ms` of `values` (seconds), as vLLM computes them."""
    keys = [f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms",
            *(f"p{percentile_label(p)}_{metric}_ms" for p in percentiles)]
    if values is None:
        return dict.fromkeys(keys)
    v = values if values.size else np.zeros(1)      # vLLM: np.mean(xs or 0)
    figures = [v.mean(), np.median(v), v.std(), *np.percentile(v, percentiles)]
    return {k: float(x) * 1000 for k, x in zip(keys, figures)}


def error(status: str, rejected_reason) -> str:
    """A request's entry in `errors`: "" when it finished, else why not."""
    if status == "finished":
        return ""
    if status == "rejected":
        return rejected_reason if isinstance(rejected_reason, str) else "rejected"
    return UNFINISHED


def run_date(summary: dict) -> str:
    """The run's date as vLLM writes it (`%Y%m%d-%H%M%S`): from the metadata block, else now."""
    stamp = (summary.get("metadata") or {}).get("date")
    when = datetime.datetime.fromisoformat(stamp) if stamp else datetime.datetime.now()
    return when.strftime("%Y%m%d-%H%M%S")


DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


def vllm_result(requests: pd.DataFrame, summary: dict, detailed: bool = True) -> dict:
    """The vllm_result.json of a run, from its requests table and its summary (see the module's doc);
    `itls` as an `ITLs` (`to_json` writes it all); without the per-request lists unless `detailed`."""
    meta = summary.get("metadata") or {}
    config = meta.get("config") or {}
    percentiles = summary_percentiles(summary)
    reqs = requests.sort_values("id")
    finished = (reqs["status"] == "finished").to_numpy()
    gaps = TokenGaps.of_table(reqs)
    lat = request_latencies(reqs, gaps)
    width = reqs["width"] if "width" in reqs else 1
    output_lens = (reqs["output_len"] * width).where(finished, 0)
    rate = summary.get("request_rate")
    bounded = any(summary.get(f"slo_{bound}") is not None for bound in SLO_BOUNDS)   # else vLLM writes None
    if gaps is not None:
        itls = ITLs(gaps.pooled(finished), np.bincount(gaps.owner, minlength=len(reqs)) * finished)
    else:
        itls = ITLs(np.empty(0), np.zeros(len(reqs), dtype=np.int64))
    out = {
        "date": run_date(summary),
        "backend": summary.get("backend"),
        "model_id": summary.get("model"),
        "tokenizer_id": (config.get("workload") or {}).get("tokenizer") or summary.get("model"),
        "num_prompts": int(len(reqs)),
        "engine": summary.get("engine"),
        "block_size": summary.get("block_size"),
        "workload": summary.get("workload"),
        "seed": summary.get("workload_seed"),
        "code_version": meta.get("code_version"),
        "request_rate": "inf" if rate is None or math.isinf(rate) else rate,
        "burstiness": summary.get("burstiness", 1.0),
        "max_concurrency": None,
        "duration": summary["makespan_s"],
        "completed": int(finished.sum()),
        "total_input_tokens": int(reqs["prompt_len"][finished].sum()),
        "total_output_tokens": int(output_lens.sum()),
        "request_throughput": summary["requests_per_s"],
        "request_goodput:": summary["goodput_requests_per_s"] if bounded else None,
        "output_throughput": summary["output_tokens_per_s"],
        "total_token_throughput": summary["total_tokens_per_s"],
        "input_lens": [int(n) for n in reqs["prompt_len"]],
        "output_lens": [int(n) for n in output_lens],
        "ttfts": [float(t) if ok else 0.0 for ok, t in zip(finished, lat["ttft_s"])],
        "itls": itls,
        "generated_texts": [""] * len(reqs),
        "errors": [error(s, why) for s, why in zip(reqs["status"], reqs["rejected_reason"].astype(object))],
    }
    done = lat[finished]
    values = {"ttft": done["ttft_s"].to_numpy(dtype="float64"),
              "tpot": done["tpot_s"].dropna().to_numpy(dtype="float64"),
              "itl": itls.itl_s if gaps is not None else None,
              "e2el": done["e2e_latency_s"].to_numpy(dtype="float64")}
    for metric in METRICS:
        out.update(stats_ms(values[metric], metric, percentiles))
    if not detailed:
        for key in DETAILED:
            del out[key]
    return out


def write(result: dict, f: TextIO) -> None:
    """A `vllm_result` as the file's JSON text into `f`, on one line as vLLM writes it; NaN as null."""
    f.write("{")
    for i, (key, value) in enumerate(result.items()):
        f.write(f"{', ' if i else ''}{json.dumps(key)}: ")
        if isinstance(value, ITLs):
            value.write(f)
        else:
            f.write(json.dumps(None if isinstance(value, float) and not math.isfinite(value) else value,
                               allow_nan=False))
    f.write("}")


def to_json(result: dict) -> str:
    """`write`'s text as a string."""
    out = io.StringIO()
    write(result, out)
    return out.getvalue()
