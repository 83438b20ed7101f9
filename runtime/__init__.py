"""The eoskit runtime: pipelines, the CLI, and local services for development.

Attributes are imported on first use, so that light modules of this package
(the Spark worker daemon, the CLI's argument parsing) do not import PySpark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ArrowTransform", "Pipeline", "PipelineError", "RunSummary"]


def __getattr__(name: str) -> Any:
    if name in ("Pipeline", "PipelineError"):
        from eoskit.runtime.job import pipeline

        return getattr(pipeline, name)
    if name == "ArrowTransform":
        from eoskit.runtime.job.chain import ArrowTransform

        return ArrowTransform
    if name == "RunSummary":
        from eoskit.runtime.job.progress import RunSummary

        return RunSummary
    raise AttributeError(name)
