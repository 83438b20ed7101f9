"""The pure parts of ``eoskit chaos JOB.py`` (issue 24): the seeded fault
plan (:mod:`.plan`), the multiset comparison of a reference run's output
with a chaos run's (:mod:`.compare`), and the report (:mod:`.report`).

Nothing here starts Spark or a service: the command that runs the job and
injects the faults builds on these, and each is tested on its own.
"""

from __future__ import annotations
