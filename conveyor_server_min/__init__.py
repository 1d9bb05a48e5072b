"""conveyor_server_min: the compact reference server for the conveyor.v1 protocol."""
