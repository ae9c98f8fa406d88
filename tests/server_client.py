"""A client of `annodb serve` for the tests: one loopback connection speaking the server's
newline-delimited JSON (what the server tests, the notes and judgments tests and the
reliability tests all talk through). The `serve` and `connect` fixtures in conftest.py
start servers and clients that end with the test."""

from __future__ import annotations

import json
import socket


class Client:
    """One connection to a server on 127.0.0.1."""

    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def send(self, line: bytes) -> None:
        """Send one raw line (its reply is read by `read`)."""
        self.sock.sendall(line + b"\n")

    def read(self) -> dict:
        """The next reply record: {"query", "response", "time"}."""
        line = self.reader.readline()
        assert line.endswith(b"\n"), f"no reply line: {line!r}"
        return json.loads(line)

    def send_line(self, line: bytes) -> dict:
        """One raw line, and its whole reply record."""
        self.send(line)
        return self.read()

    def ask(self, request: dict) -> dict:
        """One request, and its whole reply record."""
        return self.send_line(json.dumps(request).encode())

    def __call__(self, **request) -> dict:
        """One request, and its reply's response object (the record's shape checked)."""
        record = self.ask(request)
        assert set(record) == {"query", "response", "time"}
        assert isinstance(record["time"], (int, float)) and record["time"] >= 0
        return record["response"]

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
