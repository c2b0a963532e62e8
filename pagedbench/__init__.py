"""The `pagedbench` command: one entry point for a run, the server, a benchmark of any OpenAI-compatible
server with vLLM's flag names, and the report (`pagedbench --help`; pagedbench/cli.py)."""
