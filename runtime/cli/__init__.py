"""The ``eoskit`` command: the parser and the verbs (``main``), one module
per verb group, and how a failure is reported and becomes an exit code
(``errors``)."""
