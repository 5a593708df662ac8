"""2:4 sparsity (placeholder until the rule table lands)."""

from __future__ import annotations


def candidates(context, candidates, calibration, layers, channels, plans, pruner) -> list:
    return []
