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


def test_without_nodes_the_soc_decides(tmp_path):
    empty = record(tmp_path)
    assert _dla_cores("tegra234", empty) == 2  # AGX Orin's two cores, where /dev is not readable as expected
    assert _dla_cores("tegra264", empty) == 0  # Thor has no DLA
    assert _dla_cores(None, empty) is None  # not a Jetson: unknown
