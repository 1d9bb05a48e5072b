"""``python -m conveyor_server_min``: the bare reference server (``conveyor server`` adds the dashboard)."""

from __future__ import annotations

from conveyor_server_min.command import main

if __name__ == "__main__":
    main()
