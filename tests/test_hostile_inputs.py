"""Hostile photos, scenario files, provenance/reveal arguments and store text: each ends in a clear
InputError (or `error: …` with exit 2 on the command line), never a traceback, a hang or a guess."""
from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from respec.__main__ import main
from respec.errors import InputError
from respec import images

ROOT = Path(__file__).resolve().parent.parent


def _png_header(path: Path, w: int, h: int, bit_depth: int = 1, colour: int = 0) -> Path:
    """A PNG that declares w×h pixels and holds (almost) none: what a decompression bomb's header
    looks like, written in microseconds."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, colour, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
                     + chunk(b"IEND", b""))
    return path


def _scenario(image: str, **over) -> dict:
    s = {"id": "s1", "image": image, "revelation_type": "remove", "occluders": ["box"], "occludee": "patch",
         "reference_turn": 0, "turns": [{"instruction": "Add a big box on the left.", "stage": "O"},
                                        {"instruction": "Remove the box.", "stage": "R"}]}
    s.update(over)
    return s


def _dataset_file(tmp_path: Path, *scenarios, name: str = "set.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"format": "occur-scenarios", "version": 1, "name": "t", "scenarios": list(scenarios)}))
    return p


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- one image opener with a pixel cap ------------------------------------------------------------

def test_a_decompression_bomb_is_refused_with_the_file_name_and_the_limit(tmp_path):
    bomb = _png_header(tmp_path / "bomb.png", 30000, 30000)
    assert bomb.stat().st_size < 1000
    with pytest.raises(InputError, match=r"bomb\.png.*decompression bomb.*40 MP"):
        images.open_image(bomb)


def test_an_image_over_the_pixel_limit_is_refused_before_decoding(tmp_path):
    big = _png_header(tmp_path / "big.png", 12000, 12000, bit_depth=8, colour=2)
    with pytest.raises(InputError, match=r"big\.png is 12000×12000 pixels \(144\.0 MP\), over the limit of 40 MP"):
        images.open_image(big)
    assert images.MAX_IMAGE_PIXELS == 40_000_000


@pytest.mark.skipif(os.name != "posix", reason="FIFOs")
def test_a_fifo_or_a_folder_is_not_opened_as_an_image(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    with pytest.raises(InputError, match="pipe.png is not a regular file"):
        images.open_image(tmp_path / "pipe.png")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(InputError, match="dir.png is not a regular file"):
        images.open_image(tmp_path / "dir.png")
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(InputError, match="text.png is not an image file"):
        images.open_image(tmp_path / "text.png")


def test_a_normal_photo_opens_decoded(tmp_path):
    Image.fromarray(np.full((20, 30, 3), 7, np.uint8)).save(tmp_path / "ok.png")
    im = images.open_image(tmp_path / "ok.png")
    assert im.size == (30, 20) and np.asarray(im)[0, 0, 0] == 7


@pytest.mark.parametrize("w, h, what", [(30000, 30000, "decompression bomb"), (12000, 12000, "over the limit")])
def test_scenario_files_and_photos_use_the_capped_opener(tmp_path, capsys, w, h, what):
    _png_header(tmp_path / "huge.png", w, h, bit_depth=8, colour=2)
    ds = _dataset_file(tmp_path, _scenario("huge.png"))
    rc, _, err = _cli(capsys, "validate", str(ds))
    assert rc == 2 and err.startswith("error: ") and "huge.png" in err and what in err
    photos = tmp_path / "photos"
    photos.mkdir()
    os.replace(tmp_path / "huge.png", photos / "huge.png")
    rc, _, err = _cli(capsys, "scenarios", "generate", "--photos", str(photos), "--count", "1",
                      "--out", str(tmp_path / "gen.json"))
    assert rc == 2 and err.startswith("error: ") and "huge.png" in err and what in err
    assert not list(tmp_path.glob("gen.json*"))


# --- shipped-photo metadata by content, not by name ----------------------------------------------

def test_a_users_photo_named_like_a_shipped_one_gets_none_of_its_metadata(tmp_path):
    from respec.sim.generate import generate_scenarios, photos_in, shipped_photo_name
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)).save(photos / "astronaut.png")
    ref = photos_in(photos)[0]
    assert shipped_photo_name(ref) is None
    data = generate_scenarios([ref], 3, seed=0, base_dir=tmp_path)
    assert "sources" not in data                                    # no NASA credit
    assert all(s["occludee"].startswith("textured region") for s in data["scenarios"])


def test_a_copy_of_a_shipped_photo_under_another_name_is_recognised_by_its_pixels(tmp_path):
    from respec.occur.scenario import SAMPLE_PHOTOS_DIR
    from respec.sim.generate import SHIPPED_OCCLUDEES, generate_scenarios, shipped_photo_name
    copy = tmp_path / "my_holiday.png"
    copy.write_bytes((SAMPLE_PHOTOS_DIR / "astronaut.png").read_bytes())
    assert shipped_photo_name(str(copy)) == "astronaut"
    data = generate_scenarios([str(copy)], 2, seed=0, base_dir=tmp_path)
    assert "NASA" in data["sources"][str(copy)]["credit"]
    assert {s["occludee"] for s in data["scenarios"]} <= {name for name, _ in SHIPPED_OCCLUDEES["astronaut"]}


# --- generate --out -------------------------------------------------------------------------------

def test_generate_out_naming_a_folder_is_a_clear_error_and_leaves_no_tmp(tmp_path, capsys):
    (tmp_path / "set.json").mkdir()
    rc, _, err = _cli(capsys, "scenarios", "generate", "--count", "1", "--out", str(tmp_path / "set.json"))
    assert rc == 2 and err.startswith("error: ") and "is a folder" in err
    rc, _, err = _cli(capsys, "scenarios", "generate", "--count", "1", "--out", str(tmp_path))
    assert rc == 2 and "is a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set.json"]
    assert list((tmp_path / "set.json").iterdir()) == []


def test_write_dataset_refuses_a_folder_and_cleans_its_tmp(tmp_path):
    from respec.sim.generate import write_dataset
    (tmp_path / "x.json").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        write_dataset({"scenarios": []}, tmp_path / "x.json")
    (tmp_path / "y.json.tmp").mkdir()                                # the tmp path cannot be written
    with pytest.raises(InputError, match="could not write"):
        write_dataset({"scenarios": []}, tmp_path / "y.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y.json.tmp"]


# --- validate --------------------------------------------------------------------------------------

@pytest.mark.skipif(not Path("/etc/hostname").is_file(), reason="needs /etc/hostname")
@pytest.mark.parametrize("image", ["/etc/passwd", "../../etc/hostname", "/dev/null"])
def test_validate_refuses_a_scenario_image_that_is_no_image(tmp_path, capsys, image):
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    if image == "../../etc/hostname":     # climbs from the file's folder to the real /etc/hostname
        image = os.path.relpath("/etc/hostname", sub)
    ds = _dataset_file(sub, _scenario(image))
    rc, out, err = _cli(capsys, "validate", str(ds))
    assert rc == 2 and err.startswith("error: ") and "field 'image'" in err and "valid scenarios" not in out


def test_validate_confines_images_to_images_root_as_the_bench_node_does(tmp_path, capsys):
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "outside.png")
    inside = tmp_path / "data"
    inside.mkdir()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(inside / "ok.png")
    ds = _dataset_file(inside, _scenario("../outside.png"), _scenario("ok.png", id="s2"))
    rc, _, err = _cli(capsys, "validate", str(ds), "--images-root", str(inside))
    assert rc == 2 and "outside" in err and "'s1'" in err
    (inside / "link.png").symlink_to(tmp_path / "outside.png")
    ds = _dataset_file(inside, _scenario("link.png"))
    rc, _, err = _cli(capsys, "validate", str(ds), "--images-root", str(inside))
    assert rc == 2 and "outside" in err
    ds = _dataset_file(inside, _scenario("ok.png"))
    rc, out, _ = _cli(capsys, "validate", str(ds), "--images-root", str(inside))
    assert rc == 0 and "1 valid scenarios" in out


def test_validate_in_the_datasets_folder_uses_the_bench_nodes_rule(tmp_path, capsys, monkeypatch):
    from respec import paths
    datasets = tmp_path / "input" / "respec_datasets"
    datasets.mkdir(parents=True)
    monkeypatch.setattr(paths, "datasets_dir", lambda: datasets)
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "outside.png")
    ds = _dataset_file(datasets, _scenario(str(tmp_path / "outside.png")))
    rc, _, err = _cli(capsys, "validate", str(ds))
    assert rc == 2 and "outside" in err


def test_validate_survives_deep_nesting_and_invalid_utf8(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "occur-scenarios", "scenarios": ' + "[" * 100_000 + "]" * 100_000 + "}")
    rc, _, err = _cli(capsys, "validate", str(deep))
    assert rc == 2 and err.startswith("error: ") and "nested too deeply" in err
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"format": "occur-scenarios", "name": "\xff\xfe"}')
    rc, _, err = _cli(capsys, "validate", str(bad))
    assert rc == 2 and err.startswith("error: ") and "UTF-8" in err


def test_validate_truncates_what_it_echoes(tmp_path, capsys):
    huge = "x" * 1_000_000
    ds = _dataset_file(tmp_path, _scenario("skimage:astronaut", id=huge, occluders=[huge[:-1] + "y"]),
                       *[_scenario(huge[:i], id=f"bad{i}") for i in range(1, 80)])
    rc, _, err = _cli(capsys, "validate", str(ds))
    assert rc == 2 and err.startswith("error: ")
    assert len(err) < 60_000 and "characters)" in err and "more problem(s)" in err
    assert "x" * 1000 not in err


def test_validate_clips_a_valid_files_long_name(tmp_path, capsys):
    p = tmp_path / "set.json"
    p.write_text(json.dumps({"format": "occur-scenarios", "name": "n" * 100_000,
                             "scenarios": [_scenario("skimage:astronaut")]}))
    rc, out, _ = _cli(capsys, "validate", str(p))
    assert rc == 0 and len(out) < 5000


# --- provenance and reveal inputs -----------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_change_of_refuses_non_finite_pixels(bad):
    from respec.pixels.change_mask import change_of
    a = np.full((32, 32, 3), 0.5, np.float32)
    b = a.copy()
    b[3, 4, 1] = bad
    with pytest.raises(InputError, match=r"change_of's second image holds 1 NaN or infinite value"):
        change_of(a, b)
    with pytest.raises(InputError, match=r"change_of's first image"):
        change_of(b, a)


def test_change_of_records_are_strict_json_on_finite_input():
    from respec.pixels.change_mask import change_of
    rng = np.random.default_rng(0)
    a = rng.random((32, 32, 3), dtype=np.float32)
    res = change_of(a, a)
    json.dumps(res.info(), allow_nan=False)
    assert np.isfinite(res.threshold)


def _small_history():
    from respec.history import History
    img = np.full((32, 32, 3), 100, np.uint8)
    return History.start(img, "s").append(img, "add a box")


@pytest.mark.parametrize("bad", ["abc", "1.5", [1], None, True, float("nan"), "9" * 40])
def test_reveal_for_names_a_bad_covering_turn(bad):
    from respec.pixels.reveal import reveal_for
    h = _small_history()
    with pytest.raises(InputError, match=r"reveal_for's covering_turn must be an image id"):
        reveal_for(h, np.full((32, 32, 3), 100, np.uint8), bad)


def test_reveal_for_still_takes_an_int_or_its_text():
    from respec.pixels.reveal import reveal_for
    h = _small_history()
    img = np.full((32, 32, 3), 100, np.uint8)
    assert reveal_for(h, img, "1").record()["source_id"] == reveal_for(h, img, 1).record()["source_id"] == 0


# --- the store's text -----------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["instruction", "sent", "meta value", "meta key", "create meta key"])
def test_a_lone_surrogate_is_refused_with_an_input_error_and_nothing_is_stored(tmp_path, where):
    from respec.store import SessionStore
    store = SessionStore(tmp_path / "store")
    img = np.zeros((6, 5, 3), np.uint8)
    if where == "create meta key":
        with pytest.raises(InputError, match=r"meta .*lone surrogate \(U\+D800\)"):
            store.create("s1", img, meta={"\ud800 x": 1})
        assert not store.exists("s1")
        return
    store.create("s1", img)
    kwargs = {"instruction": "ok", "sent_instruction": None, "meta": None}
    if where == "instruction":
        kwargs["instruction"] = "\ud800 x"
    elif where == "sent":
        kwargs["sent_instruction"] = "x \udfff"
    elif where == "meta value":
        kwargs["meta"] = {"note": ["\ud800"]}
    else:
        kwargs["meta"] = {"\ud800": 1}
    pngs = sorted((tmp_path / "store").rglob("*.png"))
    with pytest.raises(InputError, match=r"lone surrogate \(U\+D[8F]"):
        store.append("s1", np.ones((6, 5, 3), np.uint8), **kwargs)
    assert len(store.load("s1")) == 1
    assert sorted((tmp_path / "store").rglob("*.png")) == pngs          # no image written either


def test_a_real_emoji_and_other_text_is_stored_as_is(tmp_path):
    from respec.store import SessionStore
    store = SessionStore(tmp_path / "store")
    store.create("s1", np.zeros((6, 5, 3), np.uint8))
    h = store.append("s1", np.ones((6, 5, 3), np.uint8), "add a \U0001f600 sticker", meta={"\u043a\u043b\u044e\u0447": "\u0437\u043d\u0430\u0447\u0435\u043d\u0438\u0435"})
    again = SessionStore(tmp_path / "store").load("s1")
    assert again.turns[1].instruction == h.turns[1].instruction == "add a \U0001f600 sticker"
    assert again.turns[1].meta == {"\u043a\u043b\u044e\u0447": "\u0437\u043d\u0430\u0447\u0435\u043d\u0438\u0435"}


def test_a_nul_in_the_store_root_is_an_input_error(tmp_path):
    from respec.store import SessionStore, open_store
    with pytest.raises(InputError, match="NUL"):
        SessionStore(str(tmp_path / "a\x00b"))
    with pytest.raises(InputError, match="NUL"):
        open_store(str(tmp_path / "a\x00b"))
    with pytest.raises(InputError, match="cannot use in a path"):
        SessionStore(str(tmp_path / "a\ud800b"))
