"""`python -m sdk engine build`: the plan travels as JSON; failures come back as one JSON error event."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.engine.build_plan import BuildPlan, plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError
from sdk.spec.schema import DlaPlacement

REPO = Path(__file__).resolve().parents[3]


def test_a_plan_survives_json_exactly():
    plan = plan_build(
        TensorRTVersion.parse("10.3"), {"x": (1, 3, 300, 300)}, "int8", DlaPlacement(core=1), dla_cores=2, predicted=(("conv", "Convolution", "DLA"),)
    )
    again = BuildPlan.from_dict(json.loads(json.dumps(plan.as_dict())))
    assert again == plan and again.digest() == plan.digest()
    with pytest.raises(EngineBuildError, match="build plan format 99"):
        BuildPlan.from_dict({**plan.as_dict(), "format": 99})


def test_the_device_command_reports_a_failure_as_one_json_event(tmp_path):
    plan = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "fp16")
    (tmp_path / "plan.json").write_text(json.dumps(plan.as_dict()))
    # `python -m sdk` of this checkout (-I: not whatever `sdk` is installed)
    module = f"import runpy, sys; sys.path.insert(0, {str(REPO)!r}); runpy.run_module('sdk', run_name='__main__', alter_sys=True)"
    arguments = ["engine", "build", "--plan", "plan.json", "--model", "m.onnx", "--out", "out", "--contract", json.dumps({"max_transitions": 2})]
    done = subprocess.run([sys.executable, "-I", "-c", module, *arguments], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1 and done.stderr == ""
    assert events[0] == {"event": "start", "tensorrt": "10.3.0", "device": "GPU", "dla_core": None}
    assert events[-1]["event"] == "error" and events[-1]["kind"] in ("EngineBuildError", "MissingDependencyError")
    assert not (tmp_path / "out").exists()  # nothing half-written
