"""Performance on the host side: per-layer static analysis, the profile's mapping and report, the performance model."""
