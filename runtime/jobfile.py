"""Loading a job file: a Python file with a module-level ``pipeline``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from eoskit.runtime.pipeline import Pipeline


class JobFileError(ValueError):
    """The job file is missing, fails to import, or defines no Pipeline."""


def load_pipeline(path: str | os.PathLike[str]) -> Pipeline:
    job = Path(path)
    if not job.is_file():
        raise JobFileError(f"job file {str(job)!r} does not exist")
    module_name = f"eoskit_job_{job.stem}"
    spec = importlib.util.spec_from_file_location(module_name, job)
    if spec is None or spec.loader is None:
        raise JobFileError(f"job file {str(job)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered so that functions defined in the job (transforms, UDFs)
    # pickle by reference; the job's folder is importable for its helpers.
    sys.modules[module_name] = module
    sys.path.insert(0, str(job.resolve().parent))
    spec.loader.exec_module(module)
    pipeline = getattr(module, "pipeline", None)
    if not isinstance(pipeline, Pipeline):
        raise JobFileError(
            f"job file {str(job)!r} must define a module-level `pipeline = Pipeline(...)`"
            + ("" if pipeline is None else f", found {type(pipeline).__name__}")
        )
    return pipeline
