"""How a request reads: its clauses, the verb that governs each, whether it asks for a global
change, a new background or a local edit, and the object it asks to change (beyond the paper).

Every rule that reads a user's words reads them here, with one verb table (`VERBS`): the Drift
Guard's keyword rule (respec/post_edit/guard_step.py: step aside on a global edit), the restoration rule
(respec/controller/restoration.py: does this turn reveal something an earlier turn added?) and
the nodes that turn a request into an edit region.

A request is split into clauses (at commas, semicolons, "and", "then", "but", "while"); each is
read by the verb it starts with (after "please", "now", "can you" ...; the longest phrase of the
table that starts the clause):

- add / put / place / ... : what follows is added. A new setting for the subject ("put her in a
  library", "+ under a sunny sky") is a new background; an atmosphere or a light ("add fog", "add a
  vintage filter", "add a hard side light coming from the right") is global; an object ("add a
  painting of a sunset", "add a light bulb") is local.
- make / turn / change / give / ... : global when the target is the whole picture and a global
  word is in the clause ("make it night", "make the image darker"), or when the target is a
  whole-picture quality ("change the lighting", "the style"). A target that is the background,
  not a part of it ("change the background to a beach"), is a new background. Another target
  is local: the words describe it ("make the sofa darker"), unless they ask for a style ("turn the
  person into anime style": a style is the whole picture's).
- remove / delete / ... : global only for a whole-picture quality ("remove the sepia tone");
  the background ("remove the background") is a new background.
- move / resize / rotate / replace / ... : global only on the whole picture ("rotate the image");
  "replace the background with ..." is a new background.
- keep / preserve / without changing / ... , and any verb negated (don't / do not / never ...): a
  preservation clause: never a change. A verbless clause that follows one continues its list ("keep the same setting and
  golden hour lighting"), and a verbless clause that says "the same ...", "unchanged", "as it
  is" preserves too.
- no verb ("night time", "anime style"): global when a global word is in it.
- any other verb: global when a global word is in it (stepping aside is the safe side).

What it cannot do: it reads these verb patterns, not language. "add a lamp that lights the whole
picture" is local to it; a global edit that its words miss is caught by what the pixels show (the
Drift Guard measures the change's coverage and the whole picture's colour map).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# The one verb table: each verb phrase and its class, in the order the restoration rule tries
# them (it takes the first that occurs anywhere in a request; the clause reader takes the longest
# phrase that starts a clause). Classes:
#   add      puts something new in (its object is what is added)
#   give     changes its target and may bring a new object ("give the man a hat", "set a vase
#            on the table"): read like `set` by the keyword rule, like `add` by the restoration rule
#   remove / move / shrink / enlarge / rotate / replace   act on an existing object
#   set      changes what its target is or looks like ("make", "turn", "recolour", ...)
#   keep     says what stays (a preservation clause)
VERBS: tuple[tuple[str, str], ...] = (
    *((v, "add") for v in ("add", "put", "place", "insert", "draw", "paint", "include", "attach", "hang",
                           "overlay", "stick", "drape", "position", "introduce")),
    ("give", "give"),
    *((v, "add") for v in ("wear", "hold", "cover", "stack", "lay")),
    ("set", "give"),
    *((v, "add") for v in ("put on", "paint in", "carry")),
    *((v, "remove") for v in ("remove", "delete", "erase", "take away", "take out", "take off", "get rid of",
                              "eliminate", "clear away", "wipe out", "cut out", "pull out", "lift off")),
    *((v, "move") for v in ("move", "shift", "relocate", "slide", "drag", "reposition", "push")),
    *((v, "shrink") for v in ("shrink", "resize", "scale down", "downsize", "reduce the size", "make smaller",
                              "minimize")),
    *((v, "enlarge") for v in ("enlarge", "scale up", "scale")),
    *((v, "rotate") for v in ("rotate", "flip", "mirror")),
    *((v, "replace") for v in ("replace", "swap", "exchange", "substitute")),
    *((v, "set") for v in ("make", "turn", "change", "convert", "transform", "render", "apply", "adjust",
                           "modify", "edit", "alter", "recolor", "recolour", "restyle", "relight", "stylize",
                           "stylise", "colorize", "colourize", "colorise", "colourise", "brighten", "darken",
                           "warm", "cool", "tint", "shift the colors", "shift the colours", "shift the color",
                           "shift the colour", "grade", "redo", "redraw", "repaint")),
    *((v, "keep") for v in ("keep", "preserve", "maintain", "leave", "retain", "without changing",
                            "without altering", "without touching", "without modifying", "without moving")),
)
CLASSES = ("add", "give", "remove", "move", "shrink", "enlarge", "rotate", "replace", "set", "keep")
ACTS_ON_AN_OBJECT = ("move", "shrink", "enlarge", "rotate", "replace")
ALWAYS_GLOBAL = ("relight", "restyle", "stylize", "stylise", "colorize", "colourize", "colorise", "colourise",
                 "grade")      # set-class verbs that are about the whole picture unless given another target

GLOBAL = "global"
BACKGROUND = "background"
LOCAL = "local"


def verbs_of(*classes: str) -> tuple[str, ...]:
    """The verb phrases of the table in these classes, in the table's order."""
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown verb class(es) {sorted(unknown)}; the classes are {', '.join(CLASSES)}")
    return tuple(v for v, c in VERBS if c in classes)


GLOBAL_WORDS = re.compile(
    r"\b(lighting|relight|night(time)?|daytime|day time|sunset|sunrise|dusk|dawn|golden hour|season|winter|"
    r"summer|autumn|fall foliage|springtime|snowy|style|styled|painting|painterly|watercolou?r|oil paint|"
    r"cartoon|anime|sketch|comic|sepia|black and white|monochrome|gr[ae]yscale|vintage|film look|"
    r"colou?r grad(e|ing)|brighter|darker|brightness|contrast|saturation|warmer|cooler|tone|mood|weather|"
    r"foggy|rainy|zoom|crop|reframe|outpaint|wider shot|whole (image|picture|scene|photo)|entire "
    r"(image|picture|scene|photo)|everything)\b", re.IGNORECASE)
WHOLE_TARGET = re.compile(
    r"^(it|everything|all|the (whole |entire )?(image|picture|photo|photograph|scene|shot|frame|view|room|"
    r"landscape|scenery|world)|(this|the) (image|picture|photo|scene|room)|image|picture|photo|scene)\b")
PLACES = ("background", "backdrop", "setting", "surroundings", "environment", "location")
WHOLE_QUALITY = re.compile(
    r"^((the|a|an|its|this|some|more|less) )*((overall|whole|entire|global|general) )?(\w+ )?"
    r"(lighting|light|illumination|style|look|tone|tones|mood|atmosphere|weather|season|time of day|"
    r"colou?r grad(e|ing)|colou?r palette|palette|filter|contrast|brightness|saturation|exposure|"
    r"white balance|colou?r cast|grain|vignette|aesthetic|vibe|" + "|".join(PLACES) + r")\b")
ATMOSPHERE = re.compile(      # an atmosphere or a light, not an object ("a light bulb", "a painting of a sunset")
    r"^((?!of\b)[\w'-]+ ){0,3}"
    r"(fog|haze|mist|rain|snow|snowfall|sunset|sunrise|dusk|dawn|night|lighting|light|sunlight|backlight|"
    r"light leaks?|glow|shadows|filter|film look|film grain|grain|vignette|colou?r grad(e|ing)|tint|atmosphere|"
    r"weather|look|effect|style|bokeh)(?=$|\s+(from|on|in|into|to|over|across|around|behind|above|below|at|near|through|coming|"
    r"falling|that|which|with|and|so|for)\b)")
STYLE_WORDS = re.compile(r"\b(style|styled|painting|painterly|watercolou?r|oil paint|cartoon|anime|sketch|comic|"
                         r"pixel art|illustration)\b")
PART_OF = re.compile(r"^(in|on|at|near|behind|around|above|below|under|left|right|to the (left|right)) "
                     r"(the|this|that|her|his)\b")
SETTING = re.compile(      # "put her in a library", "+ under a sunny sky": the subject in a new setting
    r"^((her|him|them|everyone|everybody|the (whole )?(scene|image|picture|photo)) )?"
    r"(in|into|inside|under|at|on|onto) (a|an|the)\b")
PRESERVED = re.compile(r"\b(same|unchanged|as it is|as they are|as before|intact|untouched|original)\b")
RESIZED = re.compile(r"\b(smaller|bigger|larger|tinier|half as (big|large|tall|wide)|twice as (big|large|tall|wide)|"
                     r"the size|shorter|taller|wider|narrower)\b")     # "make the box half as big": a resize
QUOTED = re.compile(r"(?<![\w])(['\"“”‘’])(.+?)\1(?![\w])")     # quoted text (a sign's words) is not split
CLAUSE_SPLIT = re.compile(r"\s*([,;:.!?]+|\band then\b|\bthen\b|\band\b|\bbut\b|\bwhile\b)\s*")
NEGATED = re.compile(r"^(don't|do not|dont|never|avoid|no need to) \w+")
LEAD = re.compile(r"^((please|now|also|just|kindly|simply|finally|first|next|can you|could you|would you|"
                  r"i want you to|i'd like you to|let's|lets) )+")
_VERB_AT_START = re.compile(
    r"^(" + "|".join(re.escape(v) for v, _ in sorted(VERBS, key=lambda r: -len(r[0]))) + r")\b")
_CLASS_OF = dict(VERBS)
# Where the object a verb acts on ends: a place, a manner, a result or a second object.
_OBJECT_ENDS = re.compile(
    r"\s+\b(on|onto|in|into|inside|at|over|above|below|under|underneath|near|next to|beside|behind|"
    r"in front of|across|around|to|from|with|by|for|so|that|which|where|while|between|along|against|"
    r"atop|upon|as|look|looks|appear|instead of|without|except|from image \d+)\b.*$")
_COMPARATIVES = ("darker", "brighter", "lighter", "bigger", "smaller", "larger", "taller", "shorter", "wider",
                 "narrower", "warmer", "cooler", "softer", "sharper", "older", "younger", "longer", "thicker",
                 "thinner", "happier", "sadder")
_COLOURS = ("red", "orange", "yellow", "green", "blue", "purple", "violet", "pink", "brown", "black", "white",
            "grey", "gray", "gold", "golden", "silver", "beige", "cyan", "magenta", "teal", "navy")


@dataclass(frozen=True)
class Clause:
    """One clause as the rules read it: its text (lower case, lead words gone), the verb phrase that
    governs it and that verb's class ('' for a clause that starts with no verb of the table), what
    follows the verb, whether "and" joins it to the clause before, and whether it continues a
    preservation list (no verb of its own, after "keep ... and")."""

    text: str
    verb: str
    kind: str
    rest: str
    after_and: bool = False
    continues_keep: bool = False

    @property
    def preserves(self) -> bool:
        """Whether the clause says what stays (keep / preserve / the same ...), not what changes."""
        return self.kind == "keep" or self.continues_keep or (not self.verb and bool(PRESERVED.search(self.text)))


def _normalise(text: str) -> str:
    t = text.strip().lower().replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    return re.sub(r"\s+", " ", t)


def read_clause(text: str, after_and: bool = False) -> Clause:
    """One clause read by the verb it starts with (see the module docstring); a clause that does
    not start with a verb of the table has none ('')."""
    c = LEAD.sub("", _normalise(text))
    neg = NEGATED.match(c)
    if neg:         # "don't change the lighting", "do not move the box": says what stays
        return Clause(c, neg.group(0), "keep", c[neg.end():].strip(), after_and)
    m = _VERB_AT_START.match(c)
    if m is None:
        return Clause(c, "", "", c, after_and)
    return Clause(c, m.group(0), _CLASS_OF[m.group(0)], c[m.end():].strip(), after_and)


def clauses(request: str | None) -> list[Clause]:
    """The request's clauses, read (empty for no request). Quoted text is one piece ("change
    'flux.cpp' to 'edit.cpp'"). A verbless clause joined by "and" to a preservation clause continues
    its list ("keep the same setting and golden hour lighting"); after a comma it stands alone ("keep
    the pose, anime style" asks for a style)."""
    if not request:
        return []
    text = re.sub(r"black and white", "black_and_white", _normalise(request))
    quoted: list[str] = []

    def hide(m: re.Match) -> str:
        quoted.append(m.group(0))
        return f"\x00{len(quoted) - 1}\x00"

    text = QUOTED.sub(hide, text)
    parts = CLAUSE_SPLIT.split(text)
    out: list[Clause] = []
    after_and = False
    for i, part in enumerate(parts):
        if i % 2:               # a separator (the split keeps them)
            after_and = part.strip() == "and"
            continue
        part = re.sub(r"\x00(\d+)\x00", lambda m: quoted[int(m.group(1))], part)
        part = part.replace("black_and_white", "black and white").strip(" ()")
        if not part:
            continue
        cl = read_clause(part, after_and)
        if not cl.verb and after_and and out and out[-1].preserves:
            cl = Clause(cl.text, "", "", cl.rest, True, continues_keep=True)
        out.append(cl)
    return out


@dataclass(frozen=True)
class Scope:
    """What a request asks to change: `kind` GLOBAL (the whole picture: style, light, season),
    BACKGROUND (a new background or setting for the subject) or LOCAL (objects); `words` the words
    that decided it ('' for LOCAL) and `clause` the clause they are in."""

    kind: str
    words: str = ""
    clause: str = ""


def clause_scope(cl: Clause) -> Scope:
    """One clause's scope (see the module docstring)."""
    if cl.preserves:
        return Scope(LOCAL)
    c, rest = cl.text, cl.rest
    words = [m.group(0) for m in GLOBAL_WORDS.finditer(c)]
    kind = "set" if cl.kind == "give" else cl.kind
    if kind in ("", "other"):
        return Scope(GLOBAL, words[0], c) if words else Scope(LOCAL)
    if kind == "set":
        whole = WHOLE_TARGET.match(rest)
        q = WHOLE_QUALITY.match(rest)
        if cl.verb in ALWAYS_GLOBAL and (not rest or whole or q):
            return Scope(GLOBAL, cl.verb, c)
        if q:
            if q.group(0).endswith(PLACES):
                if PART_OF.match(rest[q.end():].strip()):      # a part of the background: local
                    return Scope(LOCAL)
                return Scope(BACKGROUND, q.group(0), c)
            return Scope(GLOBAL, words[0] if words else q.group(0), c)
        if not rest or whole or GLOBAL_WORDS.match(rest) or rest.startswith(("into ", "to ", "as ", "in ", "like ",
                                                                             "look ")):
            return Scope(GLOBAL, words[0], c) if words else Scope(LOCAL)
        # "turn the person into anime style": a style is the whole picture's, whatever it is applied to
        into = re.search(r"\b(into|to|as|in|like)\b(.*)$", rest)
        style = STYLE_WORDS.search(into.group(2)) if into else None
        return Scope(GLOBAL, style.group(0), c) if style else Scope(LOCAL)
    if kind == "add":
        a = ATMOSPHERE.match(rest)
        if a:
            return Scope(GLOBAL, a.group(0), c)
        if SETTING.match(rest):
            return Scope(BACKGROUND, " ".join(rest.split()[:5]), c)
        if WHOLE_TARGET.match(rest) and words:
            return Scope(GLOBAL, words[0], c)
        return Scope(LOCAL)
    if kind == "remove":
        q = WHOLE_QUALITY.match(rest)
        if q and q.group(0).endswith(PLACES) and not PART_OF.match(rest[q.end():].strip()):
            return Scope(BACKGROUND, q.group(0), c)
        return Scope(GLOBAL, q.group(0), c) if q and not q.group(0).endswith(PLACES) else Scope(LOCAL)
    if kind in ACTS_ON_AN_OBJECT:
        whole = WHOLE_TARGET.match(rest)
        if whole:
            return Scope(GLOBAL, f"{cl.verb} {whole.group(0)}", c)
        q = WHOLE_QUALITY.match(rest)
        if kind == "replace" and q and q.group(0).endswith(PLACES) and not PART_OF.match(rest[q.end():].strip()):
            return Scope(BACKGROUND, q.group(0), c)
        return Scope(LOCAL)
    return Scope(LOCAL)


def request_scope(*texts: str | None) -> Scope:
    """The scope of a request (any of `texts`: the user's words, the instruction sent to the editor):
    GLOBAL when a clause of any is global, else BACKGROUND when one asks for a new background, else
    LOCAL."""
    found = Scope(LOCAL)
    for t in texts:
        for cl in clauses(t):
            s = clause_scope(cl)
            if s.kind == GLOBAL:
                return s
            if s.kind == BACKGROUND and found.kind == LOCAL:
                found = s
    return found


def global_request(*texts: str | None) -> str:
    """The words by which a request is global ('' when it is not): the keyword rule."""
    s = request_scope(*texts)
    return s.words if s.kind == GLOBAL else ""


_INNER_ADD = re.compile(r"\b(wear|wearing|hold|holding|carry|carrying|put on|have|has)\b\s+(.*)$")
_DETERMINER = re.compile(r"^(the|this|that|these|those|his|her|its|their|my|your|our)\b")


def _object_of(cl: Clause) -> str:
    """The object phrase the clause's verb acts on ('' when there is none)."""
    rest = re.sub(r"\([^)]*\)?", "", cl.rest).strip()       # an aside in brackets names nothing to change
    inner = _INNER_ADD.search(rest) if cl.kind in ("set", "give", "") else None
    if inner:       # "make the girl wear the necklace", "a beaver wearing the hat": what she wears changes
        rest = inner.group(2)
    elif not cl.verb:
        return ""
    if cl.kind == "add":
        rest = re.sub(r"^(on|in)\s+", "", rest)           # "put on sunglasses"
    obj = _OBJECT_ENDS.sub("", " " + rest).strip()
    part = PART_OF.match(rest[len(obj):].strip()) if obj.endswith(PLACES) else None
    if part:        # "tint the background in the bottom right corner pink": that part of the background
        place = rest[len(obj):].strip()
        obj = obj + " " + re.split(r"\s+\b(" + "|".join(_COLOURS) + r")\b", " " + place)[0].strip()
    elif cl.kind in ("set", "give") and not inner and _DETERMINER.match(obj):
        # "make the dog a dalmatian", "make the shirt red", "make the sofa darker": the target ends
        # before its new value
        ends = r"\s+\b(a|an|the|more|less|look|" + "|".join(_COLOURS + _COMPARATIVES) + r")\b"
        head, _, tail = obj.partition(" ")
        obj = (head + " " + re.split(ends, " " + tail)[0].strip()).strip()
    return obj.strip(" '\"")


def edit_objects(request: str | None) -> list[str]:
    """The object phrases a request asks to change, one per clause that changes something
    ("add a hat and a scarf" -> ["a hat", "a scarf"]; "replace the beaver with a fox" -> ["the
    beaver"]; "change 'flux.cpp' to 'edit.cpp'" -> ["flux.cpp"]; a new background ->
    ["the background"]). Empty for a global request and for one whose object it cannot read.
    Preservation clauses name nothing to change."""
    if request_scope(request).kind == GLOBAL:
        return []
    out: list[str] = []
    listing = False         # the clause before named an object: "and <a noun phrase>" names another
    for cl in clauses(request):
        if cl.preserves:
            listing = False
            continue
        if clause_scope(cl).kind == BACKGROUND:
            phrase = "the background"
        elif not cl.verb and listing and cl.after_and and not _INNER_ADD.search(cl.text):
            phrase = _OBJECT_ENDS.sub("", " " + re.sub(r"\([^)]*\)?", "", cl.text)).strip(" '\"")
        else:
            phrase = _object_of(cl)
        listing = bool(phrase)
        if phrase and WHOLE_TARGET.match(phrase) is None and phrase not in out:
            out.append(phrase)
    return out


def places_changed(request: str | None) -> int | None:
    """How many separate places of the picture a local request changes: one per object it adds,
    removes, replaces or changes, two per object it moves, resizes ("make the box half as big") or
    rotates (where it was and where it goes). None when that cannot be read (a global or background request, an object the
    words do not name): then nothing limits the edit region to what the request names."""
    if request_scope(request).kind != LOCAL:
        return None
    objs = edit_objects(request)
    if not objs:
        return None
    moves = sum(1 for cl in clauses(request) if not cl.preserves and (
        (cl.kind in ACTS_ON_AN_OBJECT and cl.kind != "replace") or (cl.kind in ("set", "give") and RESIZED.search(cl.rest))))
    return len(objs) + moves


def object_phrase(request: str | None) -> str | None:
    """The object phrase a request asks to change (its first), or None for a global or style
    request, or when no object can be read (an edit-region node then asks the user for a mask)."""
    objs = edit_objects(request)
    return objs[0] if objs else None
