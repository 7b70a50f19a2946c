"""Setup, demo, benchmark and load scripts (not part of the installed product)."""
