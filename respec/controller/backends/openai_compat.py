"""A controller behind any OpenAI-compatible chat-completions endpoint (vLLM, Ollama,
LM Studio, llama.cpp server, hosted APIs).

Images go inline as base64 data URLs. The API key is read at call time from the environment
variable whose NAME the user gives, so the key itself never enters a workflow, a plan or a log.
Greedy decoding (temperature 0), a cap on new tokens, a per-request timeout and retries with
exponential backoff on connection errors, timeouts, 408/429 and 5xx answers; anything else
fails at once with a ControllerError that says what the server answered.
"""
from __future__ import annotations

import base64
import http.client
import io
import json
import os
import socket
import time
import urllib.error
import urllib.request

from PIL import Image

from ... import comfy
from ...errors import ControllerError, InputError
from ...images import as_rgb, downscale_to_budget
from ..prompts import DEFAULT_MAX_PIXELS

RESPONSE_FORMATS = ("none", "json_object", "json_schema")
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}


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


class OpenAICompatBackend:
    """A VLMBackend that posts to `<base_url>/chat/completions`. Use load_backend("openai", ...)."""

    def __init__(self, *, model: str, base_url: str = "http://127.0.0.1:8000/v1", api_key_env: str = "",
                 timeout: float = 120.0, retries: int = 2, backoff: float = 1.0,
                 max_pixels: int = DEFAULT_MAX_PIXELS, max_new_tokens: int = 768,
                 response_format: str = "none", image_format: str = "png"):
        if not model or not str(model).strip():
            raise InputError("the OpenAI-compatible controller needs the served model's name "
                             "(what the server lists at /v1/models)")
        self.model = str(model).strip()
        self.url = chat_completions_url(pinned_base_url(base_url))
        self.api_key_env = (api_key_env or "").strip()
        if self.api_key_env and not self.api_key_env.replace("_", "").isalnum():
            raise InputError("api_key_env must be the NAME of an environment variable (like OPENAI_API_KEY), "
                             "not a key; got something that is not a variable name")
        self.timeout = float(timeout)
        if self.timeout <= 0:
            raise InputError("timeout must be a positive number of seconds")
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.max_pixels = int(max_pixels) if max_pixels else DEFAULT_MAX_PIXELS
        self.max_new_tokens = int(max_new_tokens) if max_new_tokens else 768
        if response_format not in RESPONSE_FORMATS:
            raise InputError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}")
        self.response_format = response_format
        self.image_format = image_format
        self.name = f"openai:{self.model}@{self.url}"
        self.requests = 0  # HTTP requests sent (tests and benchmarks read this)

    # -- request -----------------------------------------------------------------------
    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
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
    def _content(payload: object) -> str:
        try:
            message = payload["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ControllerError("the endpoint's answer is JSON but not a chat completion (no "
                                  "choices[0].message); check the base URL points at an OpenAI-compatible "
                                  f"/v1 API. Answer starts: {json.dumps(payload)[:300]}") from None
        if content is None:
            return ""
        if isinstance(content, list):  # some servers answer with content parts
            return "".join(c.get("text", "") for c in content if isinstance(c, dict))
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
        """POST one chat completion; returns the answer's text. Raises ControllerError."""
        max_new_tokens = int(max_new_tokens or self.max_new_tokens)
        data = json.dumps(self.build_body(parts, system, max_new_tokens, json_schema)).encode("utf-8")
        headers = self._headers()
        last_error = ""
        with comfy.progress(self.retries + 1, "controller (remote)") as bar:
            for attempt in range(self.retries + 1):
                comfy.check_interrupted()
                if attempt:
                    self._sleep(self.backoff * 2 ** (attempt - 1))
                req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                self.requests += 1
                try:
                    with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                        raw = resp.read()
                except urllib.error.HTTPError as e:
                    detail = _excerpt(e.read() if e.fp is not None else b"")
                    last_error = f"HTTP {e.code} {e.reason}: {detail}"
                    if e.code in _RETRY_STATUS:
                        bar.update(1)
                        continue
                    raise ControllerError(f"the controller endpoint {self.url} refused the request: "
                                          f"{last_error}. Check the model name, the API key variable "
                                          f"and that the server accepts images.") from None
                except (TimeoutError, socket.timeout):
                    last_error = f"no answer within {self.timeout:g} s"
                    bar.update(1)
                    continue
                except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
                    last_error = f"cannot connect ({getattr(e, 'reason', e)})"
                    bar.update(1)
                    continue
                try:
                    payload = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    raise ControllerError(f"the controller endpoint {self.url} answered with something that "
                                          f"is not JSON: {_excerpt(raw)}") from None
                text = self._content(payload)
                bar.update(bar.total - bar.n)
                return text
        raise ControllerError(f"the controller endpoint {self.url} failed after {self.retries + 1} "
                              f"attempt(s): {last_error}. Is the server running and reachable? "
                              f"Raise timeout/retries for a slow server.")


def _excerpt(raw: bytes, n: int = 300) -> str:
    text = raw.decode("utf-8", "replace").strip().replace("\n", " ")
    return (text[:n] + "...") if len(text) > n else (text or "(empty body)")
