"""pagedbench's Hydra sweeper plugin (Hydra loads sweepers only from the `hydra_plugins` namespace).

Holds the wiring of the capacity search into Hydra's launchers; the search
itself lives in `pagedbench.results.sweeps.capacity`. May import `results`; nothing imports it.
"""
