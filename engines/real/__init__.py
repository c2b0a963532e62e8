"""The real backend: a transformers model runs every iteration on the engine's own KV layout."""
