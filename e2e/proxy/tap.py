#!/usr/bin/env python3
"""A transparent TCP relay between the client and the proxy that keeps, per connection, the
bytes each side sent and how the proxy's side ended: the ground truth of what the client
really received (did the cut happen, where, and how), independent of the proxy's own report.

  tap.py --upstream-port PORT --port-file FILE --dump DIR

A reset from the proxy is passed on as a reset (SO_LINGER 0), a clean close as a clean
close, so the client sees what it would see without the tap. Files in DIR, for connection N
(in accept order): `N.s2c` (proxy -> client bytes), `N.c2s` (client -> proxy), `N.json`
(`{"end": "reset"|"eof"|"client", "opened_ms", "closed_ms"}`). 127.0.0.1 only; standard
library only.
"""

import argparse
import asyncio
import json
import os
import socket
import struct
import sys
import time


class Conn:
    def __init__(self, n, dump):
        self.n, self.dump = n, dump
        self.s2c = open(os.path.join(dump, f"{n:03d}.s2c"), "wb")
        self.c2s = open(os.path.join(dump, f"{n:03d}.c2s"), "wb")
        self.opened = int(time.time() * 1000)
        self.end = None

    def finish(self):
        self.s2c.close()
        self.c2s.close()
        with open(os.path.join(self.dump, f"{self.n:03d}.json"), "w") as f:
            json.dump({"end": self.end or "client", "opened_ms": self.opened,
                       "closed_ms": int(time.time() * 1000)}, f)


def reset(writer):
    sock = writer.get_extra_info("socket")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


async def handle(creader, cwriter, state):
    state["n"] += 1
    conn = Conn(state["n"], state["dump"])
    try:
        preader, pwriter = await asyncio.open_connection("127.0.0.1", state["upstream"])
    except OSError:
        conn.end = "connect_failed"
        reset(cwriter)
        conn.finish()
        return

    async def c2p():
        try:
            while True:
                data = await creader.read(65536)
                if not data:
                    break
                conn.c2s.write(data)
                conn.c2s.flush()
                pwriter.write(data)
                await pwriter.drain()
            if pwriter.can_write_eof():
                pwriter.write_eof()
        except (ConnectionError, OSError):
            pwriter.transport.abort()

    async def p2c():
        try:
            while True:
                data = await preader.read(65536)
                if not data:
                    conn.end = conn.end or "eof"
                    cwriter.close()
                    return
                conn.s2c.write(data)
                conn.s2c.flush()
                cwriter.write(data)
                await cwriter.drain()
        except ConnectionResetError:
            conn.end = "reset"
            reset(cwriter)
        except (ConnectionError, OSError):
            conn.end = conn.end or "client"
            pwriter.transport.abort()

    up = asyncio.ensure_future(c2p())
    await p2c()
    up.cancel()
    conn.finish()


async def serve(a):
    state = {"n": 0, "dump": a.dump, "upstream": a.upstream_port}
    srv = await asyncio.start_server(lambda r, w: handle(r, w, state), "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, a.port_file)
    async with srv:
        await srv.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--dump", required=True)
    a = ap.parse_args()
    os.makedirs(a.dump, exist_ok=True)
    try:
        asyncio.run(serve(a))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
