"""Budgets on labels: `budgets.accuracy.map50_95`, `map50` and, per class, `min_recall_at_precision` (the recall
at the evaluation's precision, tools/evaluate/operating.py), minimums judged on the bootstrap interval over images.

As every budget of the SDK (decision 0016): PASS needs the 95 % confidence bound on the right side of the limit (here
the one-sided lower bound of the figure, the 5th percentile of its bootstrap replicates); FAIL needs the measured
figure on the wrong side; anything between is INCONCLUSIVE, with about how many images would settle it (the
interval narrows as one over the square root of the images).
"""

from __future__ import annotations

import math

from sdk.runtime.verdict import FAIL, INCONCLUSIVE, PASS, BudgetCheck
from sdk.spec.budgets import RECALL_AT_PRECISION, AccuracyBudget


def images_needed(measured: float, lower: float, limit: float, images: int) -> int | None:
    """Images for the lower bound to clear the limit, at the same figure and spread (None: it cannot)."""
    if measured <= limit:
        return None
    spread = measured - lower
    if spread <= 0:
        return images
    return math.ceil(images * (spread / (measured - limit)) ** 2)


def class_figures(budgets: AccuracyBudget | None, classes, to_category: dict[int, int], per_class: list[dict]) -> tuple[dict, dict, dict]:
    """(figures, lower bounds, intervals) of the budgeted classes' recall at precision, keyed as label_minimums() names
    them (`min_recall_at_precision.CLASS`), to merge into mAP's before label_checks; `classes`: the model's, in order;
    `to_category`: the class map's; `per_class`: the per-class rows with operating.py's figures. A class without a row
    (no label of its category among the scored images) has no figure."""
    stats: dict = {}
    lower: dict = {}
    intervals: dict = {}
    if budgets is None:
        return stats, lower, intervals
    rows = {row["category_id"]: row for row in per_class}
    for name in budgets.min_recall_at_precision:
        index = classes.index(name) if name in classes else -1
        row = rows.get(to_category.get(index), {})
        key = f"{RECALL_AT_PRECISION}.{name}"
        stats[key], lower[key] = row.get("recall_at_precision"), row.get("recall_at_precision_lower")
        intervals[key] = row.get("recall_at_precision_interval")
    return stats, lower, intervals


def _what(figure: str, precision: float | None) -> str:
    """What a per-class figure is, for its check's detail ('' for mAP's)."""
    if not figure.startswith(f"{RECALL_AT_PRECISION}."):
        return ""
    at = f" {precision:g}" if precision is not None else ""
    return f"recall of class {figure.partition('.')[2]!r} at precision{at} (IoU 0.5); "


def label_checks(
    budgets: AccuracyBudget | None, stats: dict, lower_bounds: dict, intervals: dict, images: int, precision: float | None = None
) -> list[BudgetCheck]:
    """The budgets on labels judged; `precision`: the evaluation's, which the per-class recall is taken at."""
    checks: list[BudgetCheck] = []
    if budgets is None:
        return checks
    for figure, limit in budgets.label_minimums():
        name = f"accuracy.{figure}"
        measured, lower = stats.get(figure), lower_bounds.get(figure)
        interval = intervals.get(figure)
        spread = f"95% interval {interval[0]:.4f} to {interval[1]:.4f} over {images} images" if interval else "no interval"
        shown = _what(figure, precision) + spread
        if measured is None:
            missing = "no label of its category among the scored images" if _what(figure, precision) else "no labels to score"
            checks.append(BudgetCheck(name, limit, None, INCONCLUSIVE, images, None, f"{_what(figure, precision)}{missing}"))
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


__all__ = ["UNLABELLED", "class_figures", "images_needed", "label_checks", "unlabelled_checks"]
