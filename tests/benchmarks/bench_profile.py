"""How well `--platform host` predicts ONNX Runtime on this CPU: five real models, each profiled by `sdk profile
--target local` and predicted by the performance model side by side; plus profiling's own overhead per frame and the
time `sdk predict` takes for the example.

    python tests/benchmarks/bench_profile.py [--frames 50] [--smoke]

Models: the example's SSDLite (pipelines/pedestrian.yaml), YOLOX-Nano (tests/integration/assets), and PaddleOCR's detector,
recogniser and direction classifier from rapidocr-onnxruntime (tests/reference-packages.txt) at fixed input shapes.
Each gets a pipeline file in a temporary folder (its model copied beside it). The host's peaks are measured once, at
the first profile, as a user's first `sdk profile` measures them; each profile scales them by the machine's speed
during its own frames (reference probes between the frames: `host.speed_factor`). Prints one table row per model
(predicted and measured whole-model ms, error, Spearman of the layer ranking, top-5 overlap, the speed factor and what
the cached peaks alone predicted) and writes the JSON with --out.
`--smoke`: the example alone, 3 frames, quick peaks: the code path, not the numbers.
`--repeat N`: profile every model N times, in turn (a drift of the machine meets each model alike); each row after
the first of a model adds `again`, how many of its measured top 5 the profile before it measured in its top 5 too:
the measurement's own agreement, which no prediction can be held above (decision 1260); and after the table, each
model's consensus: the top 5 of its layers' medians over all its profiles, and how many of them each profile's
predicted top 5 holds, beside how many each profile's own measured top 5 holds (decision 1264). The last three
columns: the model's predicted time in a run without ONNX Runtime's profiler, the plain session's measured median,
and the error (decision 1263).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
SHARED = REPO / "tests" / "integration" / "assets"  # YOLOX-Nano, shipped with its provenance

MODEL_PIPELINE = """\
version: 1
name: {name}
source: {{uri: "synthetic://noise?width={width}&height={height}&frames=10"}}
preprocess: {{resize: {{width: {width}, height: {height}}}, normalize: {{scale: 0.00392156862745098}}}}
model:
  path: model.onnx
  prepare: {{inputs: {{{input}: {shape}}}, outputs: [{output}]}}
  threads: 2
  spinning: false
postprocess:
  decoder: {{kind: classify, output: {output}}}
  classes: [thing]
"""


LIGHT = ("resnet50", "inception_v1", "inception_v2", "densenet121", "shufflenet", "squeezenet", "vgg19")


def light_sources() -> dict[str, Path]:
    """The `onnx` package's backend-test models (onnx/backend/test/data/light): real architectures at 224x224 whose
    weights are ConstantOfShape fills (preparation folds them into constants). The model was not tuned on them."""
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {f"{name} (onnx light)": folder / f"light_{name}.onnx" for name in LIGHT if (folder / f"light_{name}.onnx").is_file()}


def pipelines(folder: Path, smoke: bool, light: bool = False) -> dict[str, Path]:
    """name -> pipeline file, for the models this machine has."""
    import onnx

    found = {"ssdlite (example)": REPO / "pipelines" / "pedestrian.yaml"}
    if smoke:
        return found
    if light:
        found = {}
    sources = {"yolox-nano": SHARED / "yolox_nano.onnx"}
    try:
        import rapidocr_onnxruntime

        models = Path(rapidocr_onnxruntime.__file__).parent / "models"
        sources |= {"paddleocr-det": models / "ch_PP-OCRv4_det_infer.onnx", "paddleocr-rec": models / "ch_PP-OCRv4_rec_infer.onnx",
                    "paddleocr-cls": models / "ch_ppocr_mobile_v2.0_cls_infer.onnx"}  # fmt: skip
    except ImportError:
        print("rapidocr-onnxruntime is not installed: PaddleOCR's models are left out (pip install --no-deps -r tests/reference-packages.txt)")
    shapes = {"yolox-nano": (1, 3, 416, 416), "paddleocr-det": (1, 3, 640, 640), "paddleocr-rec": (1, 3, 48, 320), "paddleocr-cls": (1, 3, 48, 192)}
    if light:
        sources = light_sources()
        shapes = dict.fromkeys(sources, (1, 3, 224, 224))
    for name, source in sources.items():
        if not source.is_file():
            print(f"{name}: {source} is missing; left out")
            continue
        model = onnx.load(str(source), load_external_data=False)
        own = folder / name.split()[0]
        own.mkdir(parents=True)
        shape = shapes[name]
        weights = {i.name for i in model.graph.initializer}
        image = next(i.name for i in model.graph.input if i.name not in weights)
        if model.ir_version < 4:  # the light models' IR 3 lists every weight as a graph input: a modern IR does not
            model = onnx.load(str(source))
            kept = [i for i in model.graph.input if i.name not in weights]
            del model.graph.input[:]
            model.graph.input.extend(kept)
            model.ir_version = 4
            onnx.save(model, str(own / "model.onnx"))
        else:
            shutil.copyfile(source, own / "model.onnx")
        text = MODEL_PIPELINE.format(name=name.split()[0], width=shape[3], height=shape[2], input=json.dumps(image), shape=list(shape),
                                     output=json.dumps(model.graph.output[0].name))  # fmt: skip
        (own / "pipeline.yaml").write_text(text)
        found[name] = own / "pipeline.yaml"
    return found


def consensus(runs: list[list[dict]]) -> dict[str, list[int]]:
    """A model's profiles (each its layer rows, the same layers in the same order) -> how many of the top 5 of the
    layers' medians over all of them each profile's predicted top 5 holds, and each profile's measured top 5."""
    from tools.perf.analysis import top_names

    medians = [dict(row, measured_ms=statistics.median(run[i]["measured_ms"] for run in runs)) for i, row in enumerate(runs[0])]
    agreed = top_names(medians, "measured_ms")
    return {"predicted": [len(top_names(run, "predicted_ms") & agreed) for run in runs],
            "measured": [len(top_names(run, "measured_ms") & agreed) for run in runs]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--light", action="store_true", help="instead: the onnx package's light models (architectures not tuned on)")
    parser.add_argument("--repeat", type=int, default=1, help="profile every model this many times, in turn")
    args = parser.parse_args()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    os.environ.setdefault("SDK_STATE_DIR", str(folder / "state"))
    os.environ.setdefault("SDK_TARGETS_DIR", str(folder / "targets"))
    os.environ.setdefault("SDK_HISTORY", str(folder / "history.sqlite"))  # not the history of the folder it is run from
    os.environ.setdefault("COLUMNS", "160")
    from tools.cli import run
    from tools.perf.analysis import top_names

    frames = 3 if args.smoke else args.frames
    if args.smoke:  # quick peaks: the code path, not this machine's numbers
        from tools.perf.host_peaks import measure_peaks, peaks_path, store_peaks
        from tools.state import shared_cache_dir

        path, key = peaks_path(2, False, shared_cache_dir())
        store_peaks(measure_peaks(2, False, folder / "probe", runs=2, passes=1), key, path)  # a probe's fewest runs
    rows = []
    measured_top5: dict[str, set[str]] = {}  # each model's measured top 5 in its last profile
    profiled: dict[str, list[list[dict]]] = {}  # each model's layer rows, a list a profile
    try:
        models = pipelines(folder, args.smoke, args.light)
        for repeat, (name, pipeline) in ((r, item) for r in range(max(args.repeat, 1)) for item in models.items()):
            out = folder / f"{name.split()[0]}.json"
            started = time.perf_counter()
            code = run(["profile", str(pipeline), "--target", "local", "--frames", str(frames), "--json", str(out),
                        "--report-dir", str(folder / "reports" / name.split()[0])])  # fmt: skip
            if code != 0:
                print(f"{name}: sdk profile exited {code}")
                return 1
            report = json.loads(out.read_text())
            if args.out:  # each model's whole report beside the summary
                suffix = f"-{repeat + 1}" if args.repeat > 1 else ""
                shutil.copyfile(out, args.out.parent / f"{args.out.stem}-{name.split()[0]}{suffix}.json")
            total, accuracy, host = report["total"], report["accuracy"], report.get("host") or {}
            top5 = top_names(report["layers"], "measured_ms")  # as the profile's own top-5 overlap counts them
            again = len(top5 & measured_top5[name]) if name in measured_top5 else None
            measured_top5[name] = top5
            profiled.setdefault(name, []).append(report["layers"])
            rows.append({"model": name, "predicted_ms": total["predicted_ms"], "measured_ms": total["measured_ms"], "error": total["error"],
                         "spearman": accuracy["spearman"], "top5_overlap": accuracy["top5_overlap"], "run_median_ms": total["run_median_ms"],
                         "profiling_overhead_ms": total["profiling_overhead_ms"], "unprofiled_median_ms": total["unprofiled_median_ms"],
                         "predicted_plain_ms": total.get("predicted_plain_ms"), "plain_error": total.get("plain_error"),
                         "speed_factor": host.get("speed_factor"), "predicted_cached_ms": host.get("predicted_cached_ms"),
                         "contention": host.get("contention"), "layers": len(report["layers"]), "repeat": repeat + 1, "again": again,
                         "wall_s": round(time.perf_counter() - started, 2)})  # fmt: skip
        started = time.perf_counter()
        assert run(["predict", str(REPO / "pipelines" / "pedestrian.yaml"), "--platform", "host"]) == 0  # peaks and preparation cached
        predict_s = time.perf_counter() - started
        started = time.perf_counter()
        assert run(["predict", str(REPO / "pipelines" / "pedestrian.yaml"), "--platform", "jetson-agx-orin", "--dla", "--precision", "int8"]) == 0
        predict_dla_s = time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print()
    if args.smoke:
        print("smoke run: 3 frames and quick peaks; the numbers below mean nothing")
    print(f"{'model':20s} {'predicted ms':>12s} {'measured ms':>11s} {'error':>7s} {'Spearman':>8s} {'top-5':>5s} {'overhead ms/frame':>17s} "
          f"{'speed':>5s} {'cached peaks ms':>15s} {'error':>7s} {'again':>5s} {'plain: predicted':>16s} {'measured':>8s} {'error':>7s}")  # fmt: skip
    for r in rows:
        cached = r["predicted_cached_ms"]
        again = f"{r['again']}/5" if r["again"] is not None else "-"
        print(f"{r['model']:20s} {r['predicted_ms']:12.2f} {r['measured_ms']:11.2f} {r['error']:+7.1%} {r['spearman']:8.2f} "
              f"{r['top5_overlap']:>3d}/5 {r['profiling_overhead_ms']:17.3f} {r['speed_factor'] or 0:5.2f} {cached or 0:15.2f} "
              f"{(cached or 0) / r['measured_ms'] - 1:+7.1%} {again:>5s} {r['predicted_plain_ms'] or 0:16.2f} {r['unprofiled_median_ms'] or 0:8.2f} "
              f"{r['plain_error'] or 0:+7.1%}")  # fmt: skip
    agreed = {name: consensus(runs) for name, runs in profiled.items() if len(runs) > 1}
    for name, found in agreed.items():
        print(f"{name}: the top 5 of its layers' medians over {len(profiled[name])} profiles: in each profile's predicted top 5 "
              f"{', '.join(map(str, found['predicted']))}; in its measured top 5 {', '.join(map(str, found['measured']))}")  # fmt: skip
    print(f"sdk predict (example, --platform host, cached): {predict_s:.2f} s; --platform jetson-agx-orin --dla: {predict_dla_s:.2f} s")
    if args.out:
        summary = {"rows": rows, "consensus": agreed, "predict_s": predict_s, "predict_dla_s": predict_dla_s, "frames": frames}
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
