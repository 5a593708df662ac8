"""Fitting the DLA's constants of the performance model (tools/perf/engines.py) on the published table's fit rows
(tools/perf/data/published.yaml, `split: fit`; decisions 1016 and 1140), never on a held-out row.

`python tests/benchmarks/bench_published.py --fit` runs it: least squares of log(predicted / published) over the DLA
fit rows (Nelder-Mead, bounded, from the constants as they are) of the terms SHARED_TERMS names, printing each before
and after, rounded to two significant digits, and each fit row's error with the rounded values. It changes no file: the printed values
are written into tools/perf/engines.py by hand, with the decision that says why. Not a benchmark itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

# Each fitted term: where it lives in tools/perf/engines.py (a name, or a name and a key of that dict; a term may set
# several keys), and its bounds. Deconvolution and GEMM share one efficiency (no fit row tells them apart).
DLA_TERMS = {
    "DLA_LAYER_MS": (("DLA_LAYER_MS",), 0.0, 0.05),
    "DLA_BANDWIDTH_EFFICIENCY": (("DLA_BANDWIDTH_EFFICIENCY",), 0.2, 1.0),
    "dense": (("DLA_EFFICIENCY", "conv"), 0.3, 1.0),
    "1x1": (("DLA_EFFICIENCY", "conv_pointwise"), 0.2, 1.0),
    "deconvolution and GEMM": (("DLA_EFFICIENCY", "conv_transpose", "gemm"), 0.1, 1.0),
    "depthwise": (("DLA_EFFICIENCY", "conv_depthwise"), 0.01, 0.5),
    "DLA_GROUPED": (("DLA_GROUPED",), 0.02, 1.0),
    "DLA_ROWS_HALF": (("DLA_ROWS_HALF",), 1.0, 400.0),
}

# What decision 1140's refit moves: the terms every network's layers pay. The op-class terms stay as decision 1016
# fitted them: six fit rows cannot hold eight free terms (a refit of all eight put the GEMM efficiency at 0.13, from
# ResNet-50's one classifier layer).
SHARED_TERMS = ("DLA_LAYER_MS", "DLA_BANDWIDTH_EFFICIENCY", "dense")


def read_terms(module, terms: dict = DLA_TERMS) -> dict[str, float]:
    """The terms' current values in `module` (the first key where a term sets several)."""
    values = {}
    for name, (where, _low, _high) in terms.items():
        value = getattr(module, where[0])
        values[name] = value[where[1]] if len(where) > 1 else value
    return values


def write_terms(module, values: dict[str, float], terms: dict = DLA_TERMS) -> None:
    for name, value in values.items():
        where = terms[name][0]
        if len(where) == 1:
            setattr(module, where[0], value)
        else:
            table = dict(getattr(module, where[0]))
            table.update(dict.fromkeys(where[1:], value))
            setattr(module, where[0], table)


def snapshot(module, terms: dict = DLA_TERMS) -> dict:
    """The module's attributes the terms live in, as they are (to put back with restore)."""
    return {where[0]: getattr(module, where[0]) for where, _low, _high in terms.values()}


def restore(module, saved: dict) -> None:
    for attribute, value in saved.items():
        setattr(module, attribute, value)


def round2(value: float) -> float:
    """Two significant digits."""
    if value == 0:
        return 0.0
    return round(value, 1 - int(math.floor(math.log10(abs(value)))))


def fit_terms(rows: list, predict: Callable[[object], float], module, terms: dict = DLA_TERMS) -> dict[str, float]:
    """The values of `terms` (in `module`) that minimise the sum of log(predict(row) / row.ms)^2 over `rows`, every one
    a fit row (a held-out row raises ValueError: it only checks the constants). `predict(row)` predicts with the
    module's values as they are when called. The module keeps its values."""
    from scipy.optimize import minimize

    held_out = [r.id for r in rows if r.split != "fit"]
    if held_out or not rows:
        raise ValueError(f"the constants are fitted on fit rows only; held out: {held_out or 'no rows given'}")
    names = list(terms)
    start, saved = read_terms(module, terms), snapshot(module, terms)

    def loss(x) -> float:
        write_terms(module, dict(zip(names, x, strict=True)), terms)
        return sum(math.log(max(predict(r), 1e-9) / r.ms) ** 2 for r in rows)

    try:
        result = minimize(loss, [start[n] for n in names], method="Nelder-Mead", bounds=[terms[n][1:] for n in names],
                          options={"xatol": 1e-4, "fatol": 1e-7, "maxfev": 4000})  # fmt: skip
    finally:
        restore(module, saved)
    return dict(zip(names, (float(v) for v in result.x), strict=True))


def fit_dla(rows: list, build: Callable[[str], object], names: tuple[str, ...] = SHARED_TERMS) -> dict:
    """The DLA fit of the terms `names` on the table's DLA fit rows (`build(model_name)`: its ONNX file): {"before",
    "fitted", "rounded", "rows": [(id, published ms, predicted ms with the rounded values)]}."""
    from tools.perf import engines
    from tools.perf.bare_model import bare_layers
    from tools.perf.predict import predict_device
    from tools.perf.published import TENSORRT, published_table
    from tools.perf.targets import device_prediction

    sources = published_table()[0]
    chosen = [r for r in rows if r.split == "fit" and r.engine == "dla"]
    prepared = {}
    for row in chosen:
        model = bare_layers(build(row.model), row.batch)
        _, target, placement = device_prediction(model, None, row.module, row.precision, True, TENSORRT, row.power_mode)
        prepared[row.id] = (model, target, placement, sources[row.source].get("input_format") == "dla_hwc4")

    def predict(row) -> float:
        model, target, placement, image = prepared[row.id]
        return predict_device(model, target, row.precision, placement, sparse=row.sparse, image_input=image).total_ms

    terms = {name: DLA_TERMS[name] for name in names}
    before, saved = read_terms(engines, terms), snapshot(engines, terms)
    fitted = fit_terms(chosen, predict, engines, terms)
    rounded = {k: round2(v) for k, v in fitted.items()}
    write_terms(engines, rounded, terms)
    try:
        checked = [(r.id, r.ms, predict(r)) for r in chosen]
    finally:
        restore(engines, saved)
    return {"before": before, "fitted": fitted, "rounded": rounded, "rows": checked}
