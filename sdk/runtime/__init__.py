"""The on-device runtime: frame loop, latency recording, verdict and report."""

from sdk.runtime.result import RunResult
from sdk.runtime.runner import PipelineRunner

__all__ = ["PipelineRunner", "RunResult"]
