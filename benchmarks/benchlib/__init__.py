"""What the benchmark scripts of this folder share, one module a role; the
scripts import it by name (``from benchlib.harness import run_benchmark``),
as they run with this folder first on the path. Nothing here imports the
test kit (``eoskit.testing``): tests/test_sizes.py checks it.

- ``results``: the orders' schema and tables, a run's figures;
- ``topics``: the input topic (produce, end offsets, delete);
- ``postgres``: PostgreSQL's tables (connect, reset, read back, verify);
- ``spark``: the session, the eoskit-kafka stream, a query to the end of the topic;
- ``progress``: every batch's progress of a query, from a listener (not Spark's last 100);
- ``rounds``: the order peers run in, rotated round after round;
- ``report``: the printed tables and the ``--json-out`` records;
- ``harness``: the options, contenders and target, and ``run_benchmark``;
- ``job``: a real ``eoskit run`` job and its table, for restart.py and soak.py;
- ``sampling``, ``growth``: peers.py's memory sampling and growth curves.
"""
