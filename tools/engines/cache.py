"""The host's engine cache: one entry per (prepared model, INT8 artifact, build plan, TensorRT,
compute capability, platform, DLA core, module).

The module is the Jetson module's part number from the probe (AGX Orin 32GB p3701-0004 and 64GB p3701-0005, Orin NX
16GB p3767-0000 and 8GB p3767-0001 share a platform name but differ in SMs, memory and DLA cores): TensorRT tunes a
plan to the device it builds on and warns against using a plan on another device model ("Using an engine plan file
across different models of devices is not recommended and is likely to affect performance or even cause errors",
the TensorRT builder's warning; developer guide, "Serialized engines are not portable across ... devices").

Nothing in the key names a particular device, so every twin with the same fingerprint reuses the
entry without a rebuild. A miss says which key field changed against the closest cached entry of
the same model (first builds take 10-20 minutes on a Jetson: a silent miss is expensive).
Entries are built in a temporary folder and renamed (tools/cache.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from sdk.engine.build_plan import BuildPlan
from sdk.engine.platforms import TensorRTVersion
from sdk.release import sha256_of
from tools.cache import build_folder

ENGINE_FILE = "model.engine"
KEY_FILE = "key.json"


@dataclass(frozen=True)
class EngineCacheKey:
    prepared_model: str  # sha256 of the prepared ONNX
    quantization: str  # sha256 of the INT8 artifact the plan uses, or "none"
    build_plan: str  # BuildPlan.digest()
    tensorrt: str
    compute_capability: str
    platform: str
    dla_core: str  # "gpu" or the core number
    module: str = "none"  # the Jetson module's part number (sdk.probe), "none" where the probe names none; older keys: "none"

    @classmethod
    def for_build(cls, prepared_model: Path, quantization: Path | None, plan: BuildPlan, fingerprint: dict, platform: str) -> EngineCacheKey:
        return cls(
            prepared_model=sha256_of(prepared_model),
            quantization=sha256_of(quantization) if quantization is not None else "none",
            build_plan=plan.digest(),
            tensorrt=str(TensorRTVersion.parse(fingerprint["tensorrt"])),
            compute_capability=str(fingerprint["compute_capability"]),
            platform=platform,
            dla_core="gpu" if plan.dla_core is None else str(plan.dla_core),
            module=str((fingerprint.get("module") or {}).get("part") or "none"),
        )

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:24]

    def changes_from(self, other: EngineCacheKey) -> list[str]:
        def short(value: str) -> str:
            return value[:12] if len(value) == 64 else value  # sha256 digests

        changed = [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]
        return [f"{name} {short(getattr(other, name))} -> {short(getattr(self, name))}" for name in changed]


@dataclass(frozen=True)
class CacheLookup:
    key: EngineCacheKey
    engine: Path | None  # the cached engine on a hit
    reason: str  # "hit", or why not

    @property
    def hit(self) -> bool:
        return self.engine is not None


class EngineCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "engines"

    def _entries(self):
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if (folder / KEY_FILE).is_file() and (folder / ENGINE_FILE).is_file():
                yield folder, EngineCacheKey(**json.loads((folder / KEY_FILE).read_text()))

    def lookup(self, key: EngineCacheKey) -> CacheLookup:
        folder = self.root / key.digest()
        if (folder / ENGINE_FILE).is_file():
            return CacheLookup(key, folder / ENGINE_FILE, "hit")
        closest = None
        for _, cached in self._entries():
            changes = key.changes_from(cached)
            if closest is None or len(changes) < len(closest):
                closest = changes
        if closest is None:
            return CacheLookup(key, None, "miss: no engine cached yet")
        return CacheLookup(key, None, "miss: " + "; ".join(closest) + " (against the closest cached engine)")

    def store(self, key: EngineCacheKey, engine: Path, extras: dict[str, Path] | None = None) -> Path:
        def fill(folder: Path) -> None:
            shutil.copyfile(engine, folder / ENGINE_FILE)
            for name, path in (extras or {}).items():  # build log, placement report
                shutil.copyfile(path, folder / name)
            (folder / KEY_FILE).write_text(json.dumps(asdict(key), indent=2, sort_keys=True) + "\n")

        build_folder(self.root / key.digest(), fill)
        return self.root / key.digest() / ENGINE_FILE
