"""The backend of `seda experiment proxy` (issue 26): one CPU-bound endpoint behind
gunicorn's sync workers, so that a worker serves one request at a time and the
backend's capacity is workers / cost.

GET /work?ms=N[&dist=fixed|exp|bimodal]  burns about N ms of CPU (per request:
    fixed N; exponential with mean N; bimodal: 95 % take N, 5 % take 40 N) and
    answers 200 with the time it burned;
GET /health                               answers 200 at once.

The burn is a calibrated loop of hashing (calibrated once per worker at import), not
sleep: a slow request holds a CPU as a real one does. Standard library only.
"""

import hashlib
import os
import random
import time

_BLOCK = b"x" * 4096


def _spin(n):
    h = hashlib.sha256()
    for _ in range(n):
        h.update(_BLOCK)
    return h.digest()


def _calibrate():
    n = 200
    while True:
        t0 = time.perf_counter()
        _spin(n)
        dt = time.perf_counter() - t0
        if dt > 0.05:
            return n / (dt * 1000.0)  # iterations per millisecond
        n *= 2


ITER_PER_MS = float(os.environ.get("PROXY_APP_ITER_PER_MS", "0")) or _calibrate()


def _cost(ms, dist, rng):
    if dist == "exp":
        return rng.expovariate(1.0 / ms)
    if dist == "bimodal":
        return ms * 40.0 if rng.random() < 0.05 else ms
    return ms


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/health":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
        return [b"ok\n"]
    if path != "/work":
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"not found\n"]
    query = dict(
        kv.split("=", 1) for kv in environ.get("QUERY_STRING", "").split("&") if "=" in kv
    )
    try:
        ms = float(query.get("ms", "10"))
    except ValueError:
        ms = -1.0
    dist = query.get("dist", "fixed")
    if not (0.0 <= ms <= 10000.0) or dist not in ("fixed", "exp", "bimodal"):
        body = b"ms must be 0..10000 and dist fixed, exp or bimodal\n"
        start_response("400 Bad Request", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    cost = _cost(ms, dist, random)
    t0 = time.perf_counter()
    _spin(int(cost * ITER_PER_MS))
    took = (time.perf_counter() - t0) * 1000.0
    body = ("burned %.2f ms\n" % took).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
