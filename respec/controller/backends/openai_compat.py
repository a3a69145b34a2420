"""A controller behind any OpenAI-compatible chat-completions endpoint (vLLM, Ollama,
LM Studio, llama.cpp server, hosted APIs).

Images go inline as base64 data URLs. The API key is read at call time from the environment
variable whose NAME the user gives, so the key itself never enters a workflow, a plan or a log.
Greedy decoding (temperature 0), a cap on new tokens, and retries with exponential backoff on
connection errors, timeouts, 408/429 and 5xx answers (Retry-After honoured up to
MAX_RETRY_AFTER_S); anything else fails at once with a ControllerError that says what the
server answered.

The transport assumes a hostile or broken server:
- each attempt has ONE deadline (`timeout`) for connecting, sending and reading the whole
  answer, however slowly the server drips it, and ComfyUI's Cancel stops it within ~0.1 s;
- the answer is read up to `max_response_bytes` (default 8 MiB) and refused beyond;
- redirects are never followed (the key would go with them), the error names the target;
- the key is redacted from every message, including a server's echo of the request headers.
"""
from __future__ import annotations

import base64
import email.utils
import http.client
import io
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass

from PIL import Image

from ... import comfy
from ...errors import ControllerError, InputError
from ...images import as_rgb, downscale_to_budget
from ..prompts import DEFAULT_MAX_PIXELS

RESPONSE_FORMATS = ("none", "json_object", "json_schema")
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_REDIRECT_STATUS = {301, 302, 303, 307, 308}
DEFAULT_MAX_RESPONSE_BYTES = 8 << 20
MAX_RETRY_AFTER_S = 60.0        # a longer Retry-After ends the call at once (rate limited)
REDACTED = "[redacted]"
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "hf_", "xai-", "pk-", "ghp_", "github_pat_", "glpat-", "r8_", "nvapi-",
                 "AIza", "ya29.", "Bearer ")
_BEARER = re.compile(r"(?i)(authorization\s*[:=]\s*[\"']?\s*bearer\s+)[^\s\"',;]+")


def looks_like_a_key(value: str) -> bool:
    """Whether a value given as a variable NAME looks like a secret itself: a known key prefix,
    characters no variable name has, or a long mixed-case/digit token."""
    if value.startswith(_KEY_PREFIXES) or not _VARIABLE_NAME.fullmatch(value):
        return True
    has = (any(c.islower() for c in value), any(c.isupper() for c in value), any(c.isdigit() for c in value))
    return len(value) >= 24 and sum(has) == 3


def redact(text: str, secret: str | None) -> str:
    """`text` without the secret (and without any "Authorization: Bearer ..." value)."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, REDACTED)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date), None if absent/unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None else None


class _Stop(Exception):
    """An attempt ended by the transport (deadline, size cap, redirect): `retry` says whether to retry."""

    def __init__(self, message: str, retry: bool):
        super().__init__(message)
        self.retry = retry


PIN_ENV = "RESPEC_OPENAI_BASE_URL"


def pinned_base_url(base_url: str) -> str:
    """The base URL to use: the workflow's, unless the server's owner pinned one in
    RESPEC_OPENAI_BASE_URL; then an empty value means the pinned URL and any other is refused
    (the endpoint receives the history images and the API key, so a workflow must not redirect it)."""
    pinned = os.environ.get(PIN_ENV, "").strip()
    given = (base_url or "").strip()
    if not pinned or not given or given.rstrip("/") == pinned.rstrip("/"):
        return pinned or given
    raise InputError(f"this server pins the controller's base URL ({PIN_ENV} is set); leave base_url empty "
                     "to use it, or ask the server's owner to change it")


def chat_completions_url(base_url: str) -> str:
    """`http://host:8000/v1` -> `http://host:8000/v1/chat/completions` (a full URL is kept)."""
    url = (base_url or "").strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InputError(f"the controller base URL {base_url!r} must start with http:// or https:// "
                         "(e.g. http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama)")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


def image_data_url(img: Image.Image, image_format: str = "png") -> str:
    """A PIL image as a data URL (PNG, lossless, or JPEG q=95)."""
    buf = io.BytesIO()
    fmt = image_format.lower()
    if fmt in ("jpg", "jpeg"):
        as_rgb(img).save(buf, format="JPEG", quality=95)
        mime = "image/jpeg"
    else:
        as_rgb(img).save(buf, format="PNG")
        mime = "image/png"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


@dataclass(frozen=True)
class OpenAISettings:
    """How the OpenAI-compatible controller talks to its server (load_backend's options for "openai";
    an unknown option is a TypeError)."""
    base_url: str = "http://127.0.0.1:8000/v1"   # RESPEC_OPENAI_BASE_URL, when set, pins it (pinned_base_url)
    api_key_env: str = ""              # the NAME of the environment variable holding the key ("" : no key)
    timeout: float = 120.0             # seconds per request
    retries: int = 2                   # retries of a failed request (with growing pauses)
    backoff: float = 1.0               # the first pause, seconds
    max_pixels: int = DEFAULT_MAX_PIXELS   # each image is scaled down to at most this many pixels
    max_new_tokens: int = 768
    response_format: str = "none"      # one of RESPONSE_FORMATS
    image_format: str = "png"          # png (lossless) | jpeg
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


class OpenAICompatBackend:
    """A VLMBackend that posts to `<base_url>/chat/completions`. Use load_backend("openai", ...)."""

    def __init__(self, *, model: str, settings: OpenAISettings = OpenAISettings()):
        if not model or not str(model).strip():
            raise InputError("the OpenAI-compatible controller needs the served model's name "
                             "(what the server lists at /v1/models)")
        self.model = str(model).strip()
        self.url = chat_completions_url(pinned_base_url(settings.base_url))
        self.api_key_env = (settings.api_key_env or "").strip()
        if self.api_key_env and looks_like_a_key(self.api_key_env):
            raise InputError("api_key_env must be the NAME of an environment variable (like OPENAI_API_KEY), "
                             "but the value given looks like an API key itself (not shown here). Put the key "
                             "in an environment variable before starting ComfyUI and give that variable's "
                             "name; if the key was saved in a workflow, revoke it.")
        self.timeout = float(settings.timeout)
        if self.timeout <= 0:
            raise InputError("timeout must be a positive number of seconds")
        self.retries = max(0, int(settings.retries))
        self.backoff = max(0.0, float(settings.backoff))
        self.max_pixels = int(settings.max_pixels) if settings.max_pixels else DEFAULT_MAX_PIXELS
        self.max_new_tokens = int(settings.max_new_tokens) if settings.max_new_tokens else 768
        if settings.response_format not in RESPONSE_FORMATS:
            raise InputError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}")
        self.response_format = settings.response_format
        self.image_format = settings.image_format
        self.max_response_bytes = int(settings.max_response_bytes)
        if self.max_response_bytes < 1024:
            raise InputError("max_response_bytes must be at least 1024")
        self.name = f"openai:{self.model}@{self.url}"
        self.requests = 0  # HTTP requests sent (tests and benchmarks read this)

    # -- request -----------------------------------------------------------------------
    def _key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = self._key()
            if not key:
                raise ControllerError(f"the environment variable {self.api_key_env} (named as the API key "
                                      f"source) is not set; set it before starting ComfyUI, or clear "
                                      f"api_key_env for a server that needs no key")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def build_body(self, parts: list, system: str | None, max_new_tokens: int, json_schema: dict | None) -> dict:
        """The chat-completions request body (system message, then one user message)."""
        content = []
        for p in parts:
            if isinstance(p, Image.Image):
                img = downscale_to_budget(as_rgb(p), self.max_pixels)
                content.append({"type": "image_url", "image_url": {"url": image_data_url(img, self.image_format)}})
            elif isinstance(p, str):
                content.append({"type": "text", "text": p})
            else:
                raise InputError(f"a controller message part must be text or a PIL image, got {type(p).__name__}")
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": content})
        body = {"model": self.model, "messages": messages, "max_tokens": int(max_new_tokens),
                "temperature": 0.0, "stream": False}
        if self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        elif self.response_format == "json_schema" and json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "respec_plan", "schema": json_schema}}
        return body

    @staticmethod
    def _content(payload: object, secret: str = "") -> str:
        try:
            message = payload["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ControllerError("the endpoint's answer is JSON but not a chat completion (no "
                                  "choices[0].message); check the base URL points at an OpenAI-compatible "
                                  f"/v1 API. Answer starts: {_excerpt(json.dumps(payload), secret)}") from None
        if content is None:
            state = "null" if "content" in message else "missing"
            raise ControllerError(f"the endpoint's answer has no text: choices[0].message.content is {state}. "
                                  "The model produced no answer (a reasoning model may put its text elsewhere, "
                                  "or the request was filtered); check the served model and raise max_new_tokens.")
        if isinstance(content, list):  # some servers answer with content parts
            return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        return str(content)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            comfy.check_interrupted()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.1, left))

    def chat(self, parts: list, *, system: str | None = None, max_new_tokens: int = 768,
             json_schema: dict | None = None) -> str:
        """POST one chat completion; returns the answer's text. Raises ControllerError (the API key
        redacted from its message)."""
        max_new_tokens = int(max_new_tokens or self.max_new_tokens)
        data = json.dumps(self.build_body(parts, system, max_new_tokens, json_schema)).encode("utf-8")
        headers = self._headers()
        try:
            return self._post(data, headers)
        except ControllerError as e:
            raise ControllerError(redact(str(e), self._key())) from None

    def _post(self, data: bytes, headers: dict) -> str:
        last_error, rate_limited, key = "", None, self._key()
        with comfy.progress(self.retries + 1, "controller (remote)") as bar:
            for attempt in range(self.retries + 1):
                comfy.check_interrupted()
                if attempt:
                    self._sleep(max(self.backoff * 2 ** (attempt - 1), rate_limited or 0.0))
                self.requests += 1
                rate_limited = None
                try:
                    status, reason, answer_headers, raw = self._exchange(data, headers)
                except _Stop as e:
                    if not e.retry:
                        raise ControllerError(f"the controller endpoint {self.url} {e}") from None
                    last_error = str(e)
                    bar.update(1)
                    continue
                except (OSError, http.client.HTTPException) as e:
                    last_error = f"cannot connect ({getattr(e, 'reason', None) or e})"
                    bar.update(1)
                    continue
                if status in _REDIRECT_STATUS:
                    raise ControllerError(self._redirect_message(status, answer_headers.get("location", "")))
                if status != 200:
                    last_error = f"HTTP {status} {reason}: {_excerpt(raw, key)}"
                    if status in (429, 503):
                        wait = retry_after_seconds(answer_headers.get("retry-after"))
                        if status == 429 or wait is not None:
                            last_error = ("rate limited: " + last_error +
                                          (f" (Retry-After {wait:g} s)" if wait is not None else ""))
                            if wait is not None and wait > MAX_RETRY_AFTER_S:
                                raise ControllerError(
                                    f"the controller endpoint {self.url} is rate limiting requests and asks to "
                                    f"wait {wait:g} s (more than {MAX_RETRY_AFTER_S:g} s): {last_error}. "
                                    "Queue again later, or use another key or server.")
                            rate_limited = wait if wait is not None else self.backoff
                    if status in _RETRY_STATUS:
                        bar.update(1)
                        continue
                    raise ControllerError(f"the controller endpoint {self.url} refused the request: "
                                          f"{last_error}. Check the model name, the API key variable "
                                          f"and that the server accepts images.")
                try:
                    payload = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    raise ControllerError(f"the controller endpoint {self.url} answered with something that "
                                          f"is not JSON: {_excerpt(raw, key)}") from None
                text = self._content(payload, key)
                bar.update(bar.total - bar.n)
                return text
        if last_error.startswith("rate limited"):
            advice = "Wait and queue again, raise retries, or use another key or server."
        elif last_error.startswith("HTTP"):
            advice = "The server kept failing; check its log."
        else:
            advice = "Is the server running and reachable? Raise timeout/retries for a slow server."
        raise ControllerError(f"the controller endpoint {self.url} failed after {self.retries + 1} "
                              f"attempt(s): {last_error}. {advice}")

    def _redirect_message(self, status: int, location: str) -> str:
        target = urllib.parse.urljoin(self.url, location) if location else "(no Location)"
        parts = urllib.parse.urlsplit(target)
        shown = f"{parts.scheme}://{parts.netloc}{parts.path}" if parts.netloc else target[:200]
        return (f"the controller endpoint {self.url} answered with a redirect (HTTP {status}) to {shown}. "
                "ReSpec never follows redirects, so the API key is never sent to another address: set "
                "base_url to the address that answers directly.")

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return cls(parts.hostname, parts.port, timeout=timeout)

    def _exchange(self, data: bytes, headers: dict) -> tuple[int, str, dict, bytes]:
        """One attempt: (status, reason, headers with lower-case names, body). The request runs in
        a worker thread; this thread watches the attempt's deadline and Cancel and, when either
        comes, shuts the socket (which ends the worker's blocking read) and stops waiting."""
        deadline = time.monotonic() + self.timeout
        conn = self._connection(self.timeout)
        parts = urllib.parse.urlsplit(self.url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        box: dict = {}

        def work():
            try:
                conn.request("POST", path, body=data, headers=headers)
                resp = conn.getresponse()
                got = {k.lower(): v for k, v in resp.getheaders()}
                box["answer"] = (resp.status, resp.reason, got, self._read_body(resp, got))
            except BaseException as e:  # handed to the waiting thread
                box["error"] = e

        worker = threading.Thread(target=work, name="respec-openai-request", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.1)
                if not worker.is_alive():
                    break
                if comfy.interrupt_requested():
                    _abort(conn)
                    comfy.check_interrupted()
                if time.monotonic() >= deadline:
                    _abort(conn)
                    raise _Stop(f"gave no complete answer within {self.timeout:g} s", retry=True)
        finally:
            if worker.is_alive():
                _abort(conn)
            else:
                conn.close()
        if "error" in box:
            e = box["error"]
            if isinstance(e, _Stop):
                raise e
            if isinstance(e, (TimeoutError, socket.timeout)):
                raise _Stop(f"gave no complete answer within {self.timeout:g} s", retry=True)
            raise e
        return box["answer"]

    def _read_body(self, resp, headers: dict) -> bytes:
        """The whole body, at most max_response_bytes (refused beyond, without reading it all)."""
        cap = self.max_response_bytes
        too_big = _Stop(f"answered with more than {_size(cap)} (max_response_bytes); raise it if the "
                        "answer is really that large, or check the server", retry=False)
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > cap:
            raise too_big
        chunks, total = [], 0
        while True:
            chunk = resp.read(min(65536, cap + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise too_big


def _abort(conn: http.client.HTTPConnection) -> None:
    """End a connection from another thread: shutdown wakes a read blocked on the socket."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    try:
        conn.close()
    except OSError:
        pass


def _size(n: int) -> str:
    return f"{n / 2 ** 20:g} MiB" if n >= 2 ** 20 else f"{n} bytes"


def _excerpt(raw: bytes | str, secret: str = "", n: int = 300) -> str:
    """The start of a server's answer for an error message, the secret redacted BEFORE the cut
    (so no prefix of it survives at the edge)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = redact(text, secret).strip().replace("\n", " ")
    return (text[:n] + "...") if len(text) > n else (text or "(empty body)")
