"""`model.dla`: the placement contract in the pipeline file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TEXT = (REPO / "pipelines" / "pedestrian.yaml").read_text()


def load_with(tmp_path: Path, contract: str):
    (tmp_path / "assets").mkdir(exist_ok=True)
    for name in ("vtest.avi", "ssdlite_pedestrian.onnx"):
        (tmp_path / "assets" / name).write_bytes(b"stand-in")
    path = tmp_path / "p.yaml"
    path.write_text(EXAMPLE_TEXT.replace("  threads: 2\n", f"  threads: 2\n  dla: {contract}\n"))
    return load_pipeline(path)


def test_contract_loads_with_defaults(tmp_path):
    dla = load_with(tmp_path, "{max_transitions: 2}").spec.model.dla
    assert (dla.core, dla.gpu_fallback, dla.max_gpu_layers, dla.max_transitions) == (0, "allowed", None, 2)
    assert load_pipeline(REPO / "pipelines" / "pedestrian.yaml").spec.model.dla is None  # no contract: GPU or DLA as built


@pytest.mark.parametrize(
    ("contract", "message"),
    [
        ("{core: 2}", "model.dla.core"),
        ("{gpu_fallback: sometimes}", "model.dla.gpu_fallback"),
        ("{max_gpu_layer: 3}", "max_gpu_layers"),  # did you mean
        ("{max_transitions: -1}", "model.dla.max_transitions"),
        ("{gpu_fallback: forbidden, max_gpu_layers: 3}", "forbidden allows no GPU layer"),
    ],
)
def test_bad_contracts_are_refused_by_path(tmp_path, contract, message):
    with pytest.raises(ConfigError) as info:
        load_with(tmp_path, contract)
    assert message in info.value.message


def test_a_cuda_graph_with_the_layer_profiler_is_refused_at_load(tmp_path):
    load_with(tmp_path, "{core: 0}")  # the stand-in assets
    path = tmp_path / "p.yaml"
    path.write_text(EXAMPLE_TEXT.replace("  threads: 2\n", "  threads: 2\n  cuda_graph: true\n  profile_layers: true\n"))
    with pytest.raises(ConfigError, match="cuda_graph and profile_layers exclude each other"):
        load_pipeline(path)
    path.write_text(EXAMPLE_TEXT.replace("  threads: 2\n", "  threads: 2\n  cuda_graph: true\n"))
    assert load_pipeline(path).spec.model.cuda_graph is True
