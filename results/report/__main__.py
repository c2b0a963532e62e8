"""`python -m pagedbench.results.report`: write the report of every part that has runs, by default to outputs/report/REPORT.md
with its figures/ beside it (see `pagedbench.results.report.write`)."""
import sys

from pagedbench.results.report.write import main

sys.exit(main())
