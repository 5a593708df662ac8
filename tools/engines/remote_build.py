"""Engines are built ON the target (TensorRT cannot build for a Jetson on an x86 host), cached on the host.

Lazy: settings now; when called, the target is probed once and the cache key formed from its
fingerprint. A hit (any twin with the same fingerprint built it before) returns without building.
A miss, which says which key field changed, uploads the prepared model, plan.json and the INT8
cache next to the agent copy of `sdk`, runs `python -m sdk engine build` there with its JSON events
streamed to `on_event`, fetches the engine and TensorRT's placement, checks the plan header
against the target's TensorRT, and stores the engine under the key.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sdk.engine.build_plan import BuildPlan
from sdk.engine.plan_header import check_plan_for_target
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError, TargetError
from tools.connect.session_protocol import parse_event
from tools.connect.sessions import SshSession, open_session
from tools.engines.cache import EngineCache, EngineCacheKey
from tools.release.bundle import runtime_files


@dataclass(frozen=True)
class EngineOnTarget:
    engine: Path
    key: EngineCacheKey
    built: bool  # False: reused from the cache
    cache_reason: str  # "hit", or why the cache missed


class BuildEngineOnTarget:
    """`prepared_model` is what TensorRT parses: the prepared model, or for a Q/DQ plan (TensorRT 11,
    strongly typed) the Q/DQ model from `sdk calibrate`, which then carries the INT8 scales itself."""

    def __init__(self, target, prepared_model: Path, plan: BuildPlan, calibration: Path | None, contract, cache_root: Path,
                 on_event: Callable[[dict], None] | None = None) -> None:  # fmt: skip
        self.target = target
        self.prepared_model = Path(prepared_model)
        self.plan = plan
        self.calibration = calibration
        self.contract = contract  # the pipeline's model.dla (validated), or None
        self.cache = EngineCache(cache_root)
        self.on_event = on_event or (lambda event: None)

    def __call__(self) -> EngineOnTarget:
        if self.plan.int8_source == "calibration_cache" and self.calibration is None:
            raise EngineBuildError("an implicit-INT8 plan (TensorRT 8.6/10) needs its calibration cache", hint="sdk calibrate PIPELINE --tensorrt V")
        with open_session(self.target) as session:
            if not isinstance(session, SshSession):
                raise TargetError(f"target {self.target.name}: engines are built on a device over SSH", hint="use a target from targets/")
            fingerprint = session.probe()
            if not fingerprint.get("tensorrt"):
                raise EngineBuildError(f"target {self.target.name}: no TensorRT found on the device", hint="install JetPack's TensorRT on the target")
            key = EngineCacheKey.for_build(self.prepared_model, self.calibration, self.plan, fingerprint, self.target.spec.platform)
            lookup = self.cache.lookup(key)
            if lookup.hit:
                return EngineOnTarget(lookup.engine, key, False, lookup.reason)
            self.on_event({"event": "cache", "reason": lookup.reason})
            session.ensure_agent(runtime_files())
            engine = self._build(session, key, TensorRTVersion.parse(fingerprint["tensorrt"]))
            return EngineOnTarget(engine, key, True, lookup.reason)

    def _build(self, session: SshSession, key: EngineCacheKey, tensorrt: TensorRTVersion) -> Path:
        connection, remote = session.connection, f"{session.root}/builds/{key.digest()}"
        connection.run(["mkdir", "-p", "--", remote]).check("creating the build folder")
        sftp = connection.sftp()
        with tempfile.TemporaryDirectory() as scratch:
            plan_file = Path(scratch) / "plan.json"
            plan_file.write_text(json.dumps(self.plan.as_dict()))
            sends = {"model.onnx": self.prepared_model, "plan.json": plan_file}
            if self.calibration is not None:
                sends["calibration.cache"] = Path(self.calibration)
            with connection.transfer("uploading the build inputs"):
                for name, path in sends.items():
                    sftp.put(str(path), f"{remote}/{name}")
            argv = [*session._agent_command(), "engine", "build", "--plan", f"{remote}/plan.json", "--model", f"{remote}/model.onnx",
                    "--out", f"{remote}/out"]  # fmt: skip
            if self.calibration is not None:
                argv += ["--calibration", f"{remote}/calibration.cache"]
            if self.contract is not None:
                argv += ["--contract", json.dumps(self.contract.model_dump())]
            events: list[dict] = []

            def on_line(line: str) -> None:
                event = parse_event(line)
                if event:
                    events.append(event)
                    self.on_event(event)

            connection.run(argv, on_stdout_line=on_line, timeout=self.target.spec.timeouts.deadline_s)
            last = events[-1] if events else {}
            if last.get("event") != "done":
                connection.run(["rm", "-rf", "--", remote])
                message = last.get("message") or "the build stopped without a result"
                raise EngineBuildError(f"target {self.target.name}: {message}", hint=last.get("hint") or "see the build log on the target")
            fetched = Path(scratch) / "model.engine"
            with connection.transfer("fetching the engine"):
                sftp.get(f"{remote}/out/model.engine", str(fetched))
                sftp.get(f"{remote}/out/placement.json", str(Path(scratch) / "placement.json"))
                sftp.get(f"{remote}/out/engine_layers.json", str(Path(scratch) / "engine_layers.json"))
            connection.run(["rm", "-rf", "--", remote])
            check_plan_for_target(fetched, tensorrt, self.target.name)
            (Path(scratch) / "build.json").write_text(json.dumps({"key": asdict(key), "events": events}, indent=2))
            extras = {name: Path(scratch) / name for name in ("placement.json", "engine_layers.json", "build.json")}
            return self.cache.store(key, fetched, extras)
