"""Is this a restoration turn? (interactive use, without ground truth)

The benchmark knows it (the scenario's revelation turn) and passes the flag. An artist's
session does not, so "auto" mode applies a rule to the words of the requests:

    a turn is a restoration turn when the current request uses a revealing verb
    (remove / delete / erase / take away / get rid of ..., move / shift / relocate ...,
    shrink / resize / make ... smaller ..., replace / swap / change ... into ...)
    AND it names something that an earlier turn ADDED (add / put / place / insert / draw /
    cover ... with ...).

"Names something added earlier" means: a content word of the earlier request's object
(the words between its adding verb and the first place phrase such as "in front of",
"on", "over"; for "cover X with Y" the words after "with") appears in the current request
(plural "s"/"es" ignored; size and colour adjectives ignored). "Change/turn X into <a colour
or material>" is an attribute edit, not a revelation. The verbs are those of the one verb table
(respec/controller/request_language.py), and preservation clauses ("keep the box", "don't move
the lamp") are not read. The rule reads only the user's own requests (never ground truth); the
manual override ("restoration" / "not restoration") settles any case it gets wrong.
"""
from __future__ import annotations

import re

from ..errors import InputError
from ..history import History
from ..pixels.analysis_cache import CACHE, AnalysisCache
from ..text import clip
from .request import check_request
from .request_language import clauses, verbs_of

MODES = ("auto", "restoration", "not restoration")

# The verbs come from the one verb table (request_language.VERBS), in its order: the first that
# occurs in a request is the one read.
_REVEALING_KINDS = ("remove", "move", "shrink", "replace")
_REVEALING = tuple(verbs_of(c) for c in _REVEALING_KINDS)
_ADD = verbs_of("add", "give")
_SMALLER = r"(smaller|tinier|narrower|shorter|thinner|lower|half the size|less tall|less wide)"
# Where an added object's description ends and its placement begins.
_PLACE_WORDS = {"on", "onto", "in", "into", "over", "above", "below", "under", "underneath", "at", "near",
                "next", "beside", "behind", "front", "across", "around", "covering", "to", "from", "that",
                "which", "so", "where", "between", "along", "against", "by", "atop", "upon", "inside",
                "outside", "partially", "partly", "fully", "completely", "blocking", "hiding", "obscuring",
                "while", "and"}
_STOP = {"a", "an", "the", "some", "of", "his", "her", "its", "their", "this", "that", "these", "those",
         "it", "them", "one", "two", "three", "few", "several", "with", "for", "image", "picture", "photo",
         "scene", "please", "now", "also", "just", "only", "entire", "whole", "all", "left", "right",
         "side", "top", "bottom", "middle", "center", "centre", "background", "foreground", "area", "part",
         "large", "big", "huge", "small", "little", "tiny", "tall", "short", "wide", "long", "new", "old",
         "single", "same", "other", "another", "more", "less", "very", "bright", "dark", "light"}
_COLOURS = {"red", "orange", "yellow", "green", "blue", "purple", "violet", "pink", "brown", "black", "white",
            "grey", "gray", "gold", "golden", "silver", "beige", "cyan", "magenta", "teal", "navy"}
_ATTRIBUTE = _COLOURS | {
    "color", "colour", "colored", "coloured", "wooden", "wood", "metal", "metallic", "glass", "plastic", "stone",
    "marble", "leather", "cotton", "style", "painting", "sketch", "cartoon", "anime", "watercolor", "watercolour",
    "oil", "pixel", "art", "night", "day", "daytime", "nighttime", "winter", "summer", "autumn", "spring",
    "sunset", "vintage", "monochrome", "grayscale", "greyscale", "sepia", "shade"}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("'s", ""))


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _content(words: list[str]) -> set[str]:
    return {_stem(w) for w in words if w not in _STOP and w not in _PLACE_WORDS and w not in _COLOURS and len(w) > 2}


def _has_phrase(words: list[str], phrase: str) -> int:
    """Index just after the first occurrence of `phrase` (word sequence) in `words`, or -1."""
    p = phrase.split()
    for i in range(len(words) - len(p) + 1):
        if words[i:i + len(p)] == p:
            return i + len(p)
    return -1


def _changing_part(request: str) -> str:
    """The request without its preservation clauses ("remove the hat, don't move the box": only
    the first clause asks for a change)."""
    return " ".join(cl.text for cl in clauses(request) if not cl.preserves)


def revealing_verb(request: str) -> str | None:
    """The revealing action in a request ("remove", "move", "shrink", "replace", ...), or None;
    preservation clauses ("don't move the box") are not read."""
    found = revealing_action(request)
    return found[1] if found else None


def revealing_action(request: str) -> tuple[str, str] | None:
    """(kind, verb) of the revealing action in a request: kind "remove", "move", "shrink" or
    "replace" ("change X into Y" replaces), verb the words that said it; None without one.
    Preservation clauses ("don't move the box") are not read."""
    words = _words(_changing_part(request))
    text = " ".join(words)
    for kind, group in zip(_REVEALING_KINDS, _REVEALING):
        for verb in group:
            if _has_phrase(words, verb) >= 0:
                return kind, verb
    if re.search(r"\bmake\b.*\b" + _SMALLER + r"\b", text):
        return "shrink", "make ... smaller"
    m = re.search(r"\b(change|turn|transform|convert)\b(.*?)\b(to|into)\b(.*)$", text)
    if m:
        target = [w for w in m.group(4).split() if w not in _STOP]
        if target and not all(w in _ATTRIBUTE for w in target):
            return "replace", f"{m.group(1)} ... {m.group(3)}"
    return None


def request_words(text: str) -> set[str]:
    """The content words of a request (stemmed; stop, place and colour words left out): what the
    words rule compares with an earlier addition's object."""
    return _content(_words(text or ""))


def replacement_words(request: str) -> set[str]:
    """The content words of what a replacing request puts in the old object's place ("replace the
    box with a small lamp", "swap the box for a lamp", "turn the box into a lamp": {"lamp"});
    empty when it names none."""
    words = _words(request or "")
    for key in ("with", "by", "for", "into", "to"):
        if key in words[1:]:
            return _content(words[words.index(key) + 1:])
    return set()


def added_object_words(instruction: str, cache: AnalysisCache = CACHE) -> set[str]:
    """Content words of the object an earlier request added (empty if it added nothing). Read once
    per instruction (kept in `cache.request_words`): every later turn of a conversation asks again
    about every earlier one."""
    text = instruction if isinstance(instruction, str) else str(instruction)
    hit = cache.request_words.get(text)
    if hit is None:
        hit = frozenset(_content(_added_object_phrase(text)))
        cache.request_words.put(text, hit)
    return set(hit)


def _added_object_phrase(instruction: str) -> list[str]:
    """The words of the object an adding request names (between the adding verb and the first place
    word; for "cover X with Y" the words after "with"); [] when it adds nothing."""
    words = _words(instruction)
    if _has_phrase(words, "cover") >= 0 and "with" in words:
        return words[words.index("with") + 1:]
    for verb in _ADD:
        start = _has_phrase(words, verb)
        if start >= 0:
            obj: list[str] = []
            for w in words[start:]:
                if w in _PLACE_WORDS and obj:
                    break
                obj.append(w)
            return obj
    return []


def added_object_colours(instruction: str) -> set[str]:
    """The colour words of the object an adding request names ("add a red ball near the blue box": {"red"})."""
    return {w for w in _added_object_phrase(instruction or "") if w in _COLOURS}


def colour_words(text: str) -> set[str]:
    """The colour words of a request (which the words rule leaves out of its content words)."""
    return {w for w in _words(text or "") if w in _COLOURS}


def detect_restoration(history: History, user_instruction: str) -> tuple[bool, str]:
    """Decide without ground truth whether turn t reveals content an earlier turn covered.
    Returns (is_restoration, a one-line reason). See the module docstring for the rule."""
    t = history.next_turn
    if t == 1:
        return False, "turn 1: no earlier edit can have covered anything"
    verb = revealing_verb(user_instruction or "")
    if verb is None:
        return False, "no revealing verb (remove / move / shrink / replace ...) in the request"
    named = turns_named(history, user_instruction)
    if named:
        k, shared = named[0]
        return True, f"'{verb}' acts on '{' '.join(shared)}', which turn {k} added"
    if not any(added_object_words(earlier) for earlier in history.instructions):
        return False, f"'{verb}' but no earlier turn added an object"
    return False, f"'{verb}' does not name anything an earlier turn added"


def turns_named(history: History, user_instruction: str) -> list[tuple[int, list[str]]]:
    """The earlier turns k whose added object the request names: [(k, shared content words)],
    oldest first (the words rule of the module docstring, without the revealing verb)."""
    requested = _content(_words(_changing_part(user_instruction or "")))
    out = []
    for k, earlier in enumerate(history.instructions, start=1):
        shared = sorted(added_object_words(earlier) & requested)
        if shared:
            out.append((k, shared))
    return out


def decide_restoration(mode: str, history: History, user_instruction: str,
                       ground_truth: bool | None = None) -> tuple[bool, dict]:
    """Resolve the restoration flag: a ground-truth flag wins (benchmark); else the manual
    mode ("restoration" / "not restoration"); else "auto" applies detect_restoration.
    Returns (flag, metadata for plan.meta). The history must be a History and the request pass
    the request rule (respec/controller/request.py), whichever way the flag is decided."""
    check_request(user_instruction, "the current request P_t")
    if ground_truth is not None:
        return bool(ground_truth), {"restoration_decided_by": "ground_truth"}
    if mode is not None and not isinstance(mode, str):
        raise InputError(f"restoration mode must be one of {', '.join(MODES)}, got {clip(mode)}")
    mode = (mode or "auto").strip().lower()
    if mode not in MODES:
        raise InputError(f"unknown restoration mode {clip(mode)}; use one of {', '.join(MODES)}")
    if mode == "restoration":
        return True, {"restoration_decided_by": "manual"}
    if mode == "not restoration":
        return False, {"restoration_decided_by": "manual"}
    flag, reason = detect_restoration(history, user_instruction)
    return flag, {"restoration_decided_by": "auto", "restoration_reason": reason}
