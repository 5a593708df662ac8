"""INT8 calibration on the real detector and video: one preprocessing path, deterministic frames and
artifacts, Q/DQ model and TensorRT caches from one run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sdk.engine.calibration_cache import CalibrationCache
from sdk.errors import ConfigError
from sdk.preprocess import CpuPreprocessor
from sdk.spec import load_pipeline
from sdk.spec.schema import Calibration
from tools.int8.calibrate import Calibrate, preprocessed_frames, select_frames
from tools.models.prepare import PrepareModel
from tools.progress import SilentProgress

REPO = Path(__file__).resolve().parents[3]


def small_pipeline(tmp_path: Path, method: str = "minmax", frames: int = 8):
    folder = tmp_path / "p"
    if not folder.exists():
        shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text()
    text = text.replace("  frames: 300 ", f"  frames: {frames} ").replace("holdout_frames: 50", "holdout_frames: 4")
    text = text.replace("stride: 1\n", "stride: 7\n").replace("method: percentile ", f"method: {method} ")
    (folder / "p.yaml").write_text(text)
    return load_pipeline(folder / "p.yaml")


def shared_prepared(tmp_path_factory) -> Path:
    """A cache folder holding the example detector's preparation, made once per run: every pipeline here (and in
    test_calibrate_multicam.py) with one frame per call has its content key (model, model.prepare, anchors), so a test
    copies it into its own cache (`PrepareModel` then finds it) instead of preparing the same model again (~1 CPU-s)."""
    from tests.conftest import shared_folder

    def build(folder: Path) -> None:
        PrepareModel(load_pipeline(REPO / "pipelines" / "pedestrian.yaml"), folder / "cache")()

    return shared_folder(tmp_path_factory, "prepared-example-detector", build) / "cache"


def shared_calibration(tmp_path_factory, method: str, frames: int = 4):
    """(pipeline, prepared model, artifacts) of `small_pipeline(method, frames)`, prepared and calibrated once per run
    for every test (and xdist worker) that reads the same ranges: read only; a test writes what it makes into tmp_path."""
    from tests.conftest import shared_folder

    def build(folder: Path) -> None:
        pipeline = small_pipeline(folder, method=method, frames=frames)
        shutil.copytree(shared_prepared(tmp_path_factory), folder / "cache")
        Calibrate(pipeline, PrepareModel(pipeline, folder / "cache")(), folder / "cache")()

    folder = shared_folder(tmp_path_factory, f"calibrate-{method}-{frames}-frames", build)
    pipeline = load_pipeline(folder / "p" / "p.yaml")
    model = PrepareModel(pipeline, folder / "cache")()  # cached: the content key finds the shared preparation
    return pipeline, model, Calibrate(pipeline, model, folder / "cache")()  # cached likewise


@pytest.fixture(scope="module")
def stem_in_float(tmp_path_factory):
    """The shared minmax calibration's Q/DQ model with the stem (the first Conv) kept in float as well as the output
    tail, written twice at once by `write_qdq` into a folder of this module's, with where ONNX Runtime's quantizer wrote
    its shape-inferred copies: (written paths, the copies' folders, the model's cached folder before and after).
    Read by the concurrency test below and, as the model `write_qdq` writes with a layer in float, by the two tests
    that compare it with another derivation and with ONNX Runtime's own quantizer (one write instead of three)."""
    from concurrent.futures import ThreadPoolExecutor

    from tools.int8.calibrate import write_qdq

    _, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    stem = next(n.name for n in onnx.load(str(model.model_path)).graph.node if n.op_type == "Conv")
    cached = model.model_path.parent
    before = sorted(p.name for p in cached.iterdir())
    out = tmp_path_factory.mktemp("stem-in-float")
    copies: list[Path] = []
    real = onnx.shape_inference.infer_shapes_path

    def recorded(source, destination, *args, **kwargs):  # where the quantizer writes its shape-inferred copy
        copies.append(Path(destination))
        return real(source, destination, *args, **kwargs)

    def write(name: str) -> Path:
        write_qdq(model.model_path, out / name, artifacts.onnxruntime_ranges, "minmax", exclude=[*artifacts.output_tail(), stem])
        return out / name

    with pytest.MonkeyPatch.context() as patch, ThreadPoolExecutor(2) as pool:
        patch.setattr(onnx.shape_inference, "infer_shapes_path", recorded)
        written = list(pool.map(write, ["a.onnx", "b.onnx"]))
    after = sorted(p.name for p in cached.iterdir())
    return SimpleNamespace(stem=stem, written=written, copies=copies, out=out, cached=cached, before=before, after=after)


def test_frame_selection_is_deterministic_and_disjoint():
    spec = Calibration(frames=30, holdout_frames=10, stride=3, seed=5)
    first, again = select_frames(795, spec), select_frames(795, spec)
    assert first == again and len(first.calibration) == 30 and len(first.holdout) == 10
    assert not set(first.calibration) & set(first.holdout)
    assert all(i % 3 == 5 % 3 for i in first.calibration + first.holdout)
    assert select_frames(795, Calibration(frames=30, holdout_frames=10, stride=3, seed=6)) != first
    with pytest.raises(ConfigError, match="40 different frames needed; the source has 100, 33 of them at stride 3"):
        select_frames(100, spec)


def test_calibration_frames_are_exactly_what_the_runtime_preprocessing_makes(tmp_path, video_path):
    """One code path: the tensors calibrated on equal the runtime's own preprocessing of the same frames."""
    import cv2

    pipeline = small_pipeline(tmp_path)
    frames = preprocessed_frames(pipeline, {0, 5, 40}, (1, 3, 300, 300), SilentProgress())
    capture = cv2.VideoCapture(str(video_path))
    runtime_buffer = np.zeros((1, 3, 300, 300), np.float32)
    runtime = CpuPreprocessor(pipeline.spec.preprocess, runtime_buffer)
    for index in range(41):
        ok, image = capture.read()
        if index in frames:
            runtime(image)
            assert np.array_equal(frames[index], runtime_buffer)
    assert sorted(frames) == [0, 5, 40]


@pytest.mark.slow
def test_one_run_gives_a_qdq_model_and_caches_identically_twice(tmp_path, tmp_path_factory):
    # The first run is the shared one (4 frames; the assertions hold for any count), made in whichever worker built it;
    # the second runs here, into a fresh cache.
    pipeline, model, first = shared_calibration(tmp_path_factory, "minmax")
    second = Calibrate(pipeline, model, tmp_path / "cache-b")()
    assert second.folder != first.folder and second.folder.is_relative_to(tmp_path)
    assert first.qdq_model.read_bytes() == second.qdq_model.read_bytes()
    assert first.ranges.read_text() == second.ranges.read_text()
    assert first.trt_cache("10.3") == second.trt_cache("10.3")
    # The Q/DQ model is explicit symmetric INT8 that ONNX Runtime runs.
    qdq = onnx.load(str(first.qdq_model))
    ops = {n.op_type for n in qdq.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    zero_points = [i for i in qdq.graph.initializer if i.name.endswith("zero_point")]
    assert zero_points and all(not onnx.numpy_helper.to_array(z).any() for z in zero_points)
    session = ort.InferenceSession(str(first.qdq_model), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {"Preprocessor/sub:0": np.zeros((1, 3, 300, 300), np.float32)})
    assert [o.shape for o in outputs] == [(1, 1917, 1, 4), (1, 1917, 2)]
    # Every activation TensorRT would quantize has a range, and the cache carries each as amax / 127.
    amax = first.amax()
    prepared = onnx.load(str(model.model_path))
    activations = {t for n in prepared.graph.node for t in n.output} | {"Preprocessor/sub:0"}
    assert activations <= set(amax)
    cache = CalibrationCache.parse(first.trt_cache("10.3"))
    cache.check_for("10.3", sorted(activations))
    assert cache.algorithm == "MinMaxCalibration"
    assert cache.scales["Preprocessor/sub:0"] == pytest.approx(1 / 127, rel=1e-6)  # the input spans [-1, 1]
    assert CalibrationCache.parse(first.trt_cache("8.6.1")).version_code == 8601


def test_calibrating_needs_a_calibration_section(tmp_path, example_pipeline):
    text = example_pipeline.path.read_text()
    start = text.index("calibration:")
    end = text.index("budgets:")
    folder = tmp_path / "p"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    (folder / "p.yaml").write_text(text[:start] + text[end:])
    with pytest.raises(ConfigError, match="no `calibration` section"):
        Calibrate(load_pipeline(folder / "p.yaml"), None, tmp_path)  # refused before any model is read: none needed


GATE_FRAMES = 20  # held out: 86 FP32 detections of the example's people (measured), enough to judge recall and precision at 0.9


def gate_pipeline(tmp_path: Path, extra: str = ""):
    folder = tmp_path / "g"
    shutil.copytree(REPO / "pipelines" / "assets", folder / "assets")
    text = (REPO / "pipelines" / "pedestrian.yaml").read_text()
    text = text.replace("  frames: 300 ", "  frames: 16 ").replace("stride: 1\n", "stride: 3\n").replace("method: percentile ", "method: minmax ")
    text = text.replace("holdout_frames: 50", f"holdout_frames: {GATE_FRAMES}")
    text = text.replace("  method: minmax ", f"{extra}  method: minmax ")
    (folder / "p.yaml").write_text(text)
    return folder / "p.yaml"


def sdk(capfd, *argv: str) -> tuple[int, str, str]:
    """`sdk ARGV` in this process (tools.cli.run: the CLI's own error boundary; the process boundary is not what these
    tests are about, and a subprocess costs seconds of imports): (exit status, stdout, stderr)."""
    from tools.cli import run

    capfd.readouterr()
    status = run(list(argv))  # fd-level capture: the video decoder's log pump redirects fd 2
    out, err = capfd.readouterr()
    return status, out, err


@pytest.mark.slow
def test_the_gate_passes_on_the_example_and_refuses_an_absurd_threshold(tmp_path, tmp_path_factory, monkeypatch, capfd):
    import json

    shutil.copytree(shared_prepared(tmp_path_factory), tmp_path / "state" / "cache")  # the preparation: found, not redone
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    status, _, stderr = sdk(capfd, "calibrate", str(gate_pipeline(tmp_path)), "--tensorrt", "10.3", "--out", str(tmp_path / "int8"))
    assert status == 0, stderr
    report = json.loads((tmp_path / "int8" / "accuracy.json").read_text())
    assert report["passed"] and report["frames"] == GATE_FRAMES and report["fp32_detections"] > 60
    assert report["recall"] >= 0.9 and report["precision"] >= 0.9 and report["outputs"]["concat_1:0"]["mean_cosine"] >= 0.99
    cache = (tmp_path / "int8" / "calibration-trt10.3.cache").read_text()
    assert cache.startswith("TRT-100300-MinMaxCalibration\n")
    assert (tmp_path / "int8" / "model.qdq.onnx").is_file()
    assert len(report["score_pairs"]) == round(report["recall"] * report["fp32_detections"])
    assert all(0 < a <= 1 and 0 < b <= 1 for a, b in report["score_pairs"])
    import matplotlib.image

    plot = matplotlib.image.imread(tmp_path / "int8" / "accuracy.png")
    assert plot.shape[:2] == (450, 1100)  # the report's figure a person reads
    (measured,) = (tmp_path / "state" / "cache" / "calibration").glob("*/measured-*.json")  # the gate's numbers, kept
    measured_stamp = measured.stat().st_mtime_ns

    absurd = gate_pipeline(tmp_path / "absurd", extra="  accuracy: {min_cosine: 1.0, max_mean_score_drift: 0.0}\n  fallback: none\n")
    status, _, stderr = sdk(capfd, "calibrate", str(absurd), "--out", str(tmp_path / "bad"))
    assert status == 1
    assert f"INT8 fails the accuracy gate on {GATE_FRAMES} held-out frames" in stderr and "cosine similarity 0.99" in stderr and "< 1.0" in stderr
    assert "mean score drift" in stderr and "Traceback" not in stderr and stderr.count("error:") == 1  # one line, no traceback
    assert (tmp_path / "bad" / "accuracy.json").is_file() and not (tmp_path / "bad" / "model.qdq.onnx").exists()  # refused
    assert (tmp_path / "bad" / "accuracy.png").is_file()  # the numbers of a refusal are plotted too
    # The second gate judged the first one's measurements (the same calibration, frames and postprocessing: no model
    # run, no frame read again): the same numbers, another verdict.
    (measured,) = (tmp_path / "state" / "cache" / "calibration").glob("*/measured-*.json")
    assert measured.stat().st_mtime_ns == measured_stamp
    refused = json.loads((tmp_path / "bad" / "accuracy.json").read_text())
    measured_fields = ("frames", "outputs", "fp32_detections", "int8_detections", "recall", "precision", "mean_iou", "mean_score_drift")
    measured_fields += ("score_pairs", "frame_cosines")
    assert {k: refused[k] for k in measured_fields} == {k: report[k] for k in measured_fields}


def test_the_gates_measurements_are_keyed_by_what_finds_the_detections(tmp_path):
    """A gate's measurements are reused under another gate (tools.int8.for_deploy.measurement_key), never under another
    postprocessing, other class names or another decoder plug-in's code: those find other detections. A recorded
    verdict (judged_key) is found only under the same gate and the same measurements."""
    from tools.int8.for_deploy import judged_key, measurement_key

    base = gate_pipeline(tmp_path / "a")
    text = base.read_text()

    def key_of(name: str, changed: str, of=measurement_key) -> str:
        (base.parent / name).write_text(changed)
        pipeline = load_pipeline(base.parent / name, check_files=False)
        return of(pipeline) if of is measurement_key else of(pipeline, None)

    key, verdict = measurement_key(load_pipeline(base)), judged_key(load_pipeline(base), None)
    stricter = text.replace("  method: minmax ", "  accuracy: {min_cosine: 1.0}\n  method: minmax ")
    assert key_of("gate.yaml", stricter) == key and key_of("gate.yaml", stricter, judged_key) != verdict
    assert judged_key(load_pipeline(base), "labels") != verdict
    higher = text.replace("score_threshold: 0.3", "score_threshold: 0.5")
    assert key_of("score.yaml", higher) != key and key_of("score.yaml", higher, judged_key) != verdict
    assert key_of("classes.yaml", text.replace("classes: [person]", "classes: [pedestrian]")) != key
    start, end = text.index("  decoder:\n"), text.index("  classes: [person]")
    plugin = text[:start] + "  decoder:\n    kind: python\n    entry: dec:decode\n    path: plugins\n" + text[end:]
    (base.parent / "plugins").mkdir()
    (base.parent / "plugins" / "dec.py").write_text("def decode(outputs, geometry):\n    return []\n")
    first = key_of("plugin.yaml", plugin)
    assert first != key and key_of("plugin.yaml", plugin) == first
    (base.parent / "plugins" / "dec.py").write_text("def decode(outputs, geometry):\n    return []  # changed\n")
    assert key_of("plugin.yaml", plugin) != first


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_methods_write_the_qdq_model_and_their_cache_header(tmp_path_factory, method):
    """The Q/DQ model is written from the saved ranges by the method that made them (ONNX Runtime
    refuses a cache of another method), also for one layer alone, as the sensitivity analysis does (its one-layer
    probe: the quantizer writes that layer alone from these ranges, tools/int8/probe_qdq.py). Entropy's is the shared
    4-frame calibration (test_entropy_clips_tails_where_min_max_keeps_them reads it too); percentile's is read here
    alone, and what is asserted is how its ranges are written, not how good they are: one frame instead of four (every
    tensor still has its histogram and a percentile range from it)."""
    from tools.int8.calibrate import conv_weight_scales
    from tools.int8.probe_qdq import OneLayerProbes

    _, model, artifacts = shared_calibration(tmp_path_factory, method, frames=4 if method == "entropy" else 1)
    assert onnx.load(str(artifacts.qdq_model)).graph.node[0].op_type in ("QuantizeLinear", "DequantizeLinear")
    assert artifacts.trt_cache("10.3").startswith("TRT-100300-EntropyCalibration2\n")  # DLA's calibrator, for both
    prepared = onnx.load(str(model.model_path))
    first_conv = next(n.name for n in prepared.graph.node if n.op_type == "Conv")
    probe = OneLayerProbes(model.model_path, artifacts.onnxruntime_ranges, method, conv_weight_scales(prepared)).probe_bytes(first_conv)
    assert probe is not None  # written by the quantizer from these ranges, not the whole way
    quantized = [n for n in onnx.load_from_string(probe).graph.node if n.op_type == "QuantizeLinear"]
    assert 1 <= len(quantized) <= 3  # its input (and weight) only: the rest stays float


def test_entropy_clips_tails_where_min_max_keeps_them(tmp_path_factory):
    """TensorRT's entropy keeps a threshold below the observed maximum for most tensors of the real
    detector (ONNX Runtime's own entropy calibrator, with its defaults, returned min-max instead)."""
    ranges = {}
    for method in ("minmax", "entropy"):  # the shared 4-frame calibrations of the same frames
        artifacts = shared_calibration(tmp_path_factory, method)[2]
        ranges[method] = json.loads(artifacts.ranges.read_text())["tensors"]
    assert ranges["minmax"].keys() == ranges["entropy"].keys() and len(ranges["minmax"]) == 194
    for name, entry in ranges["minmax"].items():
        assert entry["amax"] == max(abs(entry["min"]), abs(entry["max"]))
        assert ranges["entropy"][name]["amax"] <= entry["amax"]
    clipped = [n for n, e in ranges["entropy"].items() if e["amax"] < 0.99 * ranges["minmax"][n]["amax"]]
    assert len(clipped) > len(ranges["minmax"]) // 3


@pytest.mark.slow
def test_a_conv_taking_its_clips_range_gives_the_same_qdq_model_outputs(tmp_path, tmp_path_factory, monkeypatch, stem_in_float):
    """The derivation that keeps ONNX Runtime's fusion while calibrating must not change what the
    Q/DQ model computes, with every layer in INT8 and with one kept in float (the derived ranges' models: the
    calibration's own and the module's stem-in-float one, both written by write_qdq from these ranges)."""
    import tools.int8.activation_stats as activation_stats
    from tools.int8.activation_stats import CollectStatistics
    from tools.int8.calibrate import chosen_ranges, iter_preprocessed_frames, write_onnxruntime_ranges, write_qdq

    pipeline, model, derived = shared_calibration(tmp_path_factory, "minmax")  # made with the derivation (the default)
    monkeypatch.setattr(activation_stats, "FUSING_PRODUCERS", frozenset())
    # The same frames observed without the derivation: Calibrate's statistics and ranges, without its Q/DQ model.
    chosen = set(json.loads(derived.ranges.read_text())["frames"])
    frames = [tensor for _, tensor in iter_preprocessed_frames(pipeline, chosen, (1, 3, 300, 300))]
    observed_tensors = chosen_ranges(CollectStatistics(model.model_path, histograms=False)(frames, SilentProgress()), "minmax", 99.99)
    observed_ranges = tmp_path / "observed_onnxruntime_ranges.json"
    write_onnxruntime_ranges(observed_tensors, "minmax", observed_ranges)
    ranges = {"derived": json.loads(derived.ranges.read_text())["tensors"], "observed": observed_tensors}
    assert ranges["derived"].keys() == ranges["observed"].keys() and len(frames) == 4
    differing = [n for n in ranges["derived"] if ranges["derived"][n]["amax"] != ranges["observed"][n]["amax"]]
    assert len(differing) > 40  # the Conv outputs before a Clip: their own range is wider
    stem = stem_in_float.stem
    frame = np.random.default_rng(0).uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32)
    tail = derived.output_tail()  # in float in every Q/DQ model of this calibration
    for exclude in ([], [stem]):
        outputs = []
        for name, ort_ranges in (("derived", derived.onnxruntime_ranges), ("observed", observed_ranges)):
            path = tmp_path / f"{name}-{len(exclude)}.onnx"
            if name == "derived" and not exclude:
                path = derived.qdq_model  # what the calibration wrote from these ranges: write_qdq(model, ..., exclude=tail)
            elif name == "derived":
                path = stem_in_float.written[0]  # write_qdq(model, ..., exclude=[*tail, stem]) from these ranges
            else:
                write_qdq(model.model_path, path, ort_ranges, "minmax", exclude=[*tail, *exclude])
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            outputs.append(session.run(None, {session.get_inputs()[0].name: frame}))
        for mine, theirs in zip(*outputs, strict=True):
            np.testing.assert_array_equal(mine, theirs)


@pytest.mark.slow
def test_our_conv_weight_scales_give_onnx_runtimes_own_qdq_model(tmp_path, tmp_path_factory, stem_in_float):
    """The per-channel weight scales handed to the quantizer (it computes them in a slow Python loop), and the
    quantizer's slow loops done the fast way (tools.int8.quantizer_fast_paths), leave the Q/DQ model identical to what
    ONNX Runtime's quantizer writes as it ships, byte for byte, with and without a layer kept in float. The reference
    with a layer in float computes its own weight scales with the fast paths on (the first, all as ONNX Runtime ships,
    shows them equal on this model; as shipped, the loops they replace cost about 1.3 CPU-s more)."""
    import contextlib

    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from tools.int8.calibrate import conv_weight_scales, quiet_onnxruntime_quantization
    from tools.int8.quantizer_fast_paths import fast_paths

    _, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    prepared = onnx.load(str(model.model_path))
    scales = conv_weight_scales(prepared)
    assert len(scales) == sum(n.op_type == "Conv" for n in prepared.graph.node)
    stem = stem_in_float.stem
    assert stem == next(n.name for n in prepared.graph.node if n.op_type == "Conv")
    tail = artifacts.output_tail()  # in float in every Q/DQ model of this calibration
    for exclude in ([*tail], [*tail, stem]):
        theirs = tmp_path / f"theirs-{len(exclude)}.onnx"
        # With the stem in float: write_qdq(model, ..., exclude=[*tail, stem]), one of the module's two writes side by
        # side; every layer but the tail in INT8: the calibration's own Q/DQ model, written by write_qdq from these ranges.
        ours = stem_in_float.written[0] if stem in exclude else artifacts.qdq_model
        with quiet_onnxruntime_quantization(), fast_paths(model.model_path) if stem in exclude else contextlib.nullcontext():
            quantize_static(
                str(model.model_path),
                str(theirs),
                None,
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                nodes_to_exclude=exclude,
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "DedicatedQDQPair": bool(exclude)},
                calibration_cache_path=str(artifacts.onnxruntime_ranges),
            )
        mine, reference = onnx.load(str(ours)), onnx.load(str(theirs))
        assert list(mine.graph.node) == list(reference.graph.node)
        arrays = [{i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer} for m in (mine, reference)]
        assert arrays[0].keys() == arrays[1].keys()
        for name, value in arrays[0].items():
            assert value.dtype == arrays[1][name].dtype and np.array_equal(value, arrays[1][name]), name
        assert ours.read_bytes() == theirs.read_bytes()  # the order of the initializers and every attribute too


@pytest.mark.parametrize(
    ("typed", "header"),
    [("10.3", "TRT-100300-"), ("8.6.2", "TRT-8602-"), ("8.6.1", "TRT-8601-"), ("10.3.0.30", "TRT-100300-")],
)
def test_a_cache_is_written_for_a_known_release_with_its_patch_level(tmp_path, typed, header):
    """`sdk calibrate --tensorrt V` writes through trt_cache_file; the header is NV_TENSORRT_VERSION of the
    release (NvInferRuntimeBase.h of TensorRT 8.6.1 and 10.3.0), so it must name the target's patch level."""
    from tools.int8.calibrate import CalibrationArtifacts
    from tools.int8.for_deploy import trt_cache_file

    (tmp_path / "ranges.json").write_text(json.dumps({"method": "minmax", "tensors": {"x": {"amax": 1.0}}}))
    written = trt_cache_file(CalibrationArtifacts(tmp_path), typed)
    assert written.read_text() == f"{header}MinMaxCalibration\nx: 3c010204\n"


@pytest.mark.parametrize(("typed", "message"), [("9.9", "not a release the SDK knows"), ("8.6", "names several releases")])
def test_calibrate_refuses_a_tensorrt_it_does_not_know_exactly_and_lists_the_known_ones(tmp_path, typed, message):
    from sdk.errors import ModelError
    from tools.int8.calibrate import CalibrationArtifacts
    from tools.int8.for_deploy import trt_cache_file

    (tmp_path / "ranges.json").write_text(json.dumps({"method": "minmax", "tensors": {"x": {"amax": 1.0}}}))
    with pytest.raises(ModelError, match=message) as caught:
        trt_cache_file(CalibrationArtifacts(tmp_path), typed)
    assert "8.6.1, 8.6.2, 8.6.10, 8.6.11, 8.6.12, 10.0.0" in caught.value.hint and "11.4.1" in caught.value.hint
    assert not list(tmp_path.glob("calibration-trt*"))  # nothing written


def test_the_cache_ties_the_concatenations_of_the_example_detector(tmp_path_factory):
    """ranges.json records the ranges TensorRT fuses; the TensorRT cache gives every concatenation input the
    output's scale, while the ONNX Runtime ranges (the Q/DQ model) keep their own."""
    _, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    ties = json.loads(artifacts.ranges.read_text())["ties"]
    concats = [n for n in onnx.load(str(model.model_path)).graph.node if n.op_type == "Concat"]
    assert concats and len(ties) >= len([n for n in concats if n.output[0] in artifacts.amax()])
    cache = CalibrationCache.parse(artifacts.trt_cache("10.3"))
    amax = artifacts.amax()
    differed = 0
    for node in concats:
        if node.output[0] not in cache.scales:
            continue
        for name in node.input:
            if name in cache.scales:
                assert cache.scales[name] == cache.scales[node.output[0]], (node.name, name)
                differed += amax[name] != amax[node.output[0]]
    assert differed, "the example's concatenation inputs were calibrated apart; the cache ties them"


def test_sdk_calibrate_refuses_an_unknown_tensorrt_before_calibrating(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    argv = ["calibrate", str(REPO / "pipelines" / "pedestrian.yaml"), "--tensorrt", "9.9", "--out", str(tmp_path / "int8")]
    status, _, stderr = sdk(capfd, *argv)
    assert status == 1 and stderr.count("error:") == 1 and "9.9" in stderr and "10.3.0" in stderr, stderr
    assert not (tmp_path / "int8").exists() and not (tmp_path / "state").exists()  # nothing prepared, calibrated or written


def test_writing_a_qdq_model_never_writes_beside_the_cached_model(stem_in_float):
    """ONNX Runtime's quantizer writes a shape-inferred copy beside the model it is given and deletes it after: in the
    shared host cache, two quantizations of one model at once read and deleted each other's copy (seen in a suite
    run: FileNotFoundError on `model-inferred.onnx`, then a model read empty). Every copy it makes is in a folder of
    the call's own, and the cached model's folder is left as it was; two writes side by side give the same model (the
    module's stem-in-float model, which test_our_conv_weight_scales_give_onnx_runtimes_own_qdq_model also shows equal,
    byte for byte, to ONNX Runtime's quantizer's own)."""
    made = stem_in_float
    copies = made.copies
    assert len(copies) == 2 and not any(path.parent == made.cached for path in copies) and copies[0].parent != copies[1].parent
    assert made.after == made.before and made.written[0].read_bytes() == made.written[1].read_bytes()
    assert sorted(p.name for p in made.out.iterdir()) == ["a.onnx", "b.onnx"]  # the private folders are gone


def test_a_dla_cache_ties_the_example_detectors_elementwise_inputs(tmp_path_factory):
    """For a DLA build each Add's (Mul's, ...) two inputs share the larger range (NvInfer.h, IElementWiseLayer on DLA);
    the GPU's cache keeps them apart, and the two caches are separate files."""
    from tools.int8.for_deploy import trt_cache_file

    _, model, artifacts = shared_calibration(tmp_path_factory, "minmax")
    adds = [n for n in onnx.load(str(model.model_path)).graph.node if n.op_type in ("Add", "Mul") and all(i in artifacts.amax() for i in n.input)]
    assert adds, "the example has element-wise layers between activations"
    gpu, dla = CalibrationCache.parse(artifacts.trt_cache("10.3")), CalibrationCache.parse(artifacts.trt_cache("10.3", dla=True))
    assert all(dla.scales[n.input[0]] == dla.scales[n.input[1]] for n in adds)
    assert any(gpu.scales[n.input[0]] != gpu.scales[n.input[1]] for n in adds)
    assert trt_cache_file(artifacts, "10.3", dla=True).name == "calibration-trt10.3-dla.cache"
