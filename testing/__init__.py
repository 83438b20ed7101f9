"""The test kit, a layer above the product: the conformance kit's crash
scenarios every transactional sink must pass (``eoskit.testing.conformance``)
and the pytest plugin with the local services as fixtures
(``eoskit.testing.pytest_plugin``, loaded with ``-p eoskit.testing.pytest_plugin``).

Nothing in ``eoskit.connectors``, ``eoskit.twophase`` or ``eoskit.runtime``
imports it (``tests/test_layers.py``).
"""
