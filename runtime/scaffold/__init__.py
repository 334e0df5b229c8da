"""Templates for `cdcflow plugins init`."""
