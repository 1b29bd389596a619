#!/usr/bin/env python3
"""The tables of bench/callgrind/gnutella.sh, from its callgrind dumps.

Usage: gnutella_table.py OUT WORK N1 N2 TOP ROUTER...
Reads OUT/callgrind.out.ROUTER.{n1,n2,idle} (written with --compress-strings=no
--compress-pos=no) and WORK/ROUTER.feed (the feeder's phase lines) and prints:
instructions per routed message (raw, controller, idle timers, net), the ratio
staged/plain, the self cost per routed message by function group and of the top
functions (N2 dump minus N1 dump, divided by N2 - N1), and the inclusive cost of
the entry points.
"""

import re
import sys
from collections import defaultdict

# Function groups, by the leading path of the (demangled) name: the implementing
# type for `<T as Trait>::f`. First match wins.
GROUPS = [
    ("gnutella framing (proto::framing)", r"^seda_gnutella::proto::framing"),
    ("gnutella header/payload rules (proto::message)", r"^seda_gnutella::proto::"),
    ("routing decisions + tables (routing::)", r"^seda_gnutella::routing"),
    ("server stage (server::)", r"^seda_gnutella::server"),
    ("router stage (router::, outq)", r"^seda_gnutella::(router|outq)"),
    ("gnutella counters (stats::)", r"^seda_gnutella::stats"),
    ("gnutella other", r"^seda_gnutella::"),
    ("plain loop (run_plain, route_chunk, pong)", r"^seda_experiments::gnutella::plain"),
    ("seda runtime: controller thread", r"^seda::(runtime::drive|control|stats::window)"),
    ("seda runtime (queues, batches, stats, workers)", r"^seda::"),
    ("seda-io (event loops, Writer, writev)", r"^seda_io::"),
    ("mio", r"^mio::"),
    ("bytes", r"^bytes::"),
    ("crossbeam", r"^crossbeam"),
    ("locks (parking_lot, futex)", r"^(parking_lot|lock_api|std::sys::sync|pthread_mutex|__lll|futex)"),
    ("hashing + hash maps", r"^(hashbrown|core::hash|std::hash|<std::hash|std::collections::hash)"),
    ("allocator (malloc/free/realloc, Vec growth)",
     r"^(malloc|free|realloc|calloc|cfree|_int_malloc|_int_free|_int_realloc|malloc_consolidate|"
     r"__libc_(malloc|free|realloc|calloc)|tcache|__rust_(alloc|dealloc|realloc)|__rdl_|"
     r"alloc::alloc|alloc::raw_vec|unlink_chunk|sysmalloc|arena_get|_int_memalign)"),
    ("memcpy/memmove/memset/memcmp", r"^(__)?(mem(cpy|move|set|cmp)|bcmp|__memcpy|__memmove|__memset|__memcmp)"),
    ("clock (clock_gettime)", r"(clock_gettime|__vdso|Instant::now|Timespec)"),
    ("libc system call wrappers",
     r"^(__GI_|__libc_|read$|write$|writev$|readv$|recv|send|epoll_|syscall|__syscall|"
     r"__internal_syscall|io_uring|__io_uring|__sys)"),
]
GROUP_RES = [(g, re.compile(p)) for g, p in GROUPS]
OTHER = "std/core/alloc (drop glue, iterators, formatting, ...)"


def lead(name):
    """The leading path of a demangled name: `<T as Tr>::f` -> `T...`."""
    n = name.strip()
    while n.startswith("<"):
        n = n[1:]
    return n


def group(name):
    n = lead(name)
    for g, r in GROUP_RES:
        if r.search(n):
            return g
    return OTHER


def parse(path):
    """Self and inclusive Ir per function, and the summary."""
    self_cost = defaultdict(int)
    incl = defaultdict(int)
    summary = 0
    fn = None
    skip_next = False
    callee = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if skip_next:
                skip_next = False
                parts = line.split()
                if len(parts) >= 2 and fn is not None and callee != fn:
                    incl[fn] += int(parts[1])
                continue
            c = line[0] if line else ""
            if c.isdigit() or c in "+-*":
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    v = int(parts[1])
                    self_cost[fn] += v
                    incl[fn] += v
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("cfn="):
                callee = line[4:].strip()
            elif line.startswith("calls="):
                skip_next = True
            elif line.startswith("summary:"):
                summary = int(line.split()[1])
    return self_cost, incl, summary


def feed_times(path):
    t = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"phase (\S+): (\d+) messages, (\d+) copies, ([0-9.]+) s", line)
            if m:
                t[m.group(1)] = (int(m.group(2)), int(m.group(3)), float(m.group(4)))
    return t


def controller(incl):
    return sum(v for k, v in incl.items() if k == "seda::runtime::drive")


def main():
    out, work, n1, n2, top = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    routers = sys.argv[6:]
    dn = n2 - n1
    res = {}
    print()
    print("%-7s %9s %8s %8s %9s %11s %9s %9s %8s %8s" % (
        "router", "Ir/msg", "ctl/msg", "idle/msg", "net/msg", "idle Ir/s", "copies/msg",
        "N1 s", "N2 s", "idle s"))
    for r in routers:
        s1, i1, a = parse("%s/callgrind.out.%s.n1" % (out, r))
        s2, i2, b = parse("%s/callgrind.out.%s.n2" % (out, r))
        si, ii, idle = parse("%s/callgrind.out.%s.idle" % (out, r))
        t = feed_times("%s/%s.feed" % (work, r))
        (m1, c1, t1), (m2, c2, t2), (_, _, ti) = t["n1"], t["n2"], t["idle"]
        if (m1, m2) != (n1, n2):
            sys.exit("the feeder sent %d and %d messages, not %d and %d" % (m1, m2, n1, n2))
        raw = (b - a) / dn
        ctl = (controller(i2) - controller(i1)) / dn
        idle_per_s = (idle - controller(ii)) / ti
        idl = idle_per_s * (t2 - t1) / dn
        net = raw - ctl - idl
        res[r] = dict(raw=raw, net=net, s1=s1, s2=s2, i1=i1, i2=i2)
        print("%-7s %9.0f %8.0f %8.0f %9.0f %11.0f %9.2f %9.1f %8.1f %8.1f" % (
            r, raw, ctl, idl, net, idle_per_s, (c2 - c1) / dn, t1, t2, ti))
    if "staged" in res and "plain" in res:
        print("%-7s %9.2fx %37.2fx" % ("ratio", res["staged"]["raw"] / res["plain"]["raw"],
                                         res["staged"]["net"] / res["plain"]["net"]))
    # By group (self cost, N2 - N1, per routed message).
    per = {}
    for r, d in res.items():
        g = defaultdict(float)
        f = defaultdict(float)
        for k in set(d["s1"]) | set(d["s2"]):
            v = (d["s2"].get(k, 0) - d["s1"].get(k, 0)) / dn
            g[group(k)] += v
            f[k] += v
        per[r] = (g, f)
    print()
    print("self cost per routed message by function group (N2 dump minus N1 dump)")
    groups = [g for g, _ in GROUPS] + [OTHER]
    hdr = "%-52s" % "group" + "".join("%10s" % r for r in res)
    if len(res) == 2:
        hdr += "%10s" % "diff"
    print(hdr)
    tot = defaultdict(float)
    for g in groups:
        vals = [per[r][0].get(g, 0.0) for r in res]
        if all(abs(v) < 0.5 for v in vals):
            continue
        line = "%-52s" % g + "".join("%10.0f" % v for v in vals)
        if len(vals) == 2:
            line += "%+10.0f" % (vals[0] - vals[1])
        print(line)
        for r, v in zip(res, vals):
            tot[r] += v
    line = "%-52s" % "total" + "".join("%10.0f" % tot[r] for r in res)
    if len(res) == 2:
        rs = list(res)
        line += "%+10.0f" % (tot[rs[0]] - tot[rs[1]])
    print(line)
    for r in res:
        print()
        print("top %d functions of %s, self instructions per routed message" % (top, r))
        g, f = per[r]
        for k, v in sorted(f.items(), key=lambda kv: -kv[1])[:top]:
            print("%10.1f  %s  [%s]" % (v, k[:150], group(k).split(" (")[0]))
    print()
    print("inclusive instructions per routed message of the entry points")
    pats = [
        ("server: socket events (Server::handle_events)", r"seda_gnutella::server::Server as seda::.*handle_events"),
        ("server: framing a read (Server::frame)", r"^seda_gnutella::server::Server::frame$"),
        ("router: a batch (Router::handle_events)", r"seda_gnutella::router::Router as seda::.*handle_events"),
        ("router: routing a read (Router::route)", r"^seda_gnutella::router::Router::route$"),
        ("router: flush to the peers (Router::flush)", r"^seda_gnutella::router::Router::flush$"),
        ("routing tables (Routes::route_many)", r"^seda_gnutella::routing::Routes::route_many$"),
        ("plain: route_chunk", r"^seda_experiments::gnutella::plain::route_chunk$"),
        ("plain: the whole loop (run_plain)", r"^seda_experiments::gnutella::plain::run_plain$"),
        ("framing (Framer::feed*)", r"^seda_gnutella::proto::framing::Framer::feed"),
    ]
    for label, p in pats:
        rx = re.compile(p)
        vals = []
        for r, d in res.items():
            v = sum(d["i2"].get(k, 0) - d["i1"].get(k, 0) for k in set(d["i1"]) | set(d["i2"]) if rx.search(k))
            vals.append(v / dn)
        if all(abs(v) < 0.5 for v in vals):
            continue
        print("%-52s" % label + "".join("%10.0f" % v for v in vals))


if __name__ == "__main__":
    main()
