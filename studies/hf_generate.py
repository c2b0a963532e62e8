"""An outside reference point: the same trace through `transformers` `generate` with static batching.

    python -m pagedbench.studies.hf_generate                                   # the default real-backend trace and model
    python -m pagedbench.studies.hf_generate --batch-size 8 workload.num_requests=50
    python -m pagedbench.studies.hf_generate --out DIR workload.num_requests=24  # also DIR/hf_generate.json (the report's)

Requests are taken in arrival order, `batch_size` at a time (default: as
many max_seq_len regions as the static engine's KV budget holds), prompts
left-padded, and each batch generates until its longest request's output
length (EOS ignored, like our engines). Throughput counts each request's own
output tokens only, as our summary does. Prints one JSON line (and writes it to OUT/hf_generate.json with
`--out`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import time

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
import torch

from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.real.build import RealBackendConfig
from pagedbench.engines.real.kv_cache import bytes_per_slot, kv_budget_bytes
from pagedbench.engines.real.model import build_model, resolve_device, resolve_dtype
from pagedbench.paths import CONF
from pagedbench.workloads import WorkloadConfig, build_workload

RESULT = "hf_generate.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.hf_generate", description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=None,
                        help="requests per generate call (default: max_seq_len regions the KV budget holds)")
    parser.add_argument("--out", type=Path, help="a folder for hf_generate.json")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides, as for run.py (workload.num_requests=24, model=..., backend.*)")
    args = parser.parse_args(argv)
    if args.batch_size is not None and args.batch_size < 1:
        parser.error("--batch-size must be >= 1")
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=args.overrides)
    spec = ModelSpec.from_dict(OmegaConf.to_container(cfg.model, resolve=True))
    backend = RealBackendConfig.from_dict(OmegaConf.to_container(cfg.backend, resolve=True))
    device = resolve_device(backend.device)
    dtype = resolve_dtype(backend.dtype, device)
    model = build_model(spec, device, dtype, seed=backend.seed, path=spec.path)
    model.set_attn_implementation("sdpa")
    if args.batch_size is not None:
        batch_size = args.batch_size
    else:
        per_slot = bytes_per_slot(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype)
        budget = kv_budget_bytes(device, backend.kv_budget_mib, backend.kv_budget_fraction, backend.cpu_kv_budget_mib)
        batch_size = max(1, min(cfg.limits.max_num_seqs, budget // per_slot // spec.max_seq_len))
    requests = build_workload(WorkloadConfig.from_dict(OmegaConf.to_container(cfg.workload, resolve=True)))
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0

    def generate(batch) -> None:
        width = max(r.prompt_len for r in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):       # left padding
            ids[i, width - r.prompt_len:] = torch.tensor(r.prompt_token_ids) % spec.vocab_size
            mask[i, width - r.prompt_len:] = 1
        steps = max(r.output_len for r in batch)
        with torch.inference_mode():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=steps,
                           min_new_tokens=steps, do_sample=False, pad_token_id=pad)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    generate(requests[:1])                  # warm-up, not timed
    start = time.perf_counter()
    for i in range(0, len(requests), batch_size):
        generate(requests[i:i + batch_size])
    wall = time.perf_counter() - start
    out = {"reference": "transformers generate, static batching", "model": spec.name, "device": str(device),
           "dtype": str(dtype), "num_requests": len(requests), "batch_size": batch_size, "wall_s": wall,
           "output_tokens_per_s": sum(r.output_len for r in requests) / wall,
           "requests_per_s": len(requests) / wall}
    print(json.dumps(out))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / RESULT).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
