"""The criteria the report states, read from the config that the runs used: the capacity search's latency bound
and goodput attainment (conf/hydra/sweeper/capacity.yaml), the goodput SLO and the steady window's warm-up
(conf/config.yaml). The report's prose takes them from here, never from a number typed into it."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

from pagedbench.paths import CONF


@dataclass(frozen=True, slots=True)
class Criteria:
    latency_s_per_token: float   # mean normalized latency bound of the latency criterion (s/token)
    attainment: float            # share of requests meeting the SLO, goodput criterion
    ttft_s: float                # the SLO's TTFT bound (s)
    tpot_s: float                # the SLO's TPOT bound (s)
    warmup_fraction: float       # the steady window starts after this fraction of the arrival span
    precision: float             # the capacity search's relative precision
    start_rate: float            # where the search starts (req/s)


@cache
def criteria() -> Criteria:
    search = yaml.safe_load((CONF / "hydra" / "sweeper" / "capacity.yaml").read_text())
    by_name = {c["name"]: c for c in search["criteria"]}
    measure = yaml.safe_load((CONF / "config.yaml").read_text())["measure"]
    return Criteria(latency_s_per_token=float(by_name["latency"]["threshold"]),
                    attainment=float(by_name["goodput"]["attainment"]),
                    ttft_s=float(measure["slo"]["ttft_s"]), tpot_s=float(measure["slo"]["tpot_s"]),
                    warmup_fraction=float(measure["warmup_fraction"]), precision=float(search["precision"]),
                    start_rate=float(search["start_rate"]))
