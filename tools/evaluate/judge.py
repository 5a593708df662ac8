"""Budgets on labels: `budgets.accuracy.map50_95` and `map50`, minimums judged on the bootstrap interval over images.

As every budget of the SDK (decision 0016): PASS needs the 95 % confidence bound on the right side of the limit (here
the one-sided lower bound of the figure, the 5th percentile of its bootstrap replicates); FAIL needs the measured
figure on the wrong side; anything between is INCONCLUSIVE, with about how many images would settle it (the
interval narrows as one over the square root of the images).
"""

from __future__ import annotations

import math

from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, BudgetCheck
from sdk.spec.budgets import AccuracyBudget


def images_needed(measured: float, lower: float, limit: float, images: int) -> int | None:
    """Images for the lower bound to clear the limit, at the same figure and spread (None: it cannot)."""
    if measured <= limit:
        return None
    spread = measured - lower
    if spread <= 0:
        return images
    return math.ceil(images * (spread / (measured - limit)) ** 2)


def label_checks(budgets: AccuracyBudget | None, stats: dict, lower_bounds: dict, intervals: dict, images: int) -> list[BudgetCheck]:
    checks: list[BudgetCheck] = []
    if budgets is None:
        return checks
    for figure, limit in budgets.label_minimums():
        name = f"accuracy.{figure}"
        measured, lower = stats.get(figure), lower_bounds.get(figure)
        interval = intervals.get(figure)
        shown = f"95% interval {interval[0]:.4f} to {interval[1]:.4f} over {images} images" if interval else "no interval"
        if measured is None:
            checks.append(BudgetCheck(name, limit, None, INCONCLUSIVE, images, None, "no labels to score"))
        elif measured < limit:
            checks.append(BudgetCheck(name, limit, measured, FAIL, images, None, f"the measured figure is under the minimum; {shown}", lower))
        elif lower is not None and lower >= limit:
            checks.append(BudgetCheck(name, limit, measured, PASS, images, None, f"95% lower bound {lower:.4f} is within; {shown}", lower))
        else:
            needed = images_needed(measured, lower, limit, images) if lower is not None else None
            detail = f"measured within the minimum but its 95% lower bound {lower:.4f} is not; {shown}" if lower is not None else shown
            checks.append(BudgetCheck(name, limit, measured, INCONCLUSIVE, images, needed, detail, lower))
    return checks


UNLABELLED = "a budget on labels: this run's frames have none, so it is not judged here (sdk evaluate judges it on labelled images)"


def unlabelled_checks(budgets: AccuracyBudget | None) -> list[BudgetCheck]:
    """A run without labels (a deploy, `sdk validate`): each budget on labels INCONCLUSIVE, saying where it is judged."""
    if budgets is None:
        return []
    return [BudgetCheck(f"accuracy.{name}", limit, None, INCONCLUSIVE, 0, None, UNLABELLED) for name, limit in budgets.label_minimums()]


__all__ = ["UNLABELLED", "images_needed", "label_checks", "unlabelled_checks"]
