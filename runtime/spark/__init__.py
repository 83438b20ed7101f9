"""eoskit's Spark processes: the session a job runs in (``session``), the
Python workers' daemon and its zygote, the Python Spark runs for them, the
executors' checks on a cluster, Spark's errors read back, and the archives
shipped to executors."""
