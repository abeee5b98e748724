"""Concurrent /metrics scrapes from a separate process (so the client does not share the
agent's interpreter): ``clients`` threads, ``rounds`` scrapes each, like Prometheus
(OpenMetrics + gzip); then two plain-text scrapes one at a time (a 240 MB plain body
would otherwise hold up the gzip scrapes behind it). Prints JSON latencies in seconds."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request


def one(port: int, prometheus_like: bool) -> tuple[float, int]:
    headers = {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"} if prometheus_like else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        n = len(r.read())
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
