"""The on-device runtime: frame loop, latency recording, verdict and report."""

from sdk.runtime.runner import PipelineRunner, RunResult

__all__ = ["PipelineRunner", "RunResult"]
