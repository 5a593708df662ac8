"""The placement contract (`model.dla` in the pipeline file) checked against a placement summary.

The host checks it against the static analysis's prediction before anything is built; the device
builder checks the same contract against TensorRT's own answers (can_run_on_DLA per layer of the
parsed network). Both raise the same EngineBuildError naming the numbers.

Note: both count layers before fusion: the ONNX nodes (host) and the parsed network's layers (device),
where TensorRT has not yet fused Conv+Activation, folded Scale layers or collapsed a DLA subgraph into
one loadable. `max_gpu_layers` and `max_transitions` are therefore in pre-fusion units; the built
engine's placement is in the engine inspector's layer list (BuiltEngine.layers), which is recorded
but not yet read back into a PlacementSummary.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdk.errors import EngineBuildError


@dataclass(frozen=True)
class PlacementSummary:
    dla_layers: int
    gpu_layers: int
    subgraphs: int  # DLA loadables
    transitions: int  # GPU<->DLA boundaries inside the network
    dla_cores: int  # cores the target has for this TensorRT (0: no DLA)
    loadables_per_core: int = 16
    source: str = "the DLA analysis"  # or "TensorRT" on the device


def check_contract(contract, summary: PlacementSummary, where: str) -> None:
    """Raise EngineBuildError when `summary` violates `contract` (a schema DlaPlacement, or None)."""
    if contract is None:
        return
    problems = []
    if summary.dla_cores == 0:
        problems.append("the target has no usable DLA core")
    elif contract.core >= summary.dla_cores:
        problems.append(f"DLA core {contract.core} does not exist (the target has {summary.dla_cores})")
    if contract.gpu_fallback == "forbidden" and summary.gpu_layers:
        problems.append(f"{summary.gpu_layers} layers on the GPU with gpu_fallback: forbidden")
    if contract.max_gpu_layers is not None and summary.gpu_layers > contract.max_gpu_layers:
        problems.append(f"{summary.gpu_layers} GPU layers > max_gpu_layers {contract.max_gpu_layers}")
    if contract.max_transitions is not None and summary.transitions > contract.max_transitions:
        problems.append(f"{summary.transitions} GPU<->DLA transitions > max_transitions {contract.max_transitions}")
    if summary.subgraphs > summary.loadables_per_core:
        problems.append(f"{summary.subgraphs} DLA loadables > {summary.loadables_per_core} per core")
    if problems:
        raise EngineBuildError(
            f"{where}: placement contract violated ({summary.source}: {summary.dla_layers} layers on DLA, "
            f"{summary.gpu_layers} on GPU, {summary.subgraphs} DLA subgraphs, {summary.transitions} transitions): " + "; ".join(problems),
            hint="see `sdk dla-report` for the layers that leave DLA and what to change, or relax model.dla in the pipeline file",
        )
