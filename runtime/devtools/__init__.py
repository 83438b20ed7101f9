"""For developing with eoskit, not for running jobs: the local services
(``services``: ``eoskit dev``), fault injection on a running job
(``chaos``: ``eoskit chaos``) and the demo (``demo``: ``eoskit demo``)."""
