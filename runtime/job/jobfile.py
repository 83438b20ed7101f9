"""Loading a job file: a Python file with a module-level ``pipeline``."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from pyspark import cloudpickle

from eoskit.runtime.job.pipeline import Pipeline
from eoskit.twophase.verdicts import first_line


class JobFileError(ValueError):
    """The job file is missing, fails to import, or defines no Pipeline.

    A failed import names the line of the job file it failed at and the
    error (eoskit's own errors by their message alone); the error itself is
    ``__cause__``."""


def _where(job: Path, exc: BaseException) -> str:
    """``line N`` of the job file the exception came through, if it did."""
    if isinstance(exc, SyntaxError) and exc.lineno and Path(exc.filename or "") == job:
        return f" line {exc.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if Path(frame.filename) == job]
    return f" line {lines[-1]}" if lines else ""


def _error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg}"
    text = first_line(str(exc))
    if type(exc).__module__.startswith("eoskit."):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_module(path: str | os.PathLike[str], module_name: str) -> ModuleType:
    """Import a Python file as ``module_name``, its classes and functions
    shipped to Spark's workers by value.

    Registered in ``sys.modules`` so that it imports once and its objects
    pickle; registered with cloudpickle *by value*, since Spark's Python
    workers cannot import a module that lives only in this process: a
    ``StatefulProcessor`` or UDF class defined in a job file would fail in
    every task with ModuleNotFoundError. The file's folder is put on the
    driver's path, for helpers it imports (workers need those installed)."""
    job = Path(path)
    spec = importlib.util.spec_from_file_location(module_name, job)
    if spec is None or spec.loader is None:
        raise JobFileError(f"job file {str(job)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    cloudpickle.register_pickle_by_value(module)
    sys.path.insert(0, str(job.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the job raises is the job file's failure
        raise JobFileError(f"job file {str(job)!r}{_where(Path(spec.origin or job), exc)}: "
                           f"{_error(exc)}") from exc
    return module


def load_pipeline(path: str | os.PathLike[str]) -> Pipeline:
    job = Path(path)
    if not job.is_file():
        raise JobFileError(f"job file {str(job)!r} does not exist")
    module = load_module(job, f"eoskit_job_{job.stem}")
    pipeline = getattr(module, "pipeline", None)
    if not isinstance(pipeline, Pipeline):
        raise JobFileError(
            f"job file {str(job)!r} must define a module-level `pipeline = Pipeline(...)`"
            + ("" if pipeline is None else f", found {type(pipeline).__name__}")
        )
    return pipeline
