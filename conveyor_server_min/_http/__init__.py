"""The reference server's transport: HTTP/2 (h2c, TLS) and HTTP/1.1 on one port; gRPC/Connect; auth."""
