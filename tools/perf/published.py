"""The project's table of published Jetson figures (data/published.yaml) and the performance model's predictions of it.

Each row is one published figure: a model (an architecture the benchmark rebuilds), a module, a power mode, the
engine (GPU or one DLA core), precision, batch, and the latency it stands for (`ms`). `predict_row` predicts the row
as `sdk predict MODEL.onnx --platform MODULE --power-mode MODE [--dla] --precision P --batch N` would, with and
without TensorRT's documented fusions (decision 1010). Which rows the model's constants were fitted on and which only
check them is the row's `split` (decision 1016).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError

PUBLISHED_FILE = Path(__file__).parent / "data" / "published.yaml"
SPLITS = ("fit", "held_out")
REQUIRED = ("id", "source", "model", "module", "power_mode", "engine", "precision", "batch", "published", "unit", "ms", "split")
# What a source's measuring program adds per call to the engine's time, fitted with the model's constants (decision
# 1016): Ultralytics' `yolo benchmark` times the Python call of its TensorRT backend (the bindings, a synchronous
# execute_v2, the outputs as tensors), not the engine alone. MLPerf's LoadGen and trtexec's DLA figures add nothing here.
# Each is (ms per call, the CPU clock in GHz it was fitted at): the call is single-threaded Python on the module's Arm
# cores, the same Cortex-A78AE on every Orin module, so it takes longer in proportion on a slower-clocked CPU (the
# source's `cpu_ghz`: each module's CPU clock, decision 1141).
HARNESS_MS = {"ultralytics-call": (1.39, 2.2)}  # fitted on the AGX Orin 64GB rows (2.2 GHz)
INPUT_FORMATS = ("dla_hwc4",)  # a source's engines' input format, where it is not TensorRT's default (decision 1140)
TENSORRT = "8.6"  # the sources ran TensorRT 8.5.2 (JetPack 5.1.1); 8.6 is the oldest release whose DLA rules the SDK knows


@dataclass(frozen=True)
class PublishedRow:
    id: str
    source: str
    model: str
    module: str
    power_mode: str
    engine: str  # gpu, dla
    precision: str  # fp32, fp16, int8
    batch: int
    published: float
    unit: str
    ms: float  # the latency of one engine's batch the prediction is compared with
    split: str  # fit, held_out
    sparse: bool = False
    url: str = ""
    derived: str = ""
    note: str = ""


def harness_ms(source: dict, module: str) -> float:
    """The source's measuring program's time per call on `module`: the fitted time scaled by the CPU clock it was
    fitted at over the module's (the source's `cpu_ghz`)."""
    if source.get("harness", "") not in HARNESS_MS:
        return 0.0
    ms, fitted_ghz = HARNESS_MS[source["harness"]]
    clocks = source.get("cpu_ghz") or {}
    if module not in clocks:
        raise ConfigError(f"source {source.get('title', '')[:60]!r}: no cpu_ghz for {module}",
                          hint="a source with a harness names each of its modules' CPU clock (cpu_ghz)")  # fmt: skip
    return ms * fitted_ghz / float(clocks[module])


@functools.cache
def published_table(path: Path = PUBLISHED_FILE) -> tuple[dict, tuple[PublishedRow, ...]]:
    """(the sources, the rows) of the table, each row checked: its fields, its source, its module and power mode."""
    import yaml

    from tools.perf.platforms import resolve_mode, resolve_platform

    data = yaml.safe_load(Path(path).read_text())
    sources, rows = data.get("sources") or {}, []
    for key, source in sources.items():
        if source.get("input_format") not in (None, *INPUT_FORMATS):
            raise ConfigError(f"{path}: source {key}: input_format {source['input_format']!r}",
                              hint=f"known: {', '.join(INPUT_FORMATS)} (leave it out for TensorRT's default input formats)")  # fmt: skip
    for number, raw in enumerate(data.get("rows") or [], 1):
        where = f"{path}: row {number} ({raw.get('id', 'no id')})"
        missing = [k for k in REQUIRED if raw.get(k) in (None, "")]
        if missing:
            raise ConfigError(f"{where} lacks {', '.join(missing)}", hint=f"every row has {', '.join(REQUIRED)}")
        if raw["source"] not in sources or not sources[raw["source"]].get("url"):
            raise ConfigError(f"{where}: source {raw['source']!r} is not one of sources: with an url", hint=f"known: {', '.join(sources)}")
        if raw["split"] not in SPLITS or raw["engine"] not in ("gpu", "dla") or raw["precision"] not in ("fp32", "fp16", "int8"):
            raise ConfigError(f"{where}: split {raw['split']!r}, engine {raw['engine']!r}, precision {raw['precision']!r}",
                              hint="split: fit or held_out; engine: gpu or dla; precision: fp32, fp16 or int8")  # fmt: skip
        resolve_platform(raw["module"])
        source = sources[raw["source"]]
        if source.get("harness") and raw["module"] not in (source.get("cpu_ghz") or {}):
            raise ConfigError(f"{where}: source {raw['source']!r} has a harness time but no cpu_ghz for {raw['module']}",
                              hint="name the module's CPU clock in the source's cpu_ghz (the harness time scales with it)")  # fmt: skip
        if resolve_mode(raw["module"], raw["power_mode"]) != raw["power_mode"]:
            raise ConfigError(f"{where}: {raw['module']} has no power mode {raw['power_mode']!r}", hint="name it as platform_facts.yaml does")
        rows.append(PublishedRow(**{k: raw[k] for k in PublishedRow.__dataclass_fields__ if k in raw}))
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: row ids repeat", hint="each row's id is its own")
    return sources, tuple(rows)


@dataclass(frozen=True)
class Compared:
    row: PublishedRow
    predicted_ms: float  # with TensorRT's documented fusions, as `sdk predict`, plus the source's harness time
    unfused_ms: float  # without them (a convolution's own epilogue and pointwise chains only), plus the harness
    harness_ms: float = 0.0  # the source's measuring program's own time per call (HARNESS_MS)
    on_dla: int = 0  # layers the placement put on the DLA (DLA rows)
    on_gpu: int = 0

    @property
    def error(self) -> float:
        """(predicted - published) / published."""
        return self.predicted_ms / self.row.ms - 1.0


def predict_row(row: PublishedRow, model_path: Path) -> Compared:
    """The row's model predicted as `sdk predict` predicts a bare ONNX file at the row's module, mode, engine,
    precision and batch (2:4 sparse where the row is; on the DLA, in its image-input mode where the row's source gives
    its engines their input in the DLA's image format, `input_format: dla_hwc4`)."""
    from tools.perf.bare_model import bare_layers
    from tools.perf.predict import predict_device
    from tools.perf.targets import device_prediction

    model = bare_layers(Path(model_path), row.batch)
    dla = row.engine == "dla"
    source = published_table()[0][row.source]
    image = dla and source.get("input_format") == "dla_hwc4"  # the source's engines take their input in the DLA's image format
    prediction, target, placement = device_prediction(model, None, row.module, row.precision, dla, TENSORRT if dla else None, row.power_mode)
    if row.sparse or image:
        prediction = predict_device(model, target, row.precision, placement, sparse=row.sparse, image_input=image)
    unfused = predict_device(model, target, row.precision, placement, sparse=row.sparse, documented=False, image_input=image)
    engines = [p.engine for p in prediction.layers]
    extra = harness_ms(source, row.module)
    return Compared(row, prediction.total_ms + extra, unfused.total_ms + extra, extra, engines.count("dla"), engines.count("gpu"))


def summary(compared: list[Compared], split: str | None = None) -> dict:
    """Median |error| and the share of rows within +-25 % over the rows of `split` (all rows when None)."""
    chosen = [c for c in compared if split is None or c.row.split == split]
    if not chosen:
        return {"rows": 0}
    errors = [abs(c.error) for c in chosen]
    return {"rows": len(chosen), "median_abs_error": statistics.median(errors), "within_25": sum(e <= 0.25 for e in errors) / len(errors)}
