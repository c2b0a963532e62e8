"""What the serving setup is: the model's shape (`model`), a device's capabilities (`hardware`),
loading their presets from `conf/` (`presets`), and building a config dataclass from a plain mapping
(`mapping`). Pure arithmetic and dataclasses; imports nothing else of `engines` (presets reads YAML
with omegaconf).
"""
