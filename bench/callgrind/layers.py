#!/usr/bin/env python3
"""Haboob's user-space instructions per request by layer, from two callgrind dumps.

Usage: bench/callgrind/layers.py N1_FILE N2_FILE REQUESTS

N1_FILE and N2_FILE are the `callgrind.out.seda.n1` and `.n2` dumps that
`KEEP=DIR bench/callgrind/haboob.sh seda` leaves in DIR; REQUESTS is N2 - N1 (the
script's default 5000 - 1000, or 11000 - 1000 with N2=11000). Each function's own
instructions (self cost) in the N2 phase minus the N1 phase, divided by REQUESTS,
go to a layer chosen by the function's name (the type of `<T as Trait>::f`). A
shared helper that names no layer (the allocator, memcpy, `std`'s clock and
thread-local access, `bytes`, `core`, system-call stubs, and seda's stats code, which
both the hops and the controller thread call) is charged to its callers'
layers in proportion to what each caller spent in it (followed up to four callers
deep). The controller thread (`seda::runtime::drive` and what it calls: stats
windows, controllers; callgrind runs it ~50x more often per request than real
time does) is reported on a line of its own and left out of the total, as
haboob.sh's `net` does.
"""
import collections
import re
import sys

SHARED = "shared"
CTL = "controller thread (left out)"
LAYERS = [
    # (layer, regex on the function's owning path), first match wins.
    (CTL, r"^seda::runtime::drive"),
    ("socket loop (seda-io)", r"^seda_io::socket::(epoll|uring|book|inbox|slab|shared|event)"),
    ("write (seda-io)", r"^seda_io::(socket::(writer|conn::Out)|link)"),
    ("socket loop (seda-io)", r"^seda_io::"),
    # Stats code is called by both the hops and the controller thread: shared.
    (SHARED, r"^(seda::stats::|hdrhistogram::)"),
    ("runtime: hops, counts, samples (seda)", r"^seda::"),
    ("parse (HttpParse)", r"^(seda_http::proto::(request|path|head|chunked)|seda_http::server::(parse|conn::RecvState)|httparse::|arc_swap::)"),
    ("route (HttpRecv)", r"^seda_http::server::(recv|routes)"),
    ("cache lookup (PageCache)", r"^(seda_http::cache|seda_http::server::(page_cache|lookup|request)|hashbrown::|lru::)"),
    ("respond: head, date (HttpSend)", r"^(seda_http::server::(answer|send|state|conn)|seda_http::proto::date)"),
    ("other seda-http", r"^seda_http::"),
]
def owner(name):
    """The path a function belongs to: `T` for `<T as Trait>::f`, else the name."""
    m = re.match(r"^<([^ ]+) as ", name)
    return m.group(1) if m else name


def ctl_share(name, callers_of, memo, depth=0):
    """The part of `name`'s instructions spent for the controller thread: 1 for its
    root, else the callers' shares weighed by what each spent in it."""
    if re.match(LAYERS[0][1], owner(name)):
        return 1.0
    if name in memo:
        return memo[name]
    callers = callers_of.get(name, {})
    total = sum(callers.values())
    if total <= 0 or depth >= 8:
        return 0.0
    memo[name] = 0.0  # cycles (recursion) count as not the controller's
    share = sum(
        ctl_share(c, callers_of, memo, depth + 1) * cost for c, cost in callers.items()
    ) / total
    memo[name] = share
    return share


def layer_of(name, callers_of, memo, depth=0):
    path = owner(name)
    for layer, rx in LAYERS:
        if re.match(rx, path):
            if layer == SHARED:
                break
            if layer == CTL:
                return {CTL: 1.0}
            c = ctl_share(name, callers_of, memo)
            return {CTL: c, layer: 1.0 - c}
    if depth >= 4:
        return {"unattributed": 1.0}
    # A shared helper: split by what each caller spent in it.
    callers = callers_of.get(name, {})
    total = sum(callers.values())
    if total <= 0:
        return {"unattributed": 1.0}
    out = collections.Counter()
    for caller, cost in callers.items():
        for layer, share in layer_of(caller, callers_of, memo, depth + 1).items():
            out[layer] += share * cost / total
    return out


def load(path):
    names = {}

    def resolve(v):
        m = re.match(r"\((\d+)\)(?: (.*))?", v)
        if not m:
            return v
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    self_cost = collections.Counter()
    callers_of = collections.defaultdict(collections.Counter)
    fn = cfn = None
    pending = False
    with open(path) as f:
        for line in f:
            if line.startswith("fn="):
                fn = resolve(line[3:].strip())
                continue
            if line.startswith("cfn="):
                cfn = resolve(line[4:].strip())
                continue
            if line.startswith("calls="):
                pending = True
                continue
            if line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) < 2:
                    continue
                if pending:
                    callers_of[cfn][fn] += int(parts[1])
                    pending = False
                else:
                    self_cost[fn] += int(parts[1])
    return self_cost, callers_of


def main():
    usage = __doc__.strip().splitlines()[2]
    if len(sys.argv) != 4:
        print(usage, file=sys.stderr)
        sys.exit(2)
    try:
        n = float(sys.argv[3])
    except ValueError:
        n = 0.0
    if not n > 0:
        print(f"layers.py: REQUESTS must be a positive number, not {sys.argv[3]!r}\n{usage}", file=sys.stderr)
        sys.exit(2)
    try:
        (s1, _), (s2, callers) = load(sys.argv[1]), load(sys.argv[2])
    except OSError as e:
        print(f"layers.py: cannot read a callgrind dump: {e}", file=sys.stderr)
        sys.exit(2)
    per_layer = collections.Counter()
    memo = {}
    for name in set(s1) | set(s2):
        d = (s2.get(name, 0) - s1.get(name, 0)) / n
        if d == 0:
            continue
        for layer, share in layer_of(name, callers, memo).items():
            per_layer[layer] += d * share
    ctl = per_layer.pop(CTL, 0.0)
    total = sum(per_layer.values())
    print(f"{'layer':<40} {'Ir/req':>8} {'share':>6}")
    for layer, v in sorted(per_layer.items(), key=lambda kv: -kv[1]):
        print(f"{layer:<40} {v:8.0f} {100 * v / total:5.0f}%")
    print(f"{'total (controller thread left out)':<40} {total:8.0f}")
    print(f"{'controller thread (left out)':<40} {ctl:8.0f}")


if __name__ == "__main__":
    main()
