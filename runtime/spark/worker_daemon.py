"""The module Spark runs as its Python worker daemon (``spark.python.daemon.module``).

It only starts :func:`eoskit.runtime.spark.daemon.main`. The code lives in
``spark_daemon``, which ``eoskit-spark-python`` (the Python eoskit's local
sessions give Spark, ``eoskit.runtime.spark.python``) imports before it
runs the module Spark asked for; a module already imported when it is asked
to run makes runpy warn ("found in sys.modules ... prior to execution") on
every job. This module is imported by nothing, so running it is quiet.
"""

from __future__ import annotations

from eoskit.runtime.spark.daemon import main

if __name__ == "__main__":
    main()
