#!/usr/bin/env python3
"""An ultrapeer neighbour for the leaf interop run (docs/gnutella/interop.md).

Connects to the router as an ultrapeer (its own codec, nothing shared with the
router), sends each query given (flags mark 0x8000 set, TTL 3, 1 s apart), waits for
query hits, and prints per query whether a hit came back and from which servent.
Then sends a push for the first hit's servent id (the router routes it to the leaf
that answered). Usage: queries.py ROUTER_PORT "words" ["words" ...]
"""
import sys, time

from peer import connect, messages, msg, new_guid, push, query

port, queries = int(sys.argv[1]), sys.argv[2:]
s = connect(port, b"interop-queries/1")

sent = {}
for words in queries:
    g = new_guid()
    sent[g] = words
    s.sendall(msg(g, 0x80, 3, 0, query(words)))
    print(f"sent query {words!r} guid={g.hex()} ttl=3")
    time.sleep(1)

hits, servent = {}, None
deadline = time.time() + 15
for g, kind, ttl, hops, p in messages(s, lambda: deadline):
    if kind == 0x81 and g in sent:
        names = [x.split(b"\x1c")[0].decode(errors="replace") for x in p[11:-16].split(b"\0")
                 if len(x) > 8]
        hits.setdefault(sent[g], []).append((p[0], p[-16:].hex(), names[:2], ttl, hops))
        servent = servent or p[-16:]
for words in queries:
    got = hits.get(words)
    if got:
        for n, sid, names, ttl, hops in got:
            print(f"query {words!r}: QUERY HIT ttl={ttl} hops={hops}, {n} result(s), "
                  f"servent={sid} names~{names}")
    else:
        print(f"query {words!r}: no hit")
if servent:
    s.sendall(msg(new_guid(), 0x40, 3, 0, push(servent)))
    print("sent push for servent", servent.hex())
    time.sleep(2)
s.close()
