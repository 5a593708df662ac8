"""The placement contract against a placement summary: each limit refuses with the numbers, and lets the boundary pass."""

from __future__ import annotations

import pytest

from sdk.engine.placement import PlacementSummary, check_contract
from sdk.errors import EngineBuildError
from sdk.spec.schema import DlaPlacement

SUMMARY = PlacementSummary(dla_layers=180, gpu_layers=7, subgraphs=2, transitions=6, dla_cores=2)


@pytest.mark.parametrize(
    ("contract", "summary", "message"),
    [
        (DlaPlacement(gpu_fallback="forbidden"), SUMMARY, "7 layers on the GPU with gpu_fallback: forbidden"),
        (DlaPlacement(max_gpu_layers=6), SUMMARY, "7 GPU layers > max_gpu_layers 6"),
        (DlaPlacement(max_transitions=5), SUMMARY, "6 GPU<->DLA transitions > max_transitions 5"),
        (DlaPlacement(core=1), PlacementSummary(180, 7, 2, 6, dla_cores=1), "DLA core 1 does not exist (the target has 1)"),
        (DlaPlacement(), PlacementSummary(0, 187, 0, 0, dla_cores=0), "no usable DLA core"),
        (DlaPlacement(), PlacementSummary(170, 17, 17, 32, dla_cores=2), "17 DLA loadables > 16 per core"),
    ],
)
def test_each_limit_refuses_with_the_numbers(contract, summary, message):
    with pytest.raises(EngineBuildError) as info:
        check_contract(contract, summary, "p.yaml: model.dla")
    assert message in info.value.message and info.value.message.startswith("p.yaml: model.dla: placement contract violated")
    assert "dla-report" in info.value.hint


@pytest.mark.parametrize(
    "contract",
    [None, DlaPlacement(), DlaPlacement(max_gpu_layers=7, max_transitions=6, core=1), DlaPlacement(gpu_fallback="forbidden", max_transitions=0)],
)
def test_contracts_at_the_boundary_pass(contract):
    summary = SUMMARY if contract is None or contract.gpu_fallback == "allowed" else PlacementSummary(187, 0, 1, 0, dla_cores=2)
    check_contract(contract, summary, "p.yaml: model.dla")
