"""The ultrapeer neighbour that inject.py and queries.py play in the interop runs
(docs/gnutella/interop.md): the Gnutella 0.6 handshake, message framing and GUIDs.
Its codec is its own (no code shared with the router)."""
import os, socket, struct, time


def connect(port, agent):
    """Connects to the router on loopback as an ultrapeer; prints its answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GNUTELLA CONNECT/0.6\r\nUser-Agent: " + agent + b"\r\n"
              b"X-Ultrapeer: True\r\nVendor-Message: 0.2\r\n\r\n")
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += s.recv(1)
    print("router answered:", head.split(b"\r\n")[0].decode())
    s.sendall(b"GNUTELLA/0.6 200 OK\r\n\r\n")
    return s


def msg(guid, kind, ttl, hops, payload):
    return guid + bytes([kind, ttl, hops]) + struct.pack("<I", len(payload)) + payload


def new_guid():
    """A new servent GUID (byte 8 0xFF, byte 15 0: a modern servent's mark)."""
    g = bytearray(os.urandom(16))
    g[8], g[15] = 0xFF, 0
    return bytes(g)


def query(words):
    """A query payload: flags mark 0x8000 set, the words, NUL."""
    return struct.pack(">H", 0x8000) + words.encode() + b"\0"


def push(servent):
    """A push payload for `servent` (file index 1, to 10.0.0.9:6346)."""
    return servent + struct.pack("<I", 1) + bytes([10, 0, 0, 9]) + struct.pack("<H", 6346)


def messages(s, deadline):
    """Yields (guid, kind, ttl, hops, payload) for each message the router sends
    until `deadline()` (a time.time() instant, read anew after each message) or the
    router closes."""
    buf = b""
    s.settimeout(1)
    while time.time() < deadline():
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
            yield g, kind, ttl, hops, p
