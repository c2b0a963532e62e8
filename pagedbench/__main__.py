"""`python -m pagedbench ...`: the same command as the `pagedbench` script."""
import sys

from pagedbench.cli import main

sys.exit(main())
