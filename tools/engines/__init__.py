"""Engines on the host: the build gate (analysis + contract + plan) and the engine cache."""
