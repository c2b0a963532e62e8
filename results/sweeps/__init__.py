"""Many runs read together: `collect` (a sweep's run folders as one table, and
its failures), `sustainable` (sustainable request rates and paged/baseline
ratios over a sweep of rates) and `capacity` (the capacity search's state,
tables and ratios; a command). May import `pagedbench.results.record`, never `pagedbench.results.report`.
"""
