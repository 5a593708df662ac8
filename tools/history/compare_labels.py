"""mAP of B against A where both were scored on labels: a paired bootstrap over the same images.

Two evaluations of the same labelled images are resampled together (tools/history/label_matches.py): each draw counts each
drawn image as often in A as in B, so the interval is the difference's own. Evaluations of different images or labels
cannot be paired: their figures are shown, not tested, and a note says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tools.history.stats import DRAWS, SEED, Difference

FIGURES = ("map50_95", "map50")


@dataclass
class LabelPairs:
    """What the two sides' evaluations on labels allow: the figures (`pairs`: name -> PairedFigure, or None when only
    shown), and notes."""

    shown: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (a, b)
    pairs: dict = field(default_factory=dict)  # name -> PairedFigure (tested)
    notes: list[str] = field(default_factory=list)

    @property
    def tested(self) -> int:
        return len(self.pairs)

    def differences(self, alpha: float) -> list[tuple[Difference, bool]]:
        """Each figure's difference B - A with its (1 - alpha) percentile interval over the paired draws, and whether tested."""
        from tools.history.stats import verdict_of

        out = []
        for name in FIGURES:
            key = f"accuracy.{name}"
            if name in self.pairs and self.pairs[name].bounded:
                pair = self.pairs[name]
                low, high = (float(v) for v in np.quantile(pair.draws, [alpha / 2, 1 - alpha / 2]))
                verdict = verdict_of(low, high, 0.0, lower_is_better=False)
                out.append((Difference(key, pair.a, pair.b, pair.difference, (low, high), verdict, False, 0.0), True))
            elif name in self.pairs:  # no finite draw: shown, not tested (label_pairs notes why)
                pair = self.pairs[name]
                out.append((Difference(key, pair.a, pair.b, pair.difference, None, "same", False, 0.0), False))
            elif name in self.shown:
                a, b = self.shown[name]
                out.append((Difference(key, a, b, b - a, None, "same", False, 0.0), False))
        return out


def label_pairs(a, b, draws: int = DRAWS, seed: int = SEED) -> LabelPairs:
    """The sides' evaluations on labels (a Side each: tools/history/compare.py), paired where they can be."""
    from tools.history.label_matches import paired_difference, why_unpaired

    found = LabelPairs()
    with_a, with_b = [r for r in a.runs if r.labels is not None], [r for r in b.runs if r.labels is not None]
    if not with_a or not with_b:
        if with_a or with_b:
            side = "A" if with_a else "B"
            found.notes.append(f"only {side} was scored on labels: no mAP to compare")
        return found
    run_a, run_b = with_a[0], with_b[0]
    if len(with_a) > 1 or len(with_b) > 1:
        found.notes.append("several runs scored on labels on a side: mAP is compared between the newest of each (the images decide it, not the run)")
    problem = why_unpaired(run_a.labels, run_b.labels)
    if problem is not None:
        fa, fb = run_a.labels.figures(), run_b.labels.figures()
        found.shown = {name: (float(fa[i]), float(fb[i])) for i, name in enumerate(FIGURES)}
        found.notes.append(f"mAP shown, not tested: {problem}")
        return found
    found.pairs = paired_difference(run_a.labels, run_b.labels, draws=draws, seed=seed)
    found.notes.append(f"mAP: paired bootstrap over the same {len(run_a.labels.image_ids)} labelled images ({draws} draws)")
    unbounded = [name for name, pair in found.pairs.items() if not pair.bounded]
    if unbounded:
        found.notes.append(f"{', '.join(unbounded)} shown, not tested: no scored image holds a labelled object, so no draw gives an interval")
    return found


__all__ = ["LabelPairs", "label_pairs"]
