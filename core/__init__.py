"""What every layer of eoskit builds on, none of it the protocol: declared
options and settings (``options``), the profiler of the protocol's steps
(``timings``), the fault injection points (``crash``), and the checkpoint
folder's file-system helpers (``fs``). Nothing here imports another eoskit
package, or PySpark."""
