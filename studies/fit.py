"""Fit the cost model's linear terms to a profile of real iteration times, and write a hardware preset.

    python -m pagedbench.studies.fit data/profiles/cpu_tiny.parquet --base cpu --name cpu-tiny

Each profiled iteration i has features x_i (whether it is a prefill, its rows,
tokens, prefill pairs, decode context tokens by layout, paged blocks touched;
see FEATURES) and a measured time t_i. The fit is non-negative least squares
on relative error, min ||(X c - t) / t|| with c >= 0 (Lawson and Hanson's
active-set method, on unit-norm columns), so a 4 ms shape counts as much as
a 60 ms one and no coefficient can be negative (each is a cost). The preset
written is the base preset's numbers (memory, for the KV budget) plus a
`fitted` block: the coefficients, the model they hold for, and where they
came from (profile file, its device and date, the fit's residuals).
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
import sys

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
import yaml

from pagedbench.engines.specs.presets import available
from pagedbench.paths import CONF

# Feature -> what one unit of it costs (seconds): the linear cost model of engines/sim/linear_cost.py.
FEATURES = {
    "overhead_s": "every iteration",
    "prefill_iteration_s": "every iteration that holds a prefill, once",
    "per_row_s": "each sequence in the batch (sampling, per-sequence work)",
    "per_token_s": "each token computed (linear layers)",
    "prefill_pair_s": "each prefill query-key pair, sum of L * (L + 1)",
    "contiguous_ctx_s": "each context token a contiguous decode row attends over",
    "paged_ctx_s": "each context token a paged decode row attends over",
    "paged_block_s": "each block a paged decode row reads",
}


def design_matrix(df: pd.DataFrame) -> np.ndarray:
    """Features of each profiled iteration, in FEATURES order."""
    paged = (df["layout"] == "paged").to_numpy()
    prefill = (df["kind"] == "prefill").to_numpy(dtype=float)
    ctx = df["decode_ctx"].to_numpy(dtype=float)
    return np.column_stack([
        np.ones(len(df)), prefill, df["rows"].to_numpy(dtype=float), df["tokens"].to_numpy(dtype=float),
        df["prefill_pairs"].to_numpy(dtype=float), np.where(paged, 0.0, ctx), np.where(paged, ctx, 0.0),
        df["decode_blocks"].to_numpy(dtype=float),
    ])


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """argmin ||a x - b||_2 subject to x >= 0 (Lawson-Hanson active set, on unit-norm columns).

    A profile's relative-error design has columns a million times apart (prefill pairs against the
    constant), so the solve runs on a / ||a_j|| and scales the answer back: its tolerances then compare
    numbers of b's size, and a larger profile no longer drops a real term as if it were rounding.
    """
    m, n = a.shape
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    u = a / scale
    tol = 10 * np.finfo(float).eps * max(m, n) * max(float(np.linalg.norm(b)), np.finfo(float).tiny)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = u.T @ b
    for _ in range(max_iter or 3 * n):
        candidates = ~passive & (w > tol)
        if not candidates.any():
            break
        passive[np.argmax(np.where(candidates, w, -np.inf))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(u[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                break
            bad = passive & (z <= 0)                # step back to where the first of them reaches 0
            alpha = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = z
        w = u.T @ (b - u @ x)
    return x / scale


def fit(df: pd.DataFrame) -> tuple[dict[str, float], dict]:
    """Coefficients by name, and the fit's residuals (MAPE, max error, rows) on the profile itself."""
    if df.empty:
        raise ValueError("the profile has no rows")
    x = design_matrix(df)
    t = df["time_s"].to_numpy(dtype=float)
    if not (t > 0).all():
        raise ValueError("every profiled time must be positive")
    coef = nnls(x / t[:, None], np.ones(len(t)))
    predicted = x @ coef
    err = (predicted - t) / t
    by_kind = {f"mape_{k}": float(np.mean(np.abs(err[(df["kind"] == k).to_numpy()]))) for k in ("prefill", "decode")
               if (df["kind"] == k).any()}
    residuals = {"mape": float(np.mean(np.abs(err))), "max_abs_error": float(np.max(np.abs(err))),
                 **by_kind, "rows": int(len(df))}
    return dict(zip(FEATURES, (float(c) for c in coef))), residuals


def write_preset(coef: dict, residuals: dict, env: dict, profile_path: Path, base: str, name: str,
                 conf_dir: Path = CONF) -> Path:
    """conf/hardware/NAME.yaml: the base preset's numbers, the fitted block and its provenance."""
    if base not in available("hardware"):
        raise ValueError(f"unknown base hardware preset {base!r}; available: {available('hardware')}")
    # OmegaConf reads the preset as Hydra does (PyYAML alone takes 192.0e9 for a string).
    preset = OmegaConf.to_container(OmegaConf.load(conf_dir / "hardware" / f"{base}.yaml"), resolve=True)
    preset["name"] = name
    preset["fitted"] = {
        "model": env.get("model"), "dtype": env.get("dtype"), **{k: float(f"{v:.6g}") for k, v in coef.items()},
        "source": {"profile": str(profile_path), "device": env.get("device"), "kernels": env.get("kernels"),
                   "torch": env.get("torch"), "torch_threads": env.get("torch_threads"),
                   "profiled": env.get("date"), "base_preset": base,
                   "fitted": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "residuals": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in residuals.items()}},
    }
    out = conf_dir / "hardware" / f"{name}.yaml"
    header = (f"# Fitted by `python -m pagedbench.studies.fit {profile_path} --base {base} --name {name}`: the {base} "
              f"preset's numbers,\n# with iteration times from the linear terms below (non-negative least "
              f"squares on a real-backend profile).\n")
    out.write_text(header + yaml.safe_dump(preset, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.fit", description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="a profile table from python -m pagedbench.studies.profile (.parquet, or "
                        "the .rows.csv it appends to as it measures, when a run was cut short)")
    parser.add_argument("--base", required=True, help="the hardware preset whose memory and datasheet numbers to keep")
    parser.add_argument("--name", required=True, help="the new preset's name: conf/hardware/NAME.yaml")
    args = parser.parse_args(argv)
    try:
        df = pd.read_csv(args.profile) if args.profile.suffix == ".csv" else pd.read_parquet(args.profile)
        env_path = args.profile.with_suffix(".json")
        env = json.loads(env_path.read_text()) if env_path.is_file() else {}
        coef, residuals = fit(df)
        out = write_preset(coef, residuals, env, args.profile, args.base, args.name)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for key, value in coef.items():
        print(f"  {key:<20} {value:.4g}   ({FEATURES[key]})")
    print(f"fit on {residuals['rows']} profiled iterations: MAPE {100 * residuals['mape']:.1f}%, "
          f"worst {100 * residuals['max_abs_error']:.1f}%")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
