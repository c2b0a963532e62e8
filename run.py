"""`python run.py engine=paged workload=sharegpt`: the run command (pagedbench/run.py; also `pagedbench run`)."""
import sys

from pagedbench.run import entry

if __name__ == "__main__":
    sys.exit(entry())
