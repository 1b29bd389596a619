#!/usr/bin/env python3
"""A third Gnutella 0.6 peer for the interop run (docs/gnutella/interop.md).

Connects to the router as an ultrapeer, sends a query (flags mark 0x8000 set, TTL 3),
prints every query hit that comes back (routed by the router from a gtk-gnutella
node that shares a matching file), then sends a push for the hit's servent id and
checks that the router forwards it. Its codec is its own (no code shared with the
router). Usage: inject.py ROUTER_PORT "search words"
"""
import struct, sys, time

from peer import connect, messages, msg, new_guid, push, query

port, words = int(sys.argv[1]), sys.argv[2]
s = connect(port, b"interop-inject/1")

guid = new_guid()
s.sendall(msg(guid, 0x80, 3, 0, query(words)))
print(f"sent query {words!r} guid={guid.hex()} ttl=3")

deadline, servent = time.time() + 20, None
for g, kind, ttl, hops, p in messages(s, lambda: deadline):
    if kind == 0x81 and g == guid:
        hits, hport = p[0], struct.unpack("<H", p[1:3])[0]
        ip = ".".join(str(b) for b in p[3:7])
        servent = p[-16:]
        names = [x.decode(errors="replace") for x in p[11:-16].split(b"\0") if len(x) > 8]
        print(f"QUERY HIT ttl={ttl} hops={hops}: {hits} result(s) from {ip}:{hport} "
              f"servent={servent.hex()} names~{names[:2]}")
        deadline = min(deadline, time.time() + 2)
    elif kind == 0x40:
        print(f"push received ttl={ttl} hops={hops}")
    else:
        print(f"message type 0x{kind:02x} ttl={ttl} hops={hops} len={len(p)}")
if servent:
    s.sendall(msg(new_guid(), 0x40, 3, 0, push(servent)))
    print("sent push for servent", servent.hex())
    time.sleep(2)
else:
    print("no query hit came back")
s.close()
