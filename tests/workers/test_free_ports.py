"""Ports chosen for a stack's servers are distinct: a Ray head given the same port for its GCS
and its dashboard exits at start, and its supervisor restarts it into the same clash (seen in
CI: 15 restarts in 4 minutes, the test stack never up)."""

from __future__ import annotations

import socket

from workers.services import free_port, free_ports


def test_free_ports_are_distinct_and_each_can_be_bound_after():
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # raises if one were still held


def test_one_free_port_is_a_port():
    assert 0 < free_port() < 65536
