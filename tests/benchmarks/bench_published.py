"""`sdk predict` against published Jetson figures: every row of tools/perf/data/published.yaml (MLPerf Inference v3.1
SingleStream latencies, NVIDIA's DLA-SW per-DLA throughputs, Ultralytics' Jetson TensorRT times) predicted for its
module, power mode, engine, precision and batch, on the architecture rebuilt as ONNX (tests/benchmarks/
published_nets.py, published_yolo.py; weights random, built into a temporary folder, never committed).

    python tests/benchmarks/bench_published.py [--smoke] [--rows PATTERN] [--out results.json]
    python tests/benchmarks/bench_published.py --fit

Prints one line per row: published and predicted ms, the error, the prediction without TensorRT's documented fusions
(what they are worth), and the row's split (`fit`: the model's constants were fitted on it; `held_out`: it only
checks them, decision 1016); then median |error| and the share within +-25 % for the held-out rows, the fit rows and
all. A source measured around its own program's call (Ultralytics' Python call) has that time added
(tools/perf/published.py HARNESS_MS, scaled by the module's CPU clock). DLA-SW's engines take their input in the
DLA's image format (the source's `input_format`), so their first convolution runs in the DLA's image-input mode
(decisions 1140, 1141). `--smoke`: rows of the two smallest models (YOLO11n, SSD-MobileNetV1), the first of each precision and
split of each, the code path, not the numbers. `--fit`: instead, fit the DLA's constants on the DLA fit rows and print them
(tests/benchmarks/published_fit.py; it changes no file).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
SMOKE_MODELS = ("yolo11n", "ssd_mobilenet_v1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the two smallest models' rows only")
    parser.add_argument("--rows", default="*", help="only rows whose id matches this pattern (fnmatch)")
    parser.add_argument("--out", type=Path, help="write every row's result as JSON here")
    parser.add_argument("--fit", action="store_true", help="fit the DLA's constants on the DLA fit rows and print them")
    args = parser.parse_args()
    from tests.benchmarks.published_nets import build
    from tools.perf.published import predict_row, published_table, summary

    _, rows = published_table()
    if args.fit:
        return fit(rows)
    rows = [r for r in rows if fnmatch.fnmatch(r.id, args.rows) and (not args.smoke or r.model in SMOKE_MODELS)]
    if args.smoke:
        rows = smoke_rows(rows)
    results = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-published-") as folder:
        os.environ["SDK_STATE_DIR"] = str(Path(folder) / "state")  # the bare models' batch copies go to this cache
        models = Path(folder) / "models"
        models.mkdir()
        header = f"{'row':44} {'split':8} {'published':>9} {'predicted':>9} {'error':>7} {'unfused':>8} {'unf. err':>8}  where"
        print(header)
        for row in sorted(rows, key=lambda r: (r.model, r.id)):
            compared = predict_row(row, build(row.model, models))
            unfused_error = compared.unfused_ms / row.ms - 1
            where = f"DLA {compared.on_dla}, GPU {compared.on_gpu}" if row.engine == "dla" else "GPU"
            print(f"{row.id:44} {row.split:8} {row.ms:9.3f} {compared.predicted_ms:9.3f} {compared.error:+7.1%} {compared.unfused_ms:8.3f}"
                  f" {unfused_error:+8.1%}  {where}")  # fmt: skip
            results.append(compared)
    print()
    for split in ("held_out", "fit", None):
        s = summary(results, split)
        if s["rows"]:
            print(f"{split or 'all':8} rows {s['rows']:3}: median |error| {s['median_abs_error']:.1%}, within +-25 %: {s['within_25']:.0%}")
    print(f"({time.monotonic() - started:.0f} s)")
    if args.out:
        rows_out = [{"id": c.row.id, "split": c.row.split, "published_ms": c.row.ms, "predicted_ms": round(c.predicted_ms, 4),
                     "unfused_ms": round(c.unfused_ms, 4), "harness_ms": c.harness_ms, "error": round(c.error, 4)} for c in results]  # fmt: skip
        args.out.write_text(json.dumps(rows_out, indent=1) + "\n")
    return 0


def smoke_rows(rows) -> list:
    """Of each model, the first row (by id) of each precision and of each split: every engine, precision and split the
    smoke models have, about half their rows (each row's shape inference and predictions are the cost)."""
    kept, seen = [], set()
    for row in sorted(rows, key=lambda r: (r.model, r.id)):
        keys = {(row.model, "precision", row.precision), (row.model, "split", row.split)}
        if keys - seen:
            kept.append(row)
            seen |= keys
    return kept


def fit(rows) -> int:
    from tests.benchmarks.published_fit import fit_dla
    from tests.benchmarks.published_nets import build

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-published-fit-") as folder:
        os.environ["SDK_STATE_DIR"] = str(Path(folder) / "state")
        models = Path(folder) / "models"
        models.mkdir()
        result = fit_dla(list(rows), lambda name: build(name, models))
    print(f"{'DLA term':24} {'before':>9} {'fitted':>9} {'rounded':>9}")
    for name, value in result["fitted"].items():
        print(f"{name:24} {result['before'][name]:9.4g} {value:9.4g} {result['rounded'][name]:9.4g}")
    print()
    for row_id, published, predicted in result["rows"]:
        print(f"{row_id:44} fit {published:9.3f} {predicted:9.3f} {predicted / published - 1:+7.1%}")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
