"""How a request reads (respec/controller/request_language.py): clauses, the verb that governs
each, global / background / local, and the object a request asks to change."""
from __future__ import annotations

import pytest

from respec.controller.request_language import (BACKGROUND, GLOBAL, LOCAL, VERBS, clauses, edit_objects,
                                                global_request, object_phrase, request_scope, verbs_of)

GLOBAL_REQUESTS = [
    "make it night", "change the lighting to golden hour", "Turn the photo into a watercolor painting.",
    "Change image to anime style.", "make it look like winter", "night time", "in the style of Van Gogh",
    "make the image darker", "relight the scene", "give the picture a vintage film look", "add a vintage filter",
    "add fog", "make the lighting warmer", "add a hat and make it night", "Make the photo black and white.",
    "zoom out a little", "remove the sepia tone", "add light rain",
    "transform into a comic book style illustration with bold outlines and vibrant colors",
    "Render the photo in a bright comic-book style.", "Give the whole photo an old sepia look."]

LOCAL_REQUESTS = [
    "add a lamp that lights the whole picture", "add a painting of a sunset on the wall",
    "put a winter hat on the girl", "add a cartoon sticker to the laptop", "make the sofa darker",
    "remove the vintage lamp", "place a black and white photo in the frame", "give the cat a winter coat",
    "move the comic book to the left", "keep the whole picture as it is except the hat",
    "Add pendant with a ruby around this girl's neck.", "place it on the table", "add a lamp in the corner",
    "Tint the background in the bottom right corner pink", "add a light bulb to the ceiling",
    "change 'flux.cpp' to 'edit.cpp'", "Make the dog a dalmatian", "put on sunglasses"]


@pytest.mark.parametrize("request_", GLOBAL_REQUESTS)
def test_lighting_style_and_season_requests_are_global(request_):
    s = request_scope(request_)
    assert s.kind == GLOBAL and s.words and global_request(request_) == s.words


@pytest.mark.parametrize("request_", LOCAL_REQUESTS)
def test_a_global_word_in_passing_does_not_make_a_request_global(request_):
    assert request_scope(request_).kind == LOCAL and global_request(request_) == ""


@pytest.mark.parametrize("request_", [
    "replace the beaver with a fox, keep the same forest river setting and golden hour lighting",
    "replace the beaver with a fox, keep the same watercolor painting style and forest river setting",
    "don't change the lighting, add a hat", "Do not alter the lighting; add a hat", "never relight it, add a hat",
    "add a hat without changing the lighting",
    "add a hat, with the same lighting", "preserve the mood and add a small cup"])
def test_a_preservation_clause_is_not_a_global_edit(request_):
    assert request_scope(request_).kind == LOCAL


def test_a_keep_list_continues_over_and_but_not_over_a_comma():
    cls = clauses("keep the same setting and golden hour lighting")
    assert [c.preserves for c in cls] == [True, True] and cls[1].continues_keep
    assert request_scope("keep the pose, anime style").kind == GLOBAL          # a style asked for after a comma
    assert request_scope("keep the pose and make it night").kind == GLOBAL     # a clause with its own verb


@pytest.mark.parametrize("request_", [
    "change the background to a sunny beach scene", "replace the background with a forest", "put her on a beach",
    "put her in a library", "add under a sunny sky", "remove the background"])
def test_a_new_background_is_neither_global_nor_an_object(request_):
    s = request_scope(request_)
    assert s.kind == BACKGROUND and global_request(request_) == ""
    assert object_phrase(request_) == "the background"


def test_a_part_of_the_background_is_local_and_named_with_its_place():
    r = "Tint the background in the bottom right corner pink"
    assert request_scope(r).kind == LOCAL
    assert object_phrase(r) == "the background in the bottom right corner"


def test_a_style_or_a_new_light_is_global_whatever_it_is_applied_to():
    assert request_scope("turn the person into Japanese anime style and add the text").kind == GLOBAL
    assert request_scope("Change the hair color to white, and add a hard side light coming from the right").kind == GLOBAL
    assert request_scope("turn the hat into a red one").kind == LOCAL
    assert request_scope("add a painting of sunset").kind == LOCAL        # "of": an object's subject


def test_global_wins_over_background_over_local():
    assert request_scope("add a hat", "change the background to a beach").kind == BACKGROUND
    assert request_scope("change the background to a beach", "make it night").kind == GLOBAL
    assert request_scope(None, "", "add a hat").kind == LOCAL


def test_quoted_text_is_one_piece():
    cls = clauses("change 'flux.cpp' to 'edit.cpp'. Then make the sign red")
    assert [c.verb for c in cls] == ["change", "make"] and "'flux.cpp' to 'edit.cpp'" in cls[0].text


@pytest.mark.parametrize("request_, objects", [
    ("add a red hat on the man's head", ["a red hat"]),
    ("replace the beaver with a fox, keep the same forest river setting", ["the beaver"]),
    ("change 'flux.cpp' to 'edit.cpp'", ["flux.cpp"]),
    ("Make the dog a dalmatian", ["the dog"]),
    ("make the shirt red", ["the shirt"]),
    ("make the sofa darker", ["the sofa"]),
    ("remove the tree in the background", ["the tree"]),
    ("move the comic book to the left", ["the comic book"]),
    ("put on sunglasses", ["sunglasses"]),
    ("Make the woman wear the eyeglasses (regular glasses, not sunglasses)", ["the eyeglasses"]),
    ("Make the girl from Image 1 wear the necklace from Image 2 and carry the bag from Image 3 on her left shoulder.",
     ["the necklace", "the bag"]),
    ("a beaver wearing the hat from image 2 and the jacket from image 3", ["the hat", "the jacket"]),
    ("add a hat and a scarf", ["a hat", "a scarf"]),
    ("add a hat without changing the lighting", ["a hat"]),
])
def test_the_object_phrase_a_request_asks_to_change(request_, objects):
    assert edit_objects(request_) == objects and object_phrase(request_) == objects[0]


@pytest.mark.parametrize("request_", ["make it night", "Turn the photo into a watercolor painting.",
                                      "keep everything as it is", "place it on the table", ""])
def test_a_global_request_or_one_without_an_object_names_none(request_):
    assert object_phrase(request_) is None and edit_objects(request_) == []


def test_the_one_verb_table_gives_each_rule_its_verbs():
    assert verbs_of("remove")[:3] == ("remove", "delete", "erase") and "replace" in verbs_of("replace")
    adding = verbs_of("add", "give")
    assert adding[0] == "add" and {"give", "set", "wear", "cover"} <= set(adding)
    assert len({v for v, _ in VERBS}) == len(VERBS)           # every phrase has one class
    assert clauses("don't move the box")[0].kind == "keep"              # a negated verb says what stays
    with pytest.raises(ValueError, match="unknown verb class"):
        verbs_of("teleport")
