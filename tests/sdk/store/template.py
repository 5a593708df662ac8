"""A store of real releases of the tests' tiny pipeline, built once per run for the fault tests that copy it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path


def build_store(base: Path, releases: list[tuple[str, str, str, bool]], rate: str = "null") -> dict[str, str]:
    """`base`/template: each (label, source URI, text after the tiny pipeline's, committed?) staged in order, the committed
    ones through their real trial (a 2-frame health check) and commit. Writes and returns label -> release id."""
    from sdk.spec import load_pipeline
    from sdk.store.trial import HealthPolicy
    from tests.conftest import PIPELINE, tiny_yolo
    from tools.connect.sessions import LocalSession
    from tools.models.prepare import PrepareModel
    from tools.release.bundle import collect_bundle
    from tools.release.bytecode import bytecode_files, host_abi
    from tools.release.stage import manifest_for, stage_release
    from tools.targets import LocalTarget

    session = LocalSession(LocalTarget("local", base / "template"))
    ids = {}
    for label, uri, extra, commit in releases:
        folder = base / f"pipeline-{label}"
        folder.mkdir()
        tiny_yolo(folder / "tiny.onnx")
        (folder / "tiny.yaml").write_text(PIPELINE.format(uri=uri, rate=rate, max_ms=5000) + extra + f"# release {label}\n")
        pipeline = load_pipeline(folder / "tiny.yaml")
        prepare = PrepareModel(pipeline, base / "cache")
        bundle = collect_bundle(pipeline, prepare(), prepare.key)
        bundle = replace(bundle, files={**bundle.files, **bytecode_files(bundle.files, host_abi(), base / "cache")})  # as a deploy ships it
        session.lock("template")
        try:
            staged = stage_release(session, bundle, manifest_for(bundle))
            if commit:
                assert session.trial(staged.release_id, "template", HealthPolicy(min_frames=2, timeout_s=60), lambda event: None).healthy
                session.store_op("commit")
        finally:
            session.unlock("template")
        ids[label] = staged.release_id
    (base / "ids.json").write_text(json.dumps(ids))
    return ids
