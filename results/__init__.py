"""What a run records and how it is summarised."""
