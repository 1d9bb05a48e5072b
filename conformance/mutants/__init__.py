"""Deliberately broken implementations that prove the suite can fail.

* :mod:`.raw_worker` — a compact worker written straight on the session
  transport that implements the environment contract; ``MUTATION`` breaks one
  rule at a time (``none`` is the faithful reference).
* :mod:`.server_mutant` — the reference server with one rule broken
  (``MUTATION`` = ``no-credits``, ``ignore-heartbeats``, ``ignore-progress`` or
  ``dispatch-before-welcome``).
"""
