"""The layout rules of refactor 3 hold on the pack's code (scripts/dev/code_rules.py): a module's
private names stay in it, lasting state has one owner (the analysis cache, the model cache), and a
stored alignment is read in one place. Each rule is first shown to catch a breach."""
from __future__ import annotations

from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent


def _rules():
    return load_script("scripts/dev/code_rules.py")


def _check(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "m.py").write_text(text, encoding="utf-8")
    return _rules().findings([tmp_path], tmp_path)


def test_a_private_import_across_modules_is_found(tmp_path):
    found = _check(tmp_path, "from .other import _helper, public\n")
    assert len(found) == 1 and "_helper" in found[0] and "public" not in found[0]


def test_a_module_level_memo_or_lru_is_found_and_a_functions_own_is_not(tmp_path):
    found = _check(tmp_path, "from functools import lru_cache\nfrom x import LRU\n_C = LRU(8)\n"
                             "@lru_cache(maxsize=4)\ndef f(a):\n    return a\n"
                             "def g():\n    local = LRU(2)\n    return local\n")
    assert sorted(f.split(":")[1] for f in found) == ["3", "5"]


def test_reading_a_stored_alignment_outside_the_change_record_is_found(tmp_path):
    found = _check(tmp_path, "a = info['alignment']\nb = meta.get('alignment')\ninfo['alignment'] = 1\n")
    assert sorted(f.split(":")[1] for f in found) == ["1", "2"]     # the write on line 3 is not a read


def test_the_pack_keeps_the_three_rules():
    assert _rules().findings([ROOT / "respec", ROOT / "nodes"], ROOT) == []
