"""The core's steps stay readable (scripts/dev/function_sizes.py): at most three functions over 80
lines, none over ten parameters (issue 37)."""
from __future__ import annotations

from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _sizes():
    return load_script("scripts/dev/function_sizes.py")


def test_a_long_function_and_a_long_parameter_list_are_found(tmp_path):
    sizes = _sizes()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (pkg / "a.py").write_text(
        f"def long_one():\n{body}\n\n\n"
        "def many(a, b, c, d, e, f, g, h, i, j, *args, k=1, **kw):\n    return a\n\n\n"
        "class C:\n    def method(self, a, b, c, d, e, f, g, h, i, j):\n        return a\n")
    found = {f.name: f for f in sizes.functions(pkg)}
    assert found["long_one"].lines == 86 and found["long_one"].params == 0
    assert found["many"].params == 13            # ten names, *args, k, **kw
    assert found["method"].params == 10          # self not counted: at the limit, not over it
    assert sizes.main(["--package", str(pkg)]) == 1
    assert sizes.main(["--package", str(pkg), "--lines", "100"]) == 1    # `many` is still over


def test_the_core_keeps_its_functions_short_and_their_parameters_few():
    sizes = _sizes()
    found = sizes.functions(ROOT / "respec")
    long = [f"{f.path}:{f.name} ({f.lines} lines)" for f in found if f.lines > sizes.LINES]
    # respec/comfy_io.py mirrors ComfyUI's V3 constructors, keyword for keyword (checked against
    # the real ones by scripts/comfyui/check_in_comfyui.py): their parameter lists are ComfyUI's.
    many = [f"{f.path}:{f.name} ({f.params} parameters)" for f in found
            if f.params > sizes.MAX_PARAMS and not str(f.path).endswith("comfy_io.py")]
    assert len(long) <= sizes.MAX_LONG, long
    assert many == []
