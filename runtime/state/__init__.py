"""A job's state beside Spark's: checkpoints read and checked, savepoints
taken and restored, the state backend, keyed state helpers, state read
back and rescaled."""
