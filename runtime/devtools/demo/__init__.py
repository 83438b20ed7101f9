"""``eoskit demo``: the README's end-to-end demo, on local services."""
