"""`python -m results.report`: regenerate docs/REPORT.md and docs/figures/ (see `results.report.write`)."""
import sys

from results.report.write import main

sys.exit(main())
