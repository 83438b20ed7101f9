"""How a sink becomes part of a Spark query: any eoskit sink as a PySpark
streaming data source (``datasource``), the same protocol in
``foreachBatch`` for the output modes Spark gives Python data sources no
part in (``foreach_batch``), and the output modes themselves
(``output_modes``)."""
