"""sdk/release.py: a release folder's pipeline and prepared model, loaded without the runtime."""

from __future__ import annotations

import json
import subprocess
import sys

from sdk.store.objects import ReleaseStore
from tests.sdk.service.service_helpers import deploy_once

# What the service's supervisor (resident beside the runtime for a whole drive) and the unit renderer must not carry.
RUNTIME_MODULES = ("numpy", "cv2", "onnxruntime", "sdk.sources.stream", "sdk.runtime.runner", "sdk.runtime.cli")


def test_a_release_loads_its_pipeline_and_model_without_the_runtime(tmp_path_factory):
    """What the supervisor does before it starts the runtime: the release, then the plan of its sources."""
    store = ReleaseStore(deploy_once(tmp_path_factory, "service"))  # the deploy tests/sdk/service shares
    committed = store.committed()
    code = (
        "import json, sys; from sdk.release import load_release; release, pipeline, model = load_release(sys.argv[1]); "
        "import sdk.service.supervisor; from sdk.service.plan import source_plan; source_plan(pipeline); "
        "print(json.dumps({'release': release, 'pipeline': pipeline.spec.name, 'model': model.model_path.is_file(), "
        f"'loaded': sorted(m for m in {RUNTIME_MODULES!r} if m in sys.modules)}}))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(store.release_dir(committed))], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"release": committed, "pipeline": "tiny", "model": True, "loaded": []}
