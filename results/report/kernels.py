"""The report's section on the paged attention kernel (the paper's Figure 18a) and on the rest of the GPU check.

The sim's GPU presets charge paged attention the paper's Figure 18a penalty. Beside it this section shows what our
own Triton kernels measured on a GPU, where a run of `scripts/gpu_check.sh` was kept under data/runs/ (GPU_RUNS):
the paged/contiguous latency ratio per block size, torch SDPA on the same K/V, each one's share of the datasheet
bandwidth (and of a read-only stream where the records measured one: a decode kernel only reads),
the swap link fitted on that GPU, and the replay of one trace through the real backend and the sim. Those records
need a GPU, so `make report` does not re-make them; the section names the commit and the date they came from.

The prose is docs/report/templates/write_kernels.md.j2; this module computes its tables and values.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from pagedbench.engines.specs.presets import available, load_hardware
from pagedbench.paths import KEPT_RUNS, ROOT
from pagedbench.results.report.markdown import num, table
from pagedbench.results.report.paper import reference
from pagedbench.results.report.replay_table import format_table
from pagedbench.results.report.template import render

GPU_RUNS = KEPT_RUNS / "gpu_h200"   # a kept run of scripts/gpu_check.sh: kernels/, profile/, swap/, replay/
SHOWN_BLOCK = 16                    # the block size each row shows (the paper's Figure 18a reads its penalty there)


def kernel_rows(bench: pd.DataFrame, peak_gbps: float) -> list[list[str]]:
    """One row per (batch, context) at Triton's default pipelining: contiguous and paged latency, their ratio at
    SHOWN_BLOCK and across the block sizes, SDPA, and the paged kernel's and SDPA's shares of the datasheet
    bandwidth `peak_gbps` (bytes of K and V read / time: a decode reads each once)."""
    rows = []
    for (batch, context), g in at_default(bench).groupby(["batch", "context_len"], sort=True):
        at = g[g["block_size"] == SHOWN_BLOCK].iloc[0]
        ratios = g["paged_over_contiguous"]
        sdpa_gbps = at["kv_bytes"] / (at["sdpa_mean_us"] * 1e-6) / 1e9
        rows.append([str(batch), f"{context:,}", num(at["contiguous_mean_us"], ".1f"), num(at["paged_mean_us"], ".1f"),
                     num(at["paged_over_contiguous"], ".3f"), f"{ratios.min():.3f}-{ratios.max():.3f}",
                     num(at["sdpa_mean_us"], ".1f"), f"{100 * at['paged_gbps'] / peak_gbps:.0f}%",
                     f"{100 * sdpa_gbps / peak_gbps:.0f}%"])
    return rows


# Tuning knobs of later sweeps, each at its default value: records made before a knob was swept lack its column.
KNOB_DEFAULTS = {"num_warps": "default", "table_loads": "position"}
CSV_TYPES = {"num_stages": str, "num_warps": str}


def at_default_knobs(bench: pd.DataFrame) -> pd.DataFrame:
    """The rows at each later knob's default (KNOB_DEFAULTS), every pipelining setting."""
    keep = pd.Series(True, index=bench.index)
    for column, default in KNOB_DEFAULTS.items():
        if column in bench:
            keep &= bench[column] == default
    return bench[keep]


def at_default(bench: pd.DataFrame) -> pd.DataFrame:
    """The rows at Triton's default pipelining and every later knob's default."""
    default = at_default_knobs(bench)
    return default[default["num_stages"] == "default"]


def default_at(bench: pd.DataFrame) -> pd.DataFrame:
    """The rows at Triton's default pipelining and SHOWN_BLOCK."""
    default = at_default(bench)
    return default[default["block_size"] == SHOWN_BLOCK]


def stage_ranges(bench: pd.DataFrame) -> list[dict]:
    """The paged/contiguous ratio's range over every case, per pipelining setting (the default first)."""
    ratio = at_default_knobs(bench).groupby("num_stages")["paged_over_contiguous"]
    low, high = ratio.min(), ratio.max()
    order = sorted(low.index, key=lambda s: (s != "default", s))
    return [{"stages": stages, "low": low[stages], "high": high[stages]} for stages in order]


def gpu_values(folder: Path) -> dict | None:
    """The template's values from a kept GPU check in `folder`, or None where it holds no kernel benchmark."""
    bench_path = folder / "kernels" / "kernel_bench.csv"
    if not bench_path.is_file():
        return None
    bench = pd.read_csv(bench_path, dtype=CSV_TYPES)
    meta = bench_meta(folder)
    profile = json.loads(next((folder / "profile").glob("*.json")).read_text())
    summary = json.loads(next((folder / "replay").glob("*/real_1/summary.json")).read_text())
    swap = json.loads((folder / "swap" / "swap_bench.json").read_text())
    fitted = yaml.safe_load(next((folder / "profile").glob("*.yaml")).read_text())
    a100 = load_hardware("a100-40gb")
    return {
        "folder": shown_path(folder),
        "device": profile["device"], "date": profile["date"][:10], "torch": profile["torch"],
        "triton": profile["triton"], "code": summary["metadata"]["code_version"],
        "calls": int(bench["call"].nunique()), "shown_block": SHOWN_BLOCK,
        "blocks": sorted(int(b) for b in bench["block_size"].unique()),
        "kernels": table(["batch", "context", "contiguous (us)", f"paged, block {SHOWN_BLOCK} (us)",
                          "paged / contiguous", "across blocks", "torch SDPA (us)", "paged: share of peak",
                          "SDPA: share of peak"], kernel_rows(bench, meta["peak_gbps"])),
        "stages": stage_ranges(bench),
        "median_pct": 100 * (default_at(bench)["paged_over_contiguous"].median() - 1),
        "block_spread_pct": 100 * at_default(bench).groupby(["batch", "context_len"])["paged_over_contiguous"].agg(
            lambda ratios: ratios.max() - ratios.min()).max(),
        "ceiling_gb_s": meta["copy_ceiling_gbps"], "peak_gb_s": meta["peak_gbps"],
        "read_gb_s": meta.get("read_ceiling_gbps"),
        "sdpa_max_gb_s": float((bench["kv_bytes"] / (bench["sdpa_mean_us"] * 1e-6) / 1e9).max()),
        "swap": {"latency_us": 1e6 * swap["fit_host_transfer_latency_s"],
                 "link_gb_s": swap["fit_host_link_bandwidth"] / 1e9, "tokens": swap["tokens"], "model": swap["model"],
                 "a100_latency_us": 1e6 * a100.host_transfer_latency_s,
                 "a100_link_gb_s": a100.host_link_bandwidth / 1e9},
        "preset": fitted["name"], "fit_mape_pct": 100 * fitted["fitted"]["source"]["residuals"]["mape"],
        "fit_rows": fitted["fitted"]["source"]["residuals"]["rows"],
        "replay": format_table(pd.read_csv(folder / "replay" / "replay.csv")),
    }


def shown_path(folder: Path) -> str:
    """`folder` relative to the repository where it is inside it."""
    folder = folder.resolve()
    return folder.relative_to(ROOT).as_posix() if folder.is_relative_to(ROOT) else str(folder)


def bench_meta(folder: Path) -> dict:
    """The benchmark's JSON: the device, its datasheet peak and the ceilings measured beside the kernels."""
    return json.loads(next((folder / "kernels").glob("*.json")).read_text())


def kernels(folder: Path = GPU_RUNS) -> str:
    """The section: the paper's penalty, what the sim's GPU presets charge, and what our kernels measured on a GPU
    where a kept GPU check exists."""
    costs = sorted({load_hardware(name).paged_block_cost_tokens for name in available("hardware")} - {0.0})
    return render("write_kernels.md.j2", paper=reference(), costs=costs, gpu=gpu_values(folder))


if __name__ == "__main__":
    print(kernels())
