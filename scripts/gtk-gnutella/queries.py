#!/usr/bin/env python3
"""An ultrapeer neighbour for the leaf interop run (docs/gnutella/interop.md).

Connects to the router as an ultrapeer (its own codec, nothing shared with the
router), sends each query given (flags mark 0x8000 set, TTL 3, 1 s apart), waits for
query hits, and prints per query whether a hit came back and from which servent.
Then sends a push for the first hit's servent id (the router routes it to the leaf
that answered). Usage: queries.py ROUTER_PORT "words" ["words" ...]
"""
import os, socket, struct, sys, time

port, queries = int(sys.argv[1]), sys.argv[2:]
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GNUTELLA CONNECT/0.6\r\nUser-Agent: interop-queries/1\r\n"
          b"X-Ultrapeer: True\r\nVendor-Message: 0.2\r\n\r\n")
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += s.recv(1)
print("router answered:", head.split(b"\r\n")[0].decode())
s.sendall(b"GNUTELLA/0.6 200 OK\r\n\r\n")


def msg(guid, kind, ttl, hops, payload):
    return guid + bytes([kind, ttl, hops]) + struct.pack("<I", len(payload)) + payload


def new_guid():
    g = bytearray(os.urandom(16))
    g[8], g[15] = 0xFF, 0
    return bytes(g)


sent = {}
for words in queries:
    g = new_guid()
    sent[g] = words
    s.sendall(msg(g, 0x80, 3, 0, struct.pack(">H", 0x8000) + words.encode() + b"\0"))
    print(f"sent query {words!r} guid={g.hex()} ttl=3")
    time.sleep(1)

hits, servent = {}, None
buf, deadline = b"", time.time() + 15
s.settimeout(1)
while time.time() < deadline:
    try:
        data = s.recv(65536)
    except socket.timeout:
        continue
    if not data:
        break
    buf += data
    while len(buf) >= 23:
        n = struct.unpack("<I", buf[19:23])[0]
        if len(buf) < 23 + n:
            break
        g, kind, ttl, hops, p = buf[:16], buf[16], buf[17], buf[18], buf[23:23 + n]
        buf = buf[23 + n:]
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
    push = servent + struct.pack("<I", 1) + bytes([10, 0, 0, 9]) + struct.pack("<H", 6346)
    s.sendall(msg(new_guid(), 0x40, 3, 0, push))
    print("sent push for servent", servent.hex())
    time.sleep(2)
s.close()
