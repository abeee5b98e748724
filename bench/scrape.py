"""Concurrent /metrics scrapes from a separate process (so the client does not share the
agent's interpreter): ``clients`` threads, ``rounds`` scrapes each, like Prometheus
(OpenMetrics + gzip); then two plain-text scrapes one at a time (a 240 MB plain body
would otherwise hold up the gzip scrapes behind it). Prints JSON latencies in seconds."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time


def one(port: int, prometheus_like: bool) -> tuple[float, int]:
    """One GET /metrics: seconds until the whole body is in, and its length.

    The client reads the body into a reused buffer and counts it, as ``curl -o /dev/null``
    does (and as Prometheus, in Go, reads without a Python object per response): what is timed
    is the agent serving the body. Python's urllib would add the building of one bytes object
    of the whole body (221 MB of plain text at 100,000 ports: 0.29-0.71 s with urllib against
    0.19-0.24 s this way, on the same body in one run)."""
    accept = (b"Accept: application/openmetrics-text;version=1.0.0\r\nAccept-Encoding: gzip\r\n" if prometheus_like
              else b"")
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + accept + b"\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            got = s.recv(65536)
            if not got:
                raise RuntimeError("connection closed before the response headers")
            head += got
        head, _, rest = head.partition(b"\r\n\r\n")
        status, *fields = head.decode("latin-1").split("\r\n")
        if " 200 " not in status + " ":
            raise RuntimeError(f"/metrics answered {status}")
        length = int(next(v for k, _, v in (f.partition(":") for f in fields) if k.lower() == "content-length"))
        n = len(rest)
        view = memoryview(bytearray(1 << 22))  # reused for every read of this body
        while n < length:
            k = s.recv_into(view)
            if not k:
                raise RuntimeError(f"body cut at {n} of {length} bytes")
            n += k
    return time.perf_counter() - t0, n


def main(argv: list[str]) -> None:
    port, clients, rounds = int(argv[0]), int(argv[1]), int(argv[2])
    one(port, True)  # warm: the gzip body is built lazily on the first scrape that accepts it
    one(port, False)
    lat: dict[str, list[float]] = {"gzip": [], "plain": []}
    sizes: dict[str, int] = {}
    lock = threading.Lock()

    def worker(i: int) -> None:
        for _ in range(rounds):
            dt, n = one(port, True)
            with lock:
                lat["gzip"].append(dt)
                sizes["gzip"] = n

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for _ in range(2):  # plain text (curl, a browser): one at a time, after the concurrent phase
        dt, n = one(port, False)
        lat["plain"].append(dt)
        sizes["plain"] = n
    out = {"clients": clients, "scrapes": clients * rounds, "wall_s": wall, "bytes": sizes}
    for kind, xs in lat.items():
        xs.sort()
        if xs:
            out[kind] = {"p50_s": xs[len(xs) // 2], "max_s": xs[-1]}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
