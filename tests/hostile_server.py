"""A hostile OpenAI-compatible endpoint on 127.0.0.1 for the controller's transport tests and
scripts/dev/hostile_openai.py: it answers slowly, hugely, with redirects, with echoed headers or
with rate limits. Loopback only; every loop is bounded and stops when the server is closed.

    with HostileServer("slowloris") as srv:
        load_backend("openai", "m", base_url=srv.url, ...).chat(["hi"])

Modes: "ok" (a normal completion), "slowloris" (the status line, then one byte every
`drip_s` seconds), "huge" (a 200 whose body is `size` bytes of one JSON string; `send_length=False` sends no
Content-Length), "redirect" (302 to the `target` server), "echo500" (500 whose body repeats the request's headers),
"ratelimit" (429 with Retry-After `retry_after` for the first `limit_n` requests, then "ok").
"""
from __future__ import annotations

import json
import socket
import socketserver
import threading
import time


def completion(text: str) -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}]}).encode()


class HostileServer:
    """One hostile endpoint; `requests` records each request's headers (lower-cased names)."""

    def __init__(self, mode: str = "ok", *, drip_s: float = 0.5, size: int = 100 << 20, target: "HostileServer | None" = None,
                 retry_after: str = "1", limit_n: int = 1, answer: str = "ok", max_seconds: float = 120.0,
                 send_length: bool = True):
        self.mode, self.drip_s, self.size, self.target = mode, drip_s, size, target
        self.retry_after, self.limit_n, self.answer, self.max_seconds = retry_after, limit_n, answer, max_seconds
        self.send_length = send_length
        self.requests: list[dict] = []
        self._closing = threading.Event()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                try:
                    server._serve(self.request)
                except OSError:
                    pass   # the client went away

        class TCP(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.tcp = TCP(("127.0.0.1", 0), Handler)
        self.port = self.tcp.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.tcp.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    # -- one connection ----------------------------------------------------------------
    def _read_request(self, sock: socket.socket) -> dict:
        sock.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 20:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        need = int(headers.get("content-length", 0) or 0)
        while len(body) < need:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        req = {"line": lines[0] if lines else "", "headers": headers, "head": head.decode("latin-1")}
        self.requests.append(req)
        return req

    def _send(self, sock: socket.socket, status: str, body: bytes, extra: str = "") -> None:
        sock.sendall((f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                      f"Connection: close\r\n{extra}\r\n").encode() + body)

    def _serve(self, sock: socket.socket) -> None:
        req = self._read_request(sock)
        mode = self.mode
        if mode == "ratelimit":
            if len(self.requests) <= self.limit_n:
                self._send(sock, "429 Too Many Requests", b'{"error": "slow down"}', f"Retry-After: {self.retry_after}\r\n")
                return
            mode = "ok"
        if mode == "ok":
            self._send(sock, "200 OK", completion(self.answer))
        elif mode == "echo500":
            self._send(sock, "500 Internal Server Error", ("proxy error; your request was:\n" + req["head"]).encode())
        elif mode == "redirect":
            location = self.target.url + "/chat/completions"
            self._send(sock, "302 Found", b"", f"Location: {location}\r\n")
        elif mode == "slowloris":
            start = time.monotonic()
            sock.sendall(b"HTTP/1.1 200 OK\r\n")
            payload = b"X-Drip: " + b"a" * 100_000
            for i in range(len(payload)):          # bounded: one byte per drip, for max_seconds at most
                if self._closing.is_set() or time.monotonic() - start > self.max_seconds:
                    return
                sock.sendall(payload[i:i + 1])
                time.sleep(self.drip_s)
        elif mode == "huge":
            prefix = b'{"choices": [{"message": {"content": "'
            suffix = b'"}}]}'
            total = len(prefix) + self.size + len(suffix)
            length = f"Content-Length: {total}\r\n" if self.send_length else ""   # else: read to the end
            sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}"
                         f"Connection: close\r\n\r\n".encode() + prefix)
            chunk = b"a" * (1 << 16)
            sent = 0
            while sent < self.size and not self._closing.is_set():
                n = min(len(chunk), self.size - sent)
                sock.sendall(chunk[:n])
                sent += n
            sock.sendall(suffix)
        else:
            raise ValueError(f"unknown mode {mode!r}")

    def close(self) -> None:
        self._closing.set()
        self.tcp.shutdown()
        self.tcp.server_close()

    def __enter__(self) -> "HostileServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
