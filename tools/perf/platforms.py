"""The platform facts (platform_facts.yaml) resolved into engines the performance model predicts with.

A platform is a module (jetson-agx-orin-64gb, ...) or a family name that means its largest module (jetson-agx-orin ->
64GB, as target files name platforms); a power mode scales the module's peaks by its clock and active TPCs unless
the mode names a published figure. Each engine (the GPU, the DLA cores together) gets its dense peaks per precision.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import ConfigError

FACTS_FILE = Path(__file__).with_name("platform_facts.yaml")
FAMILY_DEFAULT = {
    "jetson-agx-orin": "jetson-agx-orin-64gb",
    "jetson-orin-nx": "jetson-orin-nx-16gb",
    "jetson-orin-nano": "jetson-orin-nano-8gb",
}


@functools.cache
def platform_facts() -> dict:
    import yaml

    return yaml.safe_load(FACTS_FILE.read_text())


def platform_names() -> tuple[str, ...]:
    """Every module, then the family names that stand for one."""
    facts = platform_facts()["platforms"]
    return (*facts, *(f for f in FAMILY_DEFAULT if f not in facts))


@dataclass(frozen=True)
class EnginePeaks:
    """One engine at one power mode: dense peak TOPS per precision, the memory it reads through, its clock."""

    name: str  # "gpu" or "dla"
    dense_tops: dict[str, float]  # precision -> dense tera-ops/s on the tensor cores (or the DLA's MAC array)
    sparse_tops: dict[str, float]  # with 2:4 sparse weights
    memory_gbs: float
    clock_mhz: float
    cores: int = 1  # DLA cores (a model runs on one; the figures are per core)


@dataclass(frozen=True)
class Machine:
    platform: str
    name: str
    power_mode: str
    architecture: str
    gpu: EnginePeaks
    dla: EnginePeaks | None
    sources: tuple[str, ...]  # the source keys behind these numbers

    def source_titles(self) -> list[dict]:
        sources = platform_facts()["sources"]
        return [{"key": key, "title": sources[key]["title"], "url": sources[key]["url"]} for key in self.sources]


def resolve_platform(platform: str) -> str:
    facts = platform_facts()["platforms"]
    name = FAMILY_DEFAULT.get(platform, platform)
    if name not in facts:
        raise ConfigError(f"unknown platform {platform!r}", hint=f"known: host, {', '.join(platform_names())}")
    return name


def machine(platform: str, power_mode: str | None = None) -> Machine:
    """The engines of `platform` in `power_mode` (default: the module's default mode)."""
    facts = platform_facts()
    name = resolve_platform(platform)
    module = facts["platforms"][name]
    modes = module["power_modes"]
    mode_name = power_mode or modes["default"]
    if mode_name not in modes["modes"]:
        raise ConfigError(f"{name} has no power mode {mode_name!r}", hint=f"its modes: {', '.join(modes['modes'])}")
    mode = modes["modes"][mode_name]
    gpu_facts, ratios = module["gpu"], facts["precision"]
    scale = (mode["gpu_mhz"] / gpu_facts["max_clock_mhz"]) * (mode["tpcs"] / gpu_facts["tpcs"])
    gpu_sparse = mode.get("gpu_sparse_int8_tops", gpu_facts["sparse_int8_tops"] * scale)
    memory = mode.get("memory_gbs", module["memory"]["gbs"])
    gpu = _engine("gpu", gpu_sparse, ratios["gpu"], ratios["gpu_dense_fraction_of_sparse"], memory, mode["gpu_mhz"])
    sources = {gpu_facts["source"], module["memory"]["source"], modes["source"], ratios["source"], ratios["tf32_source"]}
    sources |= {mode[k] for k in ("tops_source", "mode_source", "memory_source") if k in mode}
    dla = None
    dla_facts = module["dla"]
    sources.add(dla_facts["source"])
    if dla_facts.get("cores"):
        if "module_sparse_int8_tops" in mode:
            dla_sparse = mode["module_sparse_int8_tops"] - gpu_sparse
        else:
            dla_sparse = mode.get(
                "dla_sparse_int8_tops", dla_facts["sparse_int8_tops"] * mode.get("dla_mhz", dla_facts["max_clock_mhz"]) / dla_facts["max_clock_mhz"]
            )
        cores = dla_facts["cores"]
        dla = _engine("dla", dla_sparse / cores, ratios["dla"], ratios["gpu_dense_fraction_of_sparse"], memory, mode.get("dla_mhz", 0), cores)
    return Machine(name, module["name"], mode_name, module["architecture"], gpu, dla, tuple(sorted(sources)))


def _engine(name: str, sparse_int8: float, ratios: dict, dense_fraction: float, memory: float, clock: float, cores: int = 1) -> EnginePeaks:
    sparse = {precision: sparse_int8 * ratio for precision, ratio in ratios.items()}
    dense = {precision: value * dense_fraction for precision, value in sparse.items()}
    return EnginePeaks(name, dense, sparse, memory, clock, cores)
