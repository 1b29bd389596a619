#!/usr/bin/env python3
"""A third Gnutella 0.6 peer for the interop run (docs/gnutella/interop.md).

Connects to the router as an ultrapeer, sends a query (flags mark 0x8000 set, TTL 3),
prints every query hit that comes back (routed by the router from a gtk-gnutella
node that shares a matching file), then sends a push for the hit's servent id and
checks that the router forwards it. Its codec is its own (no code shared with the
router). Usage: inject.py ROUTER_PORT "search words"
"""
import os, socket, struct, sys, time

port, words = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GNUTELLA CONNECT/0.6\r\nUser-Agent: interop-inject/1\r\n"
          b"X-Ultrapeer: True\r\nVendor-Message: 0.2\r\n\r\n")
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += s.recv(1)
print("router answered:", head.split(b"\r\n")[0].decode())
s.sendall(b"GNUTELLA/0.6 200 OK\r\n\r\n")

def msg(guid, kind, ttl, hops, payload):
    return guid + bytes([kind, ttl, hops]) + struct.pack("<I", len(payload)) + payload

guid = bytearray(os.urandom(16)); guid[8] = 0xFF; guid[15] = 0; guid = bytes(guid)
query = struct.pack(">H", 0x8000) + words.encode() + b"\0"
s.sendall(msg(guid, 0x80, 3, 0, query))
print(f"sent query {words!r} guid={guid.hex()} ttl=3")

buf, deadline, servent = b"", time.time() + 20, None
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
            print(f"message type 0x{kind:02x} ttl={ttl} hops={hops} len={n}")
if servent:
    pg = bytearray(os.urandom(16)); pg[8] = 0xFF; pg[15] = 0
    push = servent + struct.pack("<I", 1) + bytes([10, 0, 0, 9]) + struct.pack("<H", 6346)
    s.sendall(msg(bytes(pg), 0x40, 3, 0, push))
    print("sent push for servent", servent.hex())
    time.sleep(2)
else:
    print("no query hit came back")
s.close()
