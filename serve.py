"""`python serve.py engine=paged`: the OpenAI-compatible server (pagedbench/serve.py; also `pagedbench serve`)."""
import sys

from pagedbench.serve import entry

if __name__ == "__main__":
    sys.exit(entry())
