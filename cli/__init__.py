"""The ``conveyor`` command (installed as the ``conveyor_cli`` package)."""
