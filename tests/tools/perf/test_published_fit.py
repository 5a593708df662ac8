"""The fit of the performance model's constants (tests/benchmarks/published_fit.py): fit rows only, and a known value
recovered on a toy module, with the module's own values kept; and the fitted harness time of a published source
scaled to each module's CPU clock."""

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


def test_the_harness_time_scales_with_the_modules_cpu_clock():
    from tools.perf.published import HARNESS_MS, harness_ms, published_table

    sources = published_table()[0]
    fitted_ms, fitted_ghz = HARNESS_MS["ultralytics-call"]
    assert harness_ms(sources["ultralytics-agx"], "jetson-agx-orin-64gb") == pytest.approx(fitted_ms)  # where it was fitted
    nano = harness_ms(sources["ultralytics-nano-nx"], "jetson-orin-nano-8gb")
    assert nano == pytest.approx(fitted_ms * fitted_ghz / 1.7) and nano > fitted_ms
    assert harness_ms(sources["mlperf-v3.1"], "jetson-agx-orin-64gb") == 0.0  # LoadGen adds nothing


def test_a_harness_source_without_its_modules_cpu_clock_is_refused(tmp_path):
    from sdk.errors import ConfigError
    from tools.perf.published import published_table

    row = ('{id: r, source: s, model: yolo11n, module: jetson-orin-nx-16gb, power_mode: MAXN, engine: gpu, precision: fp16, '
           'batch: 1, published: 5, unit: ms, ms: 5, split: held_out}')  # fmt: skip
    path = tmp_path / "published.yaml"
    path.write_text(f"sources:\n  s: {{title: t, url: u, harness: ultralytics-call, cpu_ghz: {{jetson-agx-orin-64gb: 2.2}}}}\nrows:\n  - {row}\n")
    with pytest.raises(ConfigError, match="no cpu_ghz for jetson-orin-nx-16gb"):
        published_table(path)
