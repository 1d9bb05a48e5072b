"""``python -m conveyor_server_min``: the reference server (same options as ``conveyor server``)."""

from __future__ import annotations

from conveyor_cli.server_cmd import main

if __name__ == "__main__":
    main()
