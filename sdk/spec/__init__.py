"""The pipeline file: schema, safe loading and path rules, shared by the device and the host."""

from sdk.spec.loader import PipelineFile, load_pipeline
from sdk.spec.schema import Pipeline

__all__ = ["Pipeline", "PipelineFile", "load_pipeline"]
