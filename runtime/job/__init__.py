"""Running a job: the ``Pipeline`` and its components, the run loop, the
job's settings and restart strategies, what a failure means for a restart,
its control plane beside the checkpoint, progress and metrics."""
