"""The numbers the report quotes beside ours: the paper's figures, the earlier report's ratios and the sharing
figures before their revision.

All are data, kept in `data/reference/` (`paper.yaml`, `earlier_report.yaml`, `sharing_before.yaml`);
this module only reads them into the shapes the report's sections use.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from pagedbench.paths import REFERENCE


@dataclass(frozen=True, slots=True)
class Paper:
    table1: list[tuple]                       # (model, hardware, weights GB, KV GB, slots)
    figure2: dict[str, tuple]                 # engine -> (token states, reservation, internal, external) %
    figure13: dict[tuple[str, float], tuple]  # (workload, rate) -> batch of orca max / pow2 / oracle / vLLM
    saving_alpaca: dict[str, float]           # sampling setting -> memory saving %
    saving_sharegpt: dict[str, str]           # "n" / "beam" -> range of memory saving %
    prefix_ratio: dict[int, float]            # shots -> paged / Orca (Oracle) throughput
    sensitivity_claims: dict[str, float]      # figure ("12", "15", "17") -> claimed paged / Orca (Oracle) ratio


@dataclass(frozen=True, slots=True)
class EarlierReport:
    commit: str
    ratios: dict[tuple[str, str], float]      # (workload, baseline) -> paged / baseline capacity


def _read(name: str, folder: Path) -> dict:
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the report's reference numbers are missing")
    return yaml.safe_load(path.read_text())


@cache
def paper(folder: Path = REFERENCE) -> Paper:
    d = _read("paper.yaml", folder)
    return Paper(
        table1=[(r["model"], r["hardware"], r["weights_gb"], r["kv_gb"], r["slots"]) for r in d["table1_kv_budget"]],
        figure2={k: tuple(v) for k, v in d["figure2_memory_split"].items()},
        figure13={(r["workload"], float(r["request_rate"])): tuple(r["batch"]) for r in d["figure13_batch_size"]},
        saving_alpaca=dict(d["figure14_15_saving_alpaca"]),
        saving_sharegpt={k: str(v) for k, v in d["figure14_15_saving_sharegpt"].items()},
        prefix_ratio={int(k): float(v) for k, v in d["figure16_prefix_ratio"].items()},
        sensitivity_claims={str(k): float(v) for k, v in d["sensitivity_claims"].items()})


@cache
def reference(folder: Path = REFERENCE) -> dict:
    """paper.yaml as it is written (every key), for the templates that quote the paper's figures by name."""
    return _read("paper.yaml", folder)


@cache
def earlier_report(folder: Path = REFERENCE) -> EarlierReport:
    d = _read("earlier_report.yaml", folder)
    return EarlierReport(commit=str(d["commit"]),
                         ratios={(r["workload"], r["baseline"]): float(r["ratio"]) for r in d["ratios"]})


@dataclass(frozen=True, slots=True)
class SharingBefore:
    """The sharing and swapping figures before their revision (`sharing_before.yaml`)."""

    commit: str
    ratio_oracle: dict[str, dict[str, float]]          # experiment -> setting -> paged / Orca (Oracle)
    saving: dict[str, dict[str, float]]                # experiment -> setting -> memory saving %
    swap_latency: dict[str, dict[int, float]]          # preemption -> block size -> s/token


@cache
def sharing_before(folder: Path = REFERENCE) -> SharingBefore:
    d = _read("sharing_before.yaml", folder)
    return SharingBefore(commit=str(d["commit"]),
                         ratio_oracle={k: {str(s): float(v) for s, v in g.items()} for k, g in d["ratio_oracle"].items()},
                         saving={k: {str(s): float(v) for s, v in g.items()} for k, g in d["saving"].items()},
                         swap_latency={k: {int(b): float(v) for b, v in g.items()}
                                       for k, g in d["swap_latency"].items()})
