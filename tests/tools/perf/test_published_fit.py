"""The fit of the performance model's constants (tests/benchmarks/published_fit.py): fit rows only, and a known value
recovered on a toy module, with the module's own values kept."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.benchmarks.published_fit import fit_terms, round2

TOY = {"RATE": (("RATE",), 0.1, 10.0), "share": (("TABLE", "a", "b"), 0.05, 1.0)}


def _rows(split: str = "fit"):
    return [SimpleNamespace(id=f"r{k}", split=split, ms=ms, work=work) for k, (ms, work) in enumerate(((2.0, 4.0), (3.0, 6.0), (5.0, 10.0)))]


def test_the_fit_finds_the_value_the_rows_say_and_leaves_the_module_as_it_was():
    module = SimpleNamespace(RATE=1.0, TABLE={"a": 0.5, "b": 0.5, "c": 0.9})
    fitted = fit_terms(_rows(), lambda row: row.work / module.RATE * module.TABLE["b"] * 2, module, {"RATE": TOY["RATE"]})
    assert fitted["RATE"] == pytest.approx(2.0, rel=1e-3)  # ms = work / rate: every row says 2
    assert module.RATE == 1.0 and module.TABLE == {"a": 0.5, "b": 0.5, "c": 0.9}


def test_a_term_of_several_keys_sets_them_together():
    module = SimpleNamespace(RATE=1.0, TABLE={"a": 0.5, "b": 0.5, "c": 0.9})
    seen = []

    def predict(row):
        seen.append((module.TABLE["a"], module.TABLE["b"], module.TABLE["c"]))
        return row.work * module.TABLE["a"]

    fitted = fit_terms(_rows(), predict, module, {"share": TOY["share"]})
    assert fitted["share"] == pytest.approx(0.5, rel=1e-3)
    assert all(a == b and c == 0.9 for a, b, c in seen)


def test_held_out_rows_are_never_fitted_on():
    module = SimpleNamespace(RATE=1.0, TABLE={"a": 0.5, "b": 0.5})
    with pytest.raises(ValueError, match="held out"):
        fit_terms(_rows() + _rows("held_out"), lambda row: row.work, module, {"RATE": TOY["RATE"]})
    with pytest.raises(ValueError):
        fit_terms([], lambda row: 1.0, module, {"RATE": TOY["RATE"]})


def test_rounding_keeps_two_significant_digits():
    assert (round2(0.005681), round2(0.6011), round2(75.73), round2(0.0)) == (0.0057, 0.6, 76.0, 0.0)
