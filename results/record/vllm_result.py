"""A run as vLLM's `vllm bench serve --save-result` writes one: `vllm_result.json`.

The keys of current vLLM's file (vllm/benchmarks/serve.py), in its order,
so tools that read vLLM's results read ours. Units follow vLLM: the
`<stat>_<metric>_ms` figures are in milliseconds; `duration`, `ttfts`,
`itls`, `latencies`, `start_times` and `queue_times` are in seconds;
throughputs are per second (`request_throughput`, `request_goodput` in
requests, `output_throughput`, `total_token_throughput` and
`max_output_tokens_per_s` in tokens). `request_goodput:` (the key of
vLLM's older benchmark_serving.py, with its trailing colon) repeats
`request_goodput` for readers of the older files.

As vLLM's:
- the per-request lists (`input_lens`, `output_lens`, `ttfts`, `itls`,
  `latencies`, `start_times`, `queue_times`, `generated_texts`, `errors`)
  hold one entry per request sent, in id order; a request that did not
  finish (rejected, refused by a peer, or cut off by
  `stop_at_last_arrival`) counts as `failed`: output length 0, TTFT and
  latency 0.0, no ITLs, and why in `errors` ("" for a finished request);
- a request starts when the client sends it (`start_times`): for a run
  against an HTTP server (`backend=http`), when it left our client, which
  may hold it back under `backend.max_concurrency` (that wait is its
  `queue_times` entry, reported apart: TTFT and latency count from the
  send, and `<stat>_client_queue_time_ms` and, at a finite rate,
  `<stat>_e2el_including_client_queue_ms` are added when a cap is set, as
  vLLM adds them); for our engines and in-process peers, at its trace
  arrival (no client: every `queue_times` entry is 0.0, and the time a
  request waits inside the engine counts in its TTFT, as a server's own
  queue does in vLLM's figures);
- `completed`, the token totals, the throughputs and every statistic count
  finished requests only, over `duration` (our makespan: first arrival to
  last finish); TPOT is over outputs of more than one token; ITLs are
  pooled; `std` is the population standard deviation; the statistics of
  no value are 0.0 (null for ITL when the table has no token times);
- `max_output_tokens_per_s` is the most output tokens whose times fall in
  one second (one-second buckets from the first start, each token at its
  request's start + TTFT + the ITLs before it), and
  `max_concurrent_requests` the most finished requests in flight at once
  (each from its start to its finish);
- percentile keys are `p<P>_<metric>_ms`, P as `percentile_label` writes it,
  for the percentiles the summary reports (`measure.percentiles`), for
  ttft, tpot, itl and e2el (vLLM's `--percentile-metrics ttft,tpot,itl,e2el`);
- `request_goodput` is null when the SLO bounds nothing.

As vLLM without `--save-detailed`, the per-request lists but `latencies` and
`queue_times` are written only with `measure.vllm_detailed=true`: they are
most of the file (a one-hour sim run's ~3.6M ITLs take ~75 MB), and a
capacity search writes hundreds of runs.

Ours: `generated_texts` are empty strings (the text is not kept);
`output_lens` counts every row of a request (n samples or beams), as the
summary's `output_tokens_per_s` does, and a step of a group gives as many
tokens as it has rows in `max_output_tokens_per_s`; `endpoint_type` and
`backend` (vLLM writes the same value in both) hold our backend (sim, real,
transformers, http); `label` is the engine's label (or the peer's);
`max_concurrency` is `backend.max_concurrency` of an HTTP run, null
otherwise (the engine's `max_num_seqs` caps the batch, not the client);
`rtfx` is 0.0 (no audio); `model_id` is the model a peer served
(`served_model`), else the run's model; `tokenizer_id` is the trace's tokenizer when the
run's config names one, else the model. The run's setting goes after
`num_prompts`, as vLLM's `--metadata KEY=VALUE` puts it: `engine`,
`block_size`, `workload`, `seed`, `code_version`, with their JSON types
(vLLM's are strings).
"""
from __future__ import annotations

from dataclasses import dataclass
import datetime
import io
import itertools
import json
import math
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from pagedbench.results.record.summary import (SLO_BOUNDS, percentile_label, request_latencies,
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

        f.write("[")
        for rows, gaps in chunks(self.counts, chunk):
            offsets = pa.array(np.concatenate([[0], np.cumsum(self.counts[rows])]), type=pa.int64())
            texts = pc.cast(pa.array(self.itl_s[gaps]), pa.string())
            joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, texts), ", ").to_pylist()
            f.write((", " if rows.start else "") + ", ".join(f"[{text}]" for text in joined))
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
    if status in ("rejected", "failed"):      # failed: a peer's request (refused, an error, a cut stream)
        return rejected_reason if isinstance(rejected_reason, str) else status
    return UNFINISHED


def run_date(summary: dict) -> str:
    """The run's date as vLLM writes it (`%Y%m%d-%H%M%S`): from the metadata block, else now."""
    stamp = (summary.get("metadata") or {}).get("date")
    when = datetime.datetime.fromisoformat(stamp) if stamp else datetime.datetime.now()
    return when.strftime("%Y%m%d-%H%M%S")


# The lists vLLM leaves out without --save-detailed (`latencies` and `queue_times` stay).
DETAILED = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
CLIENT = "http"     # the backend whose requests leave a client of ours, which may hold them back


def finished_gaps(requests: pd.DataFrame, finished: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The ITLs of the finished requests (`finished`: one bool per row), pooled request after request, and how
    many are each row's (0 for one that did not finish): the values and order of `TokenGaps.of_table`'s kept
    where their request finished, built without the whole table's arrays (a one-hour run has millions of
    gaps; each array of them costs tens of MB). None when the table has no token times."""
    if "token_times_s" not in requests:
        return None
    col = requests["token_times_s"].to_numpy()[finished]
    lengths = np.fromiter(map(len, col), dtype=np.int64, count=len(col))
    times = np.fromiter(itertools.chain.from_iterable(col), dtype="float64", count=int(lengths.sum()))
    itl = np.diff(times)
    del times
    last = np.cumsum(lengths)[lengths > 0] - 1           # a request's last time: no gap from it to the next's
    itl = np.delete(itl, last[last < len(itl)])
    counts = np.zeros(len(finished), dtype=np.int64)
    counts[finished] = np.maximum(lengths - 1, 0)
    return itl, counts


# How much `token_times` (requests) and `peaks` (token times) take at a time: their temporaries stay a few MB.
CHUNK_REQUESTS = 4096
CHUNK_TOKENS = 1 << 20


def chunks(counts: np.ndarray, size: int):
    """(requests, gaps): slices of `size` requests at a time and of the pooled gaps that are theirs (`counts`
    each), for `ITLs.write`, `token_times`."""
    ends = np.cumsum(counts)
    for first in range(0, len(counts), size):
        last = min(first + size, len(counts))
        yield slice(first, last), slice(int(ends[first - 1]) if first else 0, int(ends[last - 1]))


def token_times(first_s: np.ndarray, itl_s: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each token's time as vLLM's `calculate_metrics` places it: its request's first token (`first_s`, one per
    request of the table, NaN for one that produced none) and then one ITL after another (`itl_s`, request after
    request, `counts` of them each request's); request after request, the first token of each before its
    others. Built in one array; the per-request offsets are applied `CHUNK_REQUESTS` requests at a time (the
    same operations on each value as on the whole array at once)."""
    firsts = first_s[np.isfinite(first_s)]
    out = np.empty(len(firsts) + len(itl_s))
    out[:len(firsts)] = firsts
    if not itl_s.size:
        return out
    within = out[len(firsts):]
    np.cumsum(itl_s, out=within)
    has = counts > 0
    n = counts[has]
    starts = np.cumsum(n) - n
    before = np.where(starts > 0, within[np.maximum(starts - 1, 0)], 0.0)
    first_of = first_s[has]
    for rows, gaps in chunks(n, CHUNK_REQUESTS):
        part = within[gaps]
        part -= np.repeat(before[rows], n[rows])
        part += np.repeat(first_of[rows], n[rows])
    return out


def peaks(start_s: np.ndarray, end_s: np.ndarray, times_s: np.ndarray, weights: np.ndarray | None) -> tuple[float, int]:
    """vLLM's `max_output_tokens_per_s` (the most token weight in a one-second bucket counted from the first
    start; `weights` None: one each) and `max_concurrent_requests` (the most [start, end) intervals open at
    once), of finished requests."""
    if not start_s.size:
        return 0.0, 0
    first = start_s.min()
    buckets = int(np.ceil(end_s.max() - first)) + 1
    # Bucketed a slice at a time: the weights are whole numbers (rows), so the sums do not depend on the order.
    per_s = np.zeros(buckets, dtype=np.int64 if weights is None else np.float64)
    for at in range(0, len(times_s), CHUNK_TOKENS):
        index = np.empty(min(CHUNK_TOKENS, len(times_s) - at), dtype=np.int64)
        np.subtract(times_s[at:at + CHUNK_TOKENS], first, out=index, casting="unsafe")   # truncated as astype(int64)
        keep = (index >= 0) & (index < buckets)
        part = weights[at:at + CHUNK_TOKENS] if weights is not None else None
        if not keep.all():
            index = index[keep]
            part = part[keep] if part is not None else None
        per_s += np.bincount(index, weights=part, minlength=buckets)   # int64 counts, or float64 sums of weights
    edges = np.concatenate([start_s, end_s])
    steps = np.concatenate([np.ones(len(start_s), np.int64), -np.ones(len(end_s), np.int64)])
    order = np.lexsort((steps, edges))           # by time, a finish before a start at the same time
    return float(per_s.max()), int(np.cumsum(steps[order]).max())


def vllm_result(requests: pd.DataFrame, summary: dict, detailed: bool = True) -> dict:
    """The vllm_result.json of a run, from its requests table and its summary (see the module's doc);
    `itls` as an `ITLs` (`to_json` writes it all); without most per-request lists unless `detailed`."""
    meta = summary.get("metadata") or {}
    config = meta.get("config") or {}
    percentiles = summary_percentiles(summary)
    reqs = requests.sort_values("id")
    finished = (reqs["status"] == "finished").to_numpy()
    gaps = finished_gaps(reqs, finished)
    lat = request_latencies(reqs)                 # ttft, tpot, e2e: no gaps needed
    width = reqs["width"] if "width" in reqs else pd.Series(1, index=reqs.index)
    output_lens = (reqs["output_len"] * width).where(finished, 0)
    rate = summary.get("request_rate")
    bounded = any(summary.get(f"slo_{bound}") is not None for bound in SLO_BOUNDS)   # else vLLM writes None
    client = summary.get("backend") == CLIENT
    cap = (config.get("backend") or {}).get("max_concurrency") if client else None
    arrival = reqs["arrival_s"].to_numpy(dtype="float64")
    start = reqs["admitted_s"].to_numpy(dtype="float64") if client else arrival.copy()
    start = np.where(np.isfinite(start), start, arrival)           # one never sent: at its arrival
    queued = start - arrival
    ttft = lat["ttft_s"].to_numpy(dtype="float64") - queued        # from the send, as vLLM's clock starts
    e2el = lat["e2e_latency_s"].to_numpy(dtype="float64") - queued
    if gaps is not None:
        itl_s, counts = gaps                        # the gaps of finished requests, pooled as vLLM pools them
        itls = ITLs(itl_s, counts)
        first = np.where(finished, reqs["first_token_s"].to_numpy(dtype="float64"), np.nan)
        times = token_times(first, itl_s, counts)
        rows = width.to_numpy()
        weights = None if (rows == 1).all() else np.concatenate(
            [rows[np.isfinite(first)], np.repeat(rows, counts)]).astype("float64")
        peak_tokens, peak_requests = peaks(start[finished], start[finished] + e2el[finished], times, weights)
        del times, weights
    else:
        itls = ITLs(np.empty(0), np.zeros(len(reqs), dtype=np.int64))
        peak_tokens, peak_requests = None, None
    goodput = summary["goodput_requests_per_s"] if bounded else None
    out = {
        "date": run_date(summary),
        "endpoint_type": summary.get("backend"),
        "backend": summary.get("backend"),
        "label": summary.get("engine"),
        "model_id": summary.get("served_model") or summary.get("model"),
        "tokenizer_id": (config.get("workload") or {}).get("tokenizer") or summary.get("model"),
        "num_prompts": int(len(reqs)),
        "engine": summary.get("engine"),
        "block_size": summary.get("block_size"),
        "workload": summary.get("workload"),
        "seed": summary.get("workload_seed"),
        "code_version": meta.get("code_version"),
        "request_rate": "inf" if rate is None or math.isinf(rate) else rate,
        "burstiness": summary.get("burstiness", 1.0),
        "max_concurrency": cap,
        "duration": summary["makespan_s"],
        "completed": int(finished.sum()),
        "failed": int((~finished).sum()),
        "total_input_tokens": int(reqs["prompt_len"][finished].sum()),
        "total_output_tokens": int(output_lens.sum()),
        "request_throughput": summary["requests_per_s"],
        "request_goodput": goodput,
        "request_goodput:": goodput,
        "output_throughput": summary["output_tokens_per_s"],
        "total_token_throughput": summary["total_tokens_per_s"],
        "input_lens": [int(n) for n in reqs["prompt_len"]],
        "output_lens": [int(n) for n in output_lens],
        "ttfts": np.where(finished, ttft, 0.0).tolist(),
        "itls": itls,
        "latencies": np.where(finished, e2el, 0.0).tolist(),
        "start_times": start.tolist(),
        "queue_times": queued.tolist(),
        "generated_texts": [""] * len(reqs),
        "errors": [error(s, why) for s, why in zip(reqs["status"], reqs["rejected_reason"].astype(object))],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "rtfx": 0.0,
    }
    values = {"ttft": ttft[finished],
              "tpot": lat["tpot_s"][finished].dropna().to_numpy(dtype="float64"),
              "itl": itls.itl_s if gaps is not None else None,
              "e2el": e2el[finished]}
    for metric in METRICS:
        out.update(stats_ms(values[metric], metric, percentiles))
    if cap is not None:                          # vLLM: the client's queue, and the latency with it
        out.update(stats_ms(queued[finished], "client_queue_time", percentiles))
        if out["request_rate"] != "inf":
            out.update(stats_ms(e2el[finished] + queued[finished], "e2el_including_client_queue", percentiles))
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


def read_vllm_result(path: Path | str) -> dict:
    """The figures of a result file in vLLM's schema, written by `vllm bench serve --save-result` or by a run
    of ours (vllm_result.json, `pagedbench bench --save-result`), under our summary's names and units
    (seconds): num_finished, num_failed, makespan_s, requests_per_s, output_tokens_per_s and the means of
    TTFT, TPOT, ITL and end-to-end latency; None where the file has no such key. A file that is not such a
    result (no `completed` count) is a ValueError."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("completed"), int):
        raise ValueError(f"{path}: not a result in vLLM's schema (no integer 'completed')")

    def seconds(key: str) -> float | None:
        value = data.get(key)
        return None if value is None else float(value) / 1000.0

    return {"num_finished": data["completed"], "num_failed": data.get("failed"), "makespan_s": data.get("duration"),
            "requests_per_s": data.get("request_throughput"), "output_tokens_per_s": data.get("output_throughput"),
            "total_output_tokens": data.get("total_output_tokens"), "ttft_s_mean": seconds("mean_ttft_ms"),
            "tpot_s_mean": seconds("mean_tpot_ms"), "itl_s_mean": seconds("mean_itl_ms"),
            "e2e_latency_s_mean": seconds("mean_e2el_ms")}
