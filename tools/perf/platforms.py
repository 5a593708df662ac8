"""The platform facts (platform_facts.yaml) resolved into engines the performance model predicts with.

A platform is a module (jetson-agx-orin-64gb, ...) or a family name that means its largest module (jetson-agx-orin ->
64GB, as target files name platforms); a power mode (named as NVIDIA's nvpmodel file names it; without one, the mode
the module boots in) scales the module's peaks by its clock and active TPCs unless the mode names a published figure.
Each engine (the GPU, the DLA cores together) gets its dense peaks per precision.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
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
    core_mhz: tuple[float, ...] = ()  # each DLA core's clock in this mode (nvpmodel's DLA0_CORE, DLA1_CORE)

    def on_core(self, core: int) -> EnginePeaks:
        """The peaks of DLA core `core`: the mode's per-core figure scaled by that core's clock against core 0's."""
        if not self.core_mhz or core <= 0 or core >= len(self.core_mhz) or not self.core_mhz[0]:
            return self
        ratio = self.core_mhz[core] / self.core_mhz[0]
        return replace(self, dense_tops={k: v * ratio for k, v in self.dense_tops.items()},
                       sparse_tops={k: v * ratio for k, v in self.sparse_tops.items()}, clock_mhz=self.core_mhz[core])  # fmt: skip


@dataclass(frozen=True)
class Machine:
    platform: str
    name: str
    power_mode: str
    architecture: str
    gpu: EnginePeaks
    dla: EnginePeaks | None
    sources: tuple[str, ...]  # the source keys behind these numbers
    boot_mode: str = ""  # the mode the module boots in (its nvpmodel file's PM_CONFIG DEFAULT)
    boot_note: str = ""  # where no nvpmodel file confirmed the boot mode: why it is taken as such

    @property
    def at_boot_mode(self) -> bool:
        return self.power_mode == self.boot_mode

    def source_titles(self) -> list[dict]:
        sources = platform_facts()["sources"]
        return [{"key": key, "title": sources[key]["title"], "url": sources[key]["url"]} for key in self.sources]


def resolve_platform(platform: str) -> str:
    facts = platform_facts()["platforms"]
    name = FAMILY_DEFAULT.get(platform, platform)
    if name not in facts:
        raise ConfigError(f"unknown platform {platform!r}", hint=f"known: host, {', '.join(platform_names())}")
    return name


def resolve_mode(platform: str, power_mode: str | None) -> str | None:
    """The table's name of `power_mode` on `platform` (as `nvpmodel -q` prints it: MODE_30W), also given as its
    nvpmodel id ("2", as `nvpmodel -m 2`), case aside, or without the MODE_ prefix ("30W"); None when it has none."""
    modes = platform_facts()["platforms"][resolve_platform(platform)]["power_modes"]["modes"]
    if power_mode is None:
        return None
    wanted = str(power_mode).strip().upper()
    for name, mode in modes.items():
        if wanted in (name.upper(), name.upper().removeprefix("MODE_")) or ("id" in mode and wanted == str(mode["id"])):
            return name
    return None


def boot_mode(platform: str) -> str:
    """The mode `platform` boots in: its nvpmodel file's default."""
    return platform_facts()["platforms"][resolve_platform(platform)]["power_modes"]["default"]


def fastest_mode(platform: str) -> str:
    """The module's fastest mode for comparison: MAXN where it has one, else the mode with the most GPU clock x TPCs."""
    modes = platform_facts()["platforms"][resolve_platform(platform)]["power_modes"]["modes"]
    if "MAXN" in modes:
        return "MAXN"
    return max(modes, key=lambda m: (modes[m].get("gpu_sparse_int8_tops", 0), modes[m]["gpu_mhz"] * modes[m]["tpcs"]))


def machine(platform: str, power_mode: str | None = None) -> Machine:
    """The engines of `platform` in `power_mode` (default: the mode the module boots in)."""
    facts = platform_facts()
    name = resolve_platform(platform)
    module = facts["platforms"][name]
    modes = module["power_modes"]
    mode_name = modes["default"] if power_mode is None else resolve_mode(name, power_mode)
    if mode_name is None:
        listed = ", ".join(f"{m} ({v['id']})" if "id" in v else m for m, v in modes["modes"].items())
        raise ConfigError(f"{name} has no power mode {power_mode!r}", hint=f"its modes (nvpmodel name and id): {listed}")
    mode = modes["modes"][mode_name]
    gpu_facts, ratios = module["gpu"], facts["precision"]
    scale = (mode["gpu_mhz"] / gpu_facts["max_clock_mhz"]) * (mode["tpcs"] / gpu_facts["tpcs"])
    gpu_sparse = mode.get("gpu_sparse_int8_tops", gpu_facts["sparse_int8_tops"] * scale)
    memory = mode.get("memory_gbs", module["memory"]["gbs"])
    gpu = _engine("gpu", gpu_sparse, ratios["gpu"], ratios["gpu_dense_fraction_of_sparse"], memory, mode["gpu_mhz"])
    sources = {gpu_facts["source"], module["memory"]["source"], modes["source"], ratios["source"], ratios["tf32_source"]}
    sources |= {mode[k] for k in ("tops_source", "mode_source", "memory_source") if k in mode}
    sources |= {modes["default_source"]} if "default_source" in modes else set()
    dla = None
    dla_facts = module["dla"]
    sources.add(dla_facts["source"])
    if dla_facts.get("cores"):
        cores = dla_facts["cores"]
        clocks = tuple(float(c) for c in mode.get("dla_mhz", [dla_facts["max_clock_mhz"]] * cores))
        if "module_sparse_int8_tops" in mode:
            dla_sparse = mode["module_sparse_int8_tops"] - gpu_sparse
        else:  # all cores together, each at its own clock; core 0's share is what a model on it gets
            dla_sparse = mode.get("dla_sparse_int8_tops", dla_facts["sparse_int8_tops"] * sum(clocks) / (dla_facts["max_clock_mhz"] * len(clocks)))
        per_core = dla_sparse * clocks[0] / sum(clocks)
        dla = _engine("dla", per_core, ratios["dla"], ratios["gpu_dense_fraction_of_sparse"], memory, clocks[0], cores, clocks)
    return Machine(name, module["name"], mode_name, module["architecture"], gpu, dla, tuple(sorted(sources)), modes["default"],
                   modes.get("default_unconfirmed", ""))  # fmt: skip


def _engine(name: str, sparse_int8: float, ratios: dict, dense_fraction: float, memory: float, clock: float, cores: int = 1,
            core_mhz: tuple[float, ...] = ()) -> EnginePeaks:  # fmt: skip
    sparse = {precision: sparse_int8 * ratio for precision, ratio in ratios.items()}
    dense = {precision: value * dense_fraction for precision, value in sparse.items()}
    return EnginePeaks(name, dense, sparse, memory, clock, cores, core_mhz)
