"""The one rule for text the pack is given and the one bounded JSON reader.

Text from a user, a workflow or an HTTP client (requests, instructions, meta, image ids, store
names, route bodies) ends up in SQLite, in JSON files and in a model's tokenizer, all of which
take UTF-8. So every such text passes `check_text` before anything is created from it: a string,
no lone UTF-16 surrogate (a JSON "\\ud800" escape carries one; no UTF-8 text can), no NUL, and at
most a given number of UTF-8 bytes.

JSON given as text (a route's body, History Append's meta and editor_image_ids, a stored turn's
meta read back) goes through `read_json`, and JSON-able values from Python (a turn's meta)
through `check_json`: both bound the size and the nesting depth, so a hostile value is an
InputError before it reaches a recursive encoder, decoder or `json_safe`, never a RecursionError
anywhere later (a value that was stored can always be served).

Error messages the pack shows for these are short: `clip` echoes at most a few dozen characters
of what was given, and a message is at most MAX_MESSAGE characters.
"""
from __future__ import annotations

import json
import re
import reprlib
from typing import Any

from .errors import InputError

MAX_MESSAGE = 300      # characters of an error message about a given value
MAX_JSON_DEPTH = 32    # nesting levels of any JSON the pack reads or stores (a turn's meta needs ~5)
# UTF-8 bytes of one request or instruction (a user's P_t, the instruction a plan sends to the editor,
# a turn's texts in the store); an editor's text encoder reads far less.
MAX_REQUEST_BYTES = 16 * 1024

_SURROGATE = re.compile("[\ud800-\udfff]")


def clip(value: Any, limit: int = 40) -> str:
    """repr of `value` cut to `limit` characters (what a message may echo of a given value; a
    nested value is shown a few levels deep, so even a hostile one costs little)."""
    if isinstance(value, str):
        text = repr(value[: limit + 1])
    else:
        r = reprlib.Repr()
        r.maxlevel, r.maxstring, r.maxother = 3, limit, limit
        try:
            text = r.repr(value)
        except Exception:   # a hostile __repr__
            text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def message(text: str) -> str:
    """`text` cut to MAX_MESSAGE characters (a message built from given values stays short)."""
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def text_problem(text: str, max_bytes: int | None = None) -> str | None:
    """Why `text` breaks the text rule ('a lone surrogate U+D800 at character 3', 'a NUL character
    at ...', '20,000 bytes long; at most 16,384'), or None when it is fine."""
    m = _SURROGATE.search(text)
    if m:
        return f"a lone surrogate (U+{ord(m.group(0)):04X}) at character {m.start()}, which is not valid Unicode"
    i = text.find("\x00")
    if i >= 0:
        return f"a NUL character at character {i}"
    if max_bytes is not None and len(text) > max_bytes // 4:   # the encoding is only needed near the limit
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            return f"{size:,} bytes long; at most {max_bytes:,} bytes are accepted"
    return None


def check_text(value: Any, what: str, max_bytes: int | None = None, shorten: str = "shorten it") -> str:
    """`value` when it is text that UTF-8 can carry (no lone surrogate, no NUL) of at most
    `max_bytes` UTF-8 bytes; otherwise InputError naming `what` and saying what to do (`shorten`:
    the advice for a text that is too long)."""
    if not isinstance(value, str):
        raise InputError(message(f"{what} must be text, got {type(value).__name__}"))
    problem = text_problem(value, max_bytes)
    if problem is None:
        return value
    if "bytes long" in problem:
        raise InputError(message(f"{what} is {problem}; {shorten}"))
    raise InputError(message(f"{what} holds {problem}; remove that character (a lone surrogate usually "
                             f"comes from text cut in the middle of an emoji)"))


def safe_text(text: str) -> str:
    """`text` with lone surrogates and NUL characters replaced by U+FFFD (for text the pack did not
    get from a user but must keep, e.g. a model's answer), so it passes the text rule."""
    if text.isascii() and "\x00" not in text:
        return text
    return _SURROGATE.sub("\ufffd", text).replace("\x00", "\ufffd")


def cut_bytes(text: str, max_bytes: int, marker: str = "") -> str:
    """`text` cut so that it (and `marker`, appended when something was cut) is at most `max_bytes`
    UTF-8 bytes, at a character boundary. `text` must be encodable (see safe_text)."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    keep = raw[: max(0, max_bytes - len(marker.encode("utf-8")))]
    return keep.decode("utf-8", errors="ignore") + marker


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply dicts and lists nest in `value` (a scalar: 0, [] or {}: 1), counted without
    recursion and given up on past `limit` (the result is then limit + 1)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items = v.values()
        elif isinstance(v, (list, tuple)):
            items = v
        else:
            continue
        deepest = max(deepest, d)
        if deepest > limit:
            return limit + 1
        stack.extend((x, d + 1) for x in items)
    return deepest


def check_json(value: Any, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`value` when its dicts and lists nest at most `max_depth` deep; InputError otherwise."""
    if json_depth(value, max_depth) > max_depth:
        raise InputError(message(f"{what} is nested more than {max_depth} levels deep; "
                                 f"give a flatter JSON value"))
    return value


def read_json(raw: Any, what: str, *, max_bytes: int | None, example: str,
              max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value in `raw` (text or UTF-8 bytes): at most `max_bytes` bytes, valid UTF-8
    text under the text rule, nested at most `max_depth` deep (max_bytes None: any size).
    InputError naming `what` and showing `example` (what it should be: 'a JSON object like {..}') otherwise; never a RecursionError, however
    deep the input."""
    if isinstance(raw, (bytes, bytearray)):
        if max_bytes is not None and len(raw) > max_bytes:
            raise InputError(message(f"{what} is too large ({len(raw):,} bytes; at most {max_bytes:,})"))
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(message(f"{what} is not UTF-8 text; send {example}")) from None
    check_text(raw, what, max_bytes)
    too_deep = InputError(message(f"{what} is nested more than {max_depth} levels deep; send {example}"))
    if _text_depth(raw, max_depth) > max_depth:   # before parsing: the parser itself recurses
        raise too_deep
    try:
        value = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    except ValueError as e:
        detail = f"{e.msg} at character {e.pos}" if isinstance(e, json.JSONDecodeError) else "not JSON"
        raise InputError(message(f"{what} must be {example} ({detail})")) from None
    return value


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')   # the unrolled loop: linear, no backtracking blow-up
_BRACKET = re.compile(r"[\[\]{}]")


def _text_depth(text: str, limit: int) -> int:
    """How deeply the brackets of JSON text nest outside its strings (an unclosed bracket counts),
    given up on past `limit` (limit + 1). Linear in the text's length, and never recursive."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group(0) in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return limit + 1
    return deepest
