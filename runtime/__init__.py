"""The eoskit runtime: pipelines, the CLI, and local services for development."""

from eoskit.runtime.pipeline import Pipeline, PipelineFailed
from eoskit.runtime.progress import RunSummary

__all__ = ["Pipeline", "PipelineFailed", "RunSummary"]
