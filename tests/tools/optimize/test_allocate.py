"""The greedy allocation stops once the largest wanted saving is reached, and every plan is the one the full run of
steps gives (the steps after it only lengthen the list that no plan reads)."""

from __future__ import annotations

from tools.optimize.allocate import allocate, plan_at


def _problem():
    """Three spaces of 16 counts each; a space's time is linear in its count, its error quadratic in what it drops,
    with different weights, so the greedy order interleaves them."""
    spaces = {space: list(range(60, 0, -4)) for space in (1, 2, 3)}
    weights = {1: 1.0, 2: 0.5, 3: 2.0}
    calls = []

    def predict(counts: dict[int, int]) -> float:
        calls.append(dict(counts))
        return sum(weights[s] * counts.get(s, 64) for s in spaces)

    errors = {s: (lambda count, s=s: (64 - count) ** 2 / weights[s]) for s in spaces}
    return spaces, errors, predict, calls


def test_stopping_at_the_largest_saving_gives_every_plan_the_full_run_gives_with_fewer_predictions():
    spaces, errors, predict, full_calls = _problem()
    base, steps = allocate(spaces, errors, predict)
    savings = (0.1, 0.2, 0.3)
    spaces, errors, predict, early_calls = _problem()
    early_base, early = allocate(spaces, errors, predict, saving=max(savings))
    assert early_base == base and early == steps[: len(early)]
    assert early[-1].ms <= base * 0.7 < early[-2].ms  # it stopped at the first step that reached the largest saving
    assert len(early) < len(steps) and len(early_calls) < len(full_calls)
    for saving in savings:
        assert plan_at(early, base, saving) == plan_at(steps, base, saving) is not None


def test_a_saving_beyond_reach_runs_every_step_as_before():
    spaces, errors, predict, _ = _problem()
    base, steps = allocate(spaces, errors, predict)
    spaces, errors, predict, _ = _problem()
    assert allocate(spaces, errors, predict, saving=0.99) == (base, steps)
    assert plan_at(steps, base, 0.99) is None
