"""Sans-I/O protocol layer: framing, codecs and the session machine. No sockets, no clock."""
