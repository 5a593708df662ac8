"""Latency and accuracy acceptance on the host: validation runs, determinism, reference, reports, pytest plugin."""
