"""The probe's DLA core count on recorded /dev trees: one per core, whatever nodes L4T makes for it.

Recorded layouts (`ls /dev | grep nvdla`): Jetson AGX Orin on JetPack 5 has nvhost-ctrl-nvdla0/1 and
nvhost-nvdla0/1 (four nodes, two cores); on JetPack 6 (L4T 36) only nvhost-ctrl-nvdla0/1 may exist; an
Orin NX 8GB has one core (Jetson Orin NX series data sheet). The old count took every node whose name
did not end in "-ctrl", which no L4T node does, and so reported 4 cores on an AGX Orin.
"""

from __future__ import annotations

import pytest

from sdk.probe import _dla_cores


def record(tmp_path, *names: str):
    for name in ("nvhost-ctrl", "nvhost-ctrl-gpu", "nvhost-gpu", "nvmap", *names):
        (tmp_path / name).touch()
    return str(tmp_path)


@pytest.mark.parametrize(
    ("nodes", "cores"),
    [
        (("nvhost-ctrl-nvdla0", "nvhost-ctrl-nvdla1", "nvhost-nvdla0", "nvhost-nvdla1"), 2),  # AGX Orin, JetPack 5
        (("nvhost-ctrl-nvdla0", "nvhost-ctrl-nvdla1"), 2),  # AGX Orin, JetPack 6
        (("nvhost-ctrl-nvdla0", "nvhost-nvdla0"), 1),  # Orin NX 8GB
    ],
)
def test_one_core_per_dla_number(tmp_path, nodes, cores):
    assert _dla_cores("tegra234", record(tmp_path, *nodes)) == cores


def test_without_nodes_the_module_decides_and_an_unknown_orin_is_unknown(tmp_path):
    empty = record(tmp_path)
    assert _dla_cores("tegra234", empty) is None  # Orin modules differ (2, 1 or 0): never guessed from the SoC
    assert _dla_cores("tegra234", empty, {"dla_cores": 0}) == 0  # an Orin Nano
    assert _dla_cores("tegra234", empty, {"dla_cores": 2}) == 2  # an AGX Orin whose /dev is not readable as expected
    assert _dla_cores("tegra264", empty) == 0  # Thor has no DLA
    assert _dla_cores(None, empty) is None  # not a Jetson: unknown


# /proc/device-tree as L4T 36 writes it (NUL-separated compatible strings; model), recorded per module.
DEVICE_TREES = {
    "orin-nano-devkit": ("nvidia,p3768-0000+p3767-0005\x00nvidia,p3767-0005\x00nvidia,tegra234\x00", "NVIDIA Jetson Orin Nano Developer Kit\x00"),
    "orin-nx-8gb": ("nvidia,p3509-0000+p3767-0001\x00nvidia,p3767-0001\x00nvidia,tegra234\x00", "NVIDIA Orin NX Developer Kit\x00"),
    "agx-orin-64gb": ("nvidia,p3737-0000+p3701-0005\x00nvidia,p3701-0005\x00nvidia,tegra234\x00", "NVIDIA Jetson AGX Orin Developer Kit\x00"),
    "orin-nano-new-part": ("nvidia,p3768-0000+p3767-0099\x00nvidia,tegra234\x00", "NVIDIA Jetson Orin Nano Engineering Reference\x00"),
}


def jetson(monkeypatch, tmp_path, tree: str):
    """The probe on a Jetson whose /dev has no DLA nodes (the Orin Nano's case, or nodes not visible)."""
    from sdk import probe

    compatible, model = DEVICE_TREES[tree]
    files = {"/proc/device-tree/compatible": compatible, "/proc/device-tree/model": model}
    read = probe._read
    monkeypatch.setattr(probe, "_read", lambda path: files[path].replace("\x00", "\n").strip() if path in files else read(path))
    monkeypatch.setattr(probe.glob, "glob", lambda pattern: [])
    return probe.fingerprint(str(tmp_path))


@pytest.mark.parametrize(
    ("tree", "cores", "platform", "part"),
    [
        ("orin-nano-devkit", 0, "jetson-orin-nano", "p3767-0005"),
        ("orin-nx-8gb", 1, "jetson-orin-nx", "p3767-0001"),
        ("agx-orin-64gb", 2, "jetson-agx-orin", "p3701-0005"),
        ("orin-nano-new-part", 0, "jetson-orin-nano", "p3767-0099"),
    ],
)
def test_sdk_probe_reports_the_modules_dla_cores_without_dla_nodes(monkeypatch, tmp_path, tree, cores, platform, part):
    facts = jetson(monkeypatch, tmp_path, tree)
    assert facts["soc"] == "tegra234" and facts["compute_capability"] == "8.7"
    assert facts["dla_cores"] == cores and (facts["module"]["platform"], facts["module"]["part"]) == (platform, part)


def test_the_probe_narrows_the_platforms_dla_cores_and_never_widens_them():
    from sdk.engine.platforms import TensorRTVersion, dla_availability

    trt = TensorRTVersion.parse("10.3.0")
    assert dla_availability("jetson-orin-nano", trt, probed_cores=2).cores == 0  # the table's 0 holds whatever the probe says
    assert dla_availability("jetson-orin-nx", trt, probed_cores=1).cores == 1  # Orin NX 8GB
    assert dla_availability("jetson-agx-orin", trt, probed_cores=None).cores == 2
