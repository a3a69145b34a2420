"""A real aiohttp server on a free loopback port for the route tests, with raw HTTP requests:
written byte for byte on a socket, so no client library normalises `..` or percent-escapes
before the server sees them (tests/test_web_routes.py, tests/test_hostile_chat.py)."""
from __future__ import annotations

import asyncio
import threading


class Server:
    """aiohttp app on a free loopback port, run in a background thread; raw HTTP requests."""

    def __init__(self, table):
        from aiohttp import web
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.add_routes(table)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def request(self, method: str, target: str, body: bytes = b"",
                content_type: str | None = "application/json") -> tuple[int, dict, bytes]:
        async def go():
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            if body or method == "POST":
                if content_type:
                    head += f"Content-Type: {content_type}\r\n"
                head += f"Content-Length: {len(body)}\r\n"
            writer.write(head.encode("latin-1") + b"\r\n" + body)
            await writer.drain()
            raw = await reader.read()
            writer.close()
            return raw
        raw = asyncio.run_coroutine_threadsafe(go(), self.loop).result(timeout=30)
        head, _, payload = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
        if headers.get("transfer-encoding") == "chunked":
            payload = _dechunk(payload)
        return status, headers, payload

    def get(self, target: str):
        return self.request("GET", target)

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, rest = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        data = rest[n + 2:]
    return out
