"""The DLA analysis on the real example detector, the platform and TensorRT facts, and `sdk dla-report`."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest

from tools.cli import run


def test_example_detector_on_agx_orin_with_tensorrt_10(prepared_example, analysis):
    model = onnx.load(str(prepared_example.model_path))
    report = analysis(model)
    layers = [n for n in model.graph.node if n.op_type != "Constant"]
    assert [v.name for v in report.layers] == [n.name for n in layers]  # one verdict per ONNX node, in graph order
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*model.graph.value_info, *model.graph.output)}
    for node, verdict in zip(layers, report.layers, strict=True):
        assert verdict.reason
        if node.op_type == "Conv":
            assert verdict.device == "DLA", verdict.reason  # the convolutional core fits DLA
        if verdict.device == "GPU":
            assert ranks[node.output[0]] != 4 or any(ranks.get(i, 4) != 4 for i in node.input if i in ranks), node.name
    summary = report.summary()
    assert summary.dla_layers + summary.gpu_layers == len(layers)
    assert summary.subgraphs == len(report.subgraphs) >= 1 and summary.dla_cores == 2


@pytest.mark.parametrize(
    ("platform", "tensorrt", "precision", "cores", "device", "reason"),
    [
        ("jetson-agx-orin", "10.3", "int8", None, "DLA", "within the DLA restrictions"),
        ("drive-orin", "8.6.1", "fp16", None, "DLA", "within the DLA restrictions"),
        ("jetson-orin-nx", "10.3", "int8", 1, "DLA", "within the DLA restrictions"),
        ("jetson-orin-nx", "10.3", "int8", 0, "GPU", "no DLA core"),
        ("jetson-thor", "10.13", "int8", None, "GPU", "jetson-thor has no DLA core"),
        ("jetson-orin-nano", "10.3", "int8", None, "GPU", "jetson-orin-nano has no DLA core"),
        ("jetson-agx-orin", "11.2", "int8", None, "GPU", "TensorRT 11.0-11.3 have no DLA"),
        ("jetson-agx-orin", "11.4", "int8", None, "GPU", "only on Windows on ARM"),
        ("jetson-agx-orin", "10.8", "int8", None, "GPU", "10.7 was the last release"),
        ("jetson-agx-orin", "10.3", "fp32", None, "GPU", "FP16 or INT8 only"),
    ],
)
def test_platform_tensorrt_and_precision_decide_whether_dla_exists(builder, analysis, platform, tensorrt, precision, cores, device, reason):
    b = builder()
    b.conv()
    report = analysis(b.model(), platform, tensorrt, precision, cores)
    assert report.layers[0].device == device and reason in report.layers[0].reason


def test_the_rule_table_follows_the_tensorrt_series(builder, analysis):
    b = builder()
    b.conv()
    assert {analysis(b.model(), "drive-orin", v).series for v in ("8.6.1", "10.3", "11.4")} == {"8.6", "10", "11"}


def test_cli_writes_one_json_entry_per_node(prepared_example, tmp_path, capsys):
    out = tmp_path / "dla.json"
    code = run(["dla-report", str(prepared_example.model_path), "--platform", "jetson-agx-orin", "--tensorrt", "10.3", "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    nodes = [n for n in onnx.load(str(prepared_example.model_path)).graph.node if n.op_type != "Constant"]
    assert [entry["name"] for entry in data["layers"]] == [n.name for n in nodes]
    assert {entry["device"] for entry in data["layers"]} <= {"DLA", "GPU"} and all(entry["reason"] for entry in data["layers"])
    assert data["summary"]["dla_layers"] + data["summary"]["gpu_layers"] == len(nodes)
    printed = capsys.readouterr().out
    assert "DLA placement (predicted)" in printed and str(data["summary"]["transitions"]) in printed


def test_json_names_every_onnx_node_including_constants(builder, analysis):
    import numpy as np

    b = builder()
    b.conv()
    b.nodes.append(onnx.helper.make_node("Constant", [], ["c"], name="two", value=onnx.numpy_helper.from_array(np.float32(2.0))))
    b.add("Mul", "c")
    data = analysis(b.model()).as_dict()
    assert [(e["name"], e["device"]) for e in data["layers"]] == [("conv_2", "DLA"), ("mul_3", "DLA"), ("two", "none")]
    assert data["summary"]["layers"] == 2


def test_cli_offline_form_needs_a_tensorrt_version(prepared_example, capsys):
    assert run(["dla-report", str(prepared_example.model_path), "--platform", "jetson-agx-orin"]) == 1
    err = capsys.readouterr().err
    assert "error: --platform needs --tensorrt" in err and "hint:" in err


def pipeline_with_contract(tmp_path, example_pipeline, detector_path, contract: str):
    folder = tmp_path / "p"
    (folder / "assets").mkdir(parents=True)
    shutil.copyfile(detector_path, folder / "assets" / "ssdlite_pedestrian.onnx")
    (folder / "assets" / "vtest.avi").write_bytes(b"")
    text = example_pipeline.path.read_text().replace("  threads: 2\n", f"  threads: 2\n  dla: {contract}\n")
    (folder / "p.yaml").write_text(text)
    return folder / "p.yaml"


def test_cli_refuses_a_pipeline_whose_contract_the_prediction_breaks(tmp_path, example_pipeline, detector_path, monkeypatch, capsys):
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    offline = ["--platform", "jetson-agx-orin", "--tensorrt", "10.3", "--json", str(tmp_path / "r.json")]
    loose = pipeline_with_contract(tmp_path / "a", example_pipeline, detector_path, "{core: 1, gpu_fallback: allowed}")
    assert run(["dla-report", str(loose), *offline]) == 0
    gpu = json.loads((tmp_path / "r.json").read_text())["summary"]["gpu_layers"]
    assert gpu > 0
    capsys.readouterr()

    for contract in ("{gpu_fallback: forbidden}", f"{{max_gpu_layers: {gpu - 1}}}"):
        strict = pipeline_with_contract(tmp_path / contract[1:5], example_pipeline, detector_path, contract)
        assert run(["dla-report", str(strict), *offline]) == 1
        err = capsys.readouterr().err
        assert "placement contract violated" in err and f"{gpu} on GPU" in err and "model.dla" in err
    exact = pipeline_with_contract(tmp_path / "c", example_pipeline, detector_path, f"{{max_gpu_layers: {gpu}}}")
    assert run(["dla-report", str(exact), *offline]) == 0


def test_cli_target_form_takes_platform_and_dla_cores_from_the_target(prepared_example, tmp_path, monkeypatch, capsys):
    """`local` is a linux-generic machine; its DLA cores are what the probe finds (none here, two on a Jetson)."""
    from sdk.probe import fingerprint

    cores = fingerprint()["dla_cores"] or 0
    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "local.json"
    assert run(["dla-report", str(prepared_example.model_path), "--target", "local", "--tensorrt", "10.3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["platform"] == "linux-generic" and data["dla_cores"] == cores
    if cores == 0:
        assert data["summary"]["dla_layers"] == 0 and all(entry["reason"] == "linux-generic has no DLA core" for entry in data["layers"])


def test_cli_target_form_probes_a_remote_target_over_ssh(prepared_example, ssh_target, tmp_path, capsys):
    """A simulated AGX Orin (real sshd): the platform comes from its target file, TensorRT from its probe or --tensorrt."""
    ssh_target.write(platform="jetson-agx-orin")
    model = str(prepared_example.model_path)
    assert run(["dla-report", model, "--target", "sim"]) == 1  # this "device" has no TensorRT
    err = capsys.readouterr().err
    assert "error: target sim: no TensorRT found on the device" in err and "--tensorrt" in err
    out = tmp_path / "sim.json"
    assert run(["dla-report", model, "--target", "sim", "--tensorrt", "10.3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["platform"], data["tensorrt"], data["dla_cores"]) == ("jetson-agx-orin", "10.3.0", 2)
    assert data["summary"]["dla_layers"] > 0


def test_cli_refuses_an_unknown_tensorrt_before_preparing_the_model(tmp_path, monkeypatch, capsys):
    """`--tensorrt 9.9` names no release: refused at once, listing the known ones (decision 0402), with nothing prepared."""
    from pathlib import Path

    from tools.models import prepare

    monkeypatch.setenv("SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(prepare.PrepareModel, "__call__", lambda self: pytest.fail("the model was prepared"))
    example = str(Path(__file__).resolve().parents[3] / "pipelines" / "pedestrian.yaml")
    for argv in (["--platform", "drive-orin", "--tensorrt", "9.9"], ["--target", "local", "--tensorrt", "9.9"]):
        assert run(["dla-report", example, *argv]) == 1
        err = capsys.readouterr().err
        assert "TensorRT 9.9 is not a release the SDK knows" in err and "8.6.10" in err and "10.16.1" in err
    assert not (tmp_path / "state").exists()
