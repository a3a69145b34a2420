"""`python -m respec merge` on hostile folders: every case ends in `error: …` (exit 2) with nothing
written outside --into, no half-merged --into, no symlink followed and no hang."""
from __future__ import annotations

import json
import re
import os
import signal
from pathlib import Path

import pytest

from respec.__main__ import main
from respec.bench.results import ResultsFile
from respec.bench.shards import merge_results
from respec.errors import InputError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symlinks and FIFOs")


def _row(scenario: str, **extra) -> dict:
    return {"dataset": "d", "scenario_id": scenario, "config": "baseline", "editor": "flux2", "S_TC": 0.5,
            "seconds": {"total": 1.0}, **extra}


def _source(tmp_path: Path, name: str = "src", rows: list[dict] | None = None) -> Path:
    folder = tmp_path / name
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "I0.png").write_bytes(b"png")
    out = ResultsFile(folder / "results.jsonl")
    for r in rows if rows is not None else [_row("s1", images=["images/I0.png"])]:
        out.append(r)
    (folder / "run.json").write_text(json.dumps({"identity": {"seed": 0}, "settings": {"shard": "1/2"}}))
    return folder


def _write_rows(folder: Path, rows: list) -> None:
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _snapshot(root: Path, skip: Path) -> dict:
    """Every path under `root` but the merge target, with its content (links as their target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p == skip or skip in p.parents:
                continue
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = ("file", p.read_bytes())
            else:
                out[str(p)] = ("other", None)
    return out


def _refused(tmp_path: Path, capsys, sources: list[Path], into: Path, match: str) -> None:
    """merge exits 2 with `error: …` matching `match`, in under 20 s, writes nothing but (at most)
    leaves --into as it was, and leaves no temporary folder."""
    before = _snapshot(tmp_path, into)
    into_before = _snapshot(into, Path("/nonexistent")) if into.is_dir() and not into.is_symlink() else None
    into_existed = os.path.lexists(into)

    def _hang(signum, frame):
        raise TimeoutError("merge hung")
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)
    try:
        rc = main(["merge", *map(str, sources), "--into", str(into)])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(match, err), err
    assert _snapshot(tmp_path, into) == before                      # nothing written anywhere else
    assert os.path.lexists(into) == into_existed
    if into_before is not None:
        assert _snapshot(into, Path("/nonexistent")) == into_before
    assert not into.parent.exists() or not [p for p in into.parent.iterdir() if ".merging" in p.name]


# --- paths in a row's `images` ------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["../payload.txt", "images/../../payload.txt", "/tmp/payload.txt",
                                 "..\\payload.txt", "", "images/\x00x.png"])
def test_an_image_path_outside_the_source_is_refused(tmp_path, capsys, rel):
    src = _source(tmp_path)
    (tmp_path / "payload.txt").write_text("outside")
    _write_rows(src, [_row("s1", images=[rel])])
    _refused(tmp_path, capsys, [src], tmp_path / "out" / "all", r"images|image path")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("payload.txt"))


@pytest.mark.parametrize("images", [5, "images/I0.png", [5], [["images/I0.png"]], {"a": 1}])
def test_images_that_are_not_a_list_of_paths_are_refused(tmp_path, capsys, images):
    src = _source(tmp_path)
    _write_rows(src, [_row("s1", images=images)])
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"images")


# --- the target ---------------------------------------------------------------------------------

@pytest.mark.parametrize("planted", ["images", "results.jsonl", "errors.jsonl", "run.json.tmp", "run.json"])
def test_symlinks_planted_in_an_existing_target_are_not_followed(tmp_path, capsys, planted):
    src = _source(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    into = tmp_path / "all"
    into.mkdir()
    (into / planted).symlink_to(victim if planted == "images" else victim / "keep.txt")
    _refused(tmp_path, capsys, [src], into, r"not empty|symbolic link")
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "mine"


def test_a_target_that_is_a_file_or_a_link_is_refused(tmp_path, capsys):
    src = _source(tmp_path)
    (tmp_path / "afile").write_text("x")
    _refused(tmp_path, capsys, [src], tmp_path / "afile", r"not a folder")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    _refused(tmp_path, capsys, [src], tmp_path / "dangling", r"symbolic link")
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "dirlink").symlink_to(tmp_path / "elsewhere")
    _refused(tmp_path, capsys, [src], tmp_path / "dirlink", r"symbolic link")
    assert list((tmp_path / "elsewhere").iterdir()) == []


# --- symlinks and special files in a source -----------------------------------------------------

def test_a_symlinked_image_in_a_source_is_not_copied(tmp_path, capsys):
    src = _source(tmp_path)
    (tmp_path / "secret.txt").write_text("secret")
    (src / "images" / "I0.png").unlink()
    (src / "images" / "I0.png").symlink_to(tmp_path / "secret.txt")
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"symbolic link")


def test_a_symlinked_images_folder_in_a_source_is_not_followed(tmp_path, capsys):
    src = _source(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "I0.png").write_text("secret")
    (src / "images" / "I0.png").unlink()
    (src / "images").rmdir()
    (src / "images").symlink_to(outside)
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"symbolic link")


@pytest.mark.parametrize("name", ["results.jsonl", "errors.jsonl", "run.json"])
def test_a_symlinked_results_file_in_a_source_is_not_read(tmp_path, capsys, name):
    src = _source(tmp_path)
    outside = tmp_path / "outside.jsonl"
    os.replace(src / name, outside) if (src / name).exists() else outside.write_text("")
    (src / name).symlink_to(outside)
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"symbolic link")


@pytest.mark.parametrize("name", ["results.jsonl", "errors.jsonl", "run.json", "images/I0.png"])
def test_a_fifo_in_a_source_is_refused_without_hanging(tmp_path, capsys, name):
    src = _source(tmp_path)
    (src / name).unlink(missing_ok=True)
    os.mkfifo(src / name)
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"not a regular file")


@pytest.mark.parametrize("name", ["results.jsonl", "errors.jsonl", "run.json"])
def test_a_results_file_that_is_a_folder_is_refused(tmp_path, capsys, name):
    src = _source(tmp_path)
    if (src / name).exists():
        (src / name).unlink()
    (src / name).mkdir()
    if name == "results.jsonl":
        ResultsFile(src / "errors.jsonl").append({"key": "d|s9|baseline|flux2|1", "error": "oom"})
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"not a regular file")


# --- encodings and types ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["results.jsonl", "errors.jsonl", "run.json"])
def test_invalid_utf8_in_any_file_is_refused(tmp_path, capsys, name):
    src = _source(tmp_path)
    good = (src / name).read_bytes() if (src / name).exists() else b""
    (src / name).write_bytes(good + b'{"key": "\xff\xfe"}\n')
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"UTF-8")


@pytest.mark.parametrize("manifest, match", [
    ([], r"run.json.*object"),
    ({"identity": {"seed": 0}, "settings": ["a"]}, r"settings"),
    ({"identity": ["seed"], "settings": {}}, r"identity"),
    ("just a string", r"run.json.*object"),
])
def test_a_run_json_of_the_wrong_shape_is_refused_before_anything_is_written(tmp_path, capsys, manifest, match):
    src = _source(tmp_path)
    (src / "run.json").write_text(json.dumps(manifest))
    _refused(tmp_path, capsys, [src], tmp_path / "all", match)


def test_a_damaged_run_json_is_refused(tmp_path, capsys):
    src = _source(tmp_path)
    (src / "run.json").write_text("{not json")
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"run.json.*damaged")


@pytest.mark.parametrize("key", [["a", "b"], {"a": 1}, 7])
def test_a_key_that_is_not_a_string_is_refused(tmp_path, capsys, key):
    src = _source(tmp_path)
    _write_rows(src, [_row("s1", key=key)])
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"key")


def test_a_key_that_is_not_a_string_in_errors_is_refused(tmp_path, capsys):
    src = _source(tmp_path)
    (src / "errors.jsonl").write_text(json.dumps({"key": ["x"], "error": "oom"}) + "\n")
    _refused(tmp_path, capsys, [src], tmp_path / "all", r"key")


def test_deeply_nested_lines_do_not_crash(tmp_path, capsys):
    src = _source(tmp_path)
    with open(src / "results.jsonl", "a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["merge", str(src), "--into", str(tmp_path / "all")]) == 0
    assert len(ResultsFile(tmp_path / "all" / "results.jsonl").rows()) == 1


# --- the result is built aside and renamed into place --------------------------------------------

def test_the_merge_is_built_aside_and_renamed_into_an_empty_target(tmp_path):
    src = _source(tmp_path)
    into = tmp_path / "all"
    into.mkdir()                                   # an existing empty folder is fine
    summary = merge_results([src], into)
    assert summary.rows == 1 and not into.is_symlink()
    assert (into / "images" / "I0.png").read_bytes() == b"png"
    manifest = json.loads((into / "run.json").read_text())
    assert manifest["merged_from"] == [str(src)] and "shard" not in manifest["settings"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all", "src"]   # no temporary folder left
    with pytest.raises(InputError, match="already has rows"):
        merge_results([src], into)


def test_a_missing_image_is_skipped_as_before(tmp_path):
    src = _source(tmp_path)
    _write_rows(src, [_row("s1", images=["images/I0.png", "images/gone.png"])])
    merge_results([src], tmp_path / "all")
    assert sorted(p.name for p in (tmp_path / "all" / "images").iterdir()) == ["I0.png"]
