"""OmniGen2's official-pipeline route: a clear error when its code is absent, importing the owner's
clone without sys.path, no workflow value that names code, and how the editor drives the pipeline (the pipeline itself is external
code that cannot be installed here, so a recording stand-in plays it)."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from conftest import core


@pytest.fixture
def no_omnigen2(monkeypatch):
    """No omnigen2 importable, and any omnigen2 modules a test registers are removed afterwards."""
    monkeypatch.delenv("RESPEC_OMNIGEN2_PATH", raising=False)
    before = {k for k in sys.modules if k == "omnigen2" or k.startswith("omnigen2.")}
    assert not before, "a real omnigen2 package is installed; these tests expect it absent"
    yield
    for k in [k for k in sys.modules if k == "omnigen2" or k.startswith("omnigen2.")]:
        del sys.modules[k]


def test_omnigen2_absent_gives_install_instructions(pack, no_omnigen2):
    omnigen2 = core(pack, "editors.omnigen2")
    loader = pack.NODE_CLASS_MAPPINGS["ReSpecOmniGen2Loader"]
    with pytest.raises(omnigen2.OmniGen2NotInstalled) as info:
        loader.execute(model="OmniGen2/OmniGen2", dtype="auto", offload="none", allow_download=False)
    message = str(info.value)
    assert "not installed" in message
    assert "git clone https://github.com/VectorSpaceLab/OmniGen2" in message
    assert "RESPEC_OMNIGEN2_PATH" in message and "Reference Latents (ReSpec)" in message


def test_omnigen2_env_folder_without_the_package_is_named(pack, no_omnigen2, tmp_path, monkeypatch):
    omnigen2 = core(pack, "editors.omnigen2")
    monkeypatch.setenv("RESPEC_OMNIGEN2_PATH", str(tmp_path))
    with pytest.raises(omnigen2.OmniGen2NotInstalled, match=str(tmp_path)):
        omnigen2.import_omnigen2()


def _comfyui_call(node_cls, widget_values: dict):
    """Call a node the way ComfyUI's executor does: only the inputs INPUT_TYPES declares reach it."""
    declared = {k for section in ("required", "optional") for k in node_cls.INPUT_TYPES().get(section, {})}
    return getattr(node_cls, node_cls.FUNCTION)(**{k: v for k, v in widget_values.items() if k in declared})


def _plant_payload(folder, marker):
    """What an attacker uploads through /upload/image: input/x/omnigen2/__init__.py."""
    pkg = folder / "x" / "omnigen2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    return folder / "x"


def test_upload_then_queue_cannot_make_the_omnigen2_loader_run_a_file(pack, no_omnigen2, tmp_path):
    """The attack of issue 12: upload input/x/omnigen2/__init__.py, then queue the loader naming input/x."""
    omnigen2 = core(pack, "editors.omnigen2")
    marker = tmp_path / "payload-ran"
    uploaded = _plant_payload(core(pack, "comfy").input_dir(), marker)
    loader = pack.NODE_CLASS_MAPPINGS["ReSpecOmniGen2Loader"]
    required = loader.INPUT_TYPES()["required"]
    assert all(spec[0] != "STRING" for spec in required.values()), "no free-text input on the loader"
    for value in (str(uploaded), "input/x", str(uploaded / "omnigen2")):
        inputs = {"model": "OmniGen2/OmniGen2", "omnigen2_path": value, "dtype": "auto", "offload": "none",
                  "allow_download": False}
        with pytest.raises(omnigen2.OmniGen2NotInstalled, match="not installed"):
            _comfyui_call(loader, inputs)
    assert not marker.exists() and "omnigen2" not in sys.modules


def test_omnigen2_env_folder_inside_comfyui_input_is_refused(pack, no_omnigen2, tmp_path, monkeypatch):
    omnigen2 = core(pack, "editors.omnigen2")
    marker = tmp_path / "payload-ran"
    monkeypatch.setenv("RESPEC_OMNIGEN2_PATH", str(_plant_payload(core(pack, "comfy").input_dir(), marker)))
    with pytest.raises(omnigen2.OmniGen2NotInstalled, match="input folder"):
        omnigen2.import_omnigen2()
    assert not marker.exists()


def test_omnigen2_clone_is_imported_from_its_folder_without_sys_path(pack, no_omnigen2, tmp_path, monkeypatch):
    # the clone's layout: omnigen2/pipelines/omnigen2/pipeline_omnigen2.py etc., absolute imports inside
    files = {
        "omnigen2/__init__.py": "",
        "omnigen2/pipelines/__init__.py": "",
        "omnigen2/pipelines/omnigen2/__init__.py": "",
        "omnigen2/pipelines/omnigen2/pipeline_omnigen2.py":
            "from omnigen2.models.transformers.transformer_omnigen2 import OmniGen2Transformer2DModel\n"
            "class OmniGen2Pipeline:\n    transformer_class = OmniGen2Transformer2DModel\n",
        "omnigen2/models/__init__.py": "",
        "omnigen2/models/transformers/__init__.py": "",
        "omnigen2/models/transformers/transformer_omnigen2.py": "class OmniGen2Transformer2DModel:\n    pass\n",
        "omnigen2/schedulers/__init__.py": "",
        "omnigen2/schedulers/scheduling_flow_match_euler_discrete.py": "class FlowMatchEulerDiscreteScheduler:\n    pass\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    path_before = list(sys.path)
    monkeypatch.setenv("RESPEC_OMNIGEN2_PATH", str(tmp_path))
    classes = core(pack, "editors.omnigen2").import_omnigen2()
    assert sys.path == path_before
    assert classes["pipeline"].transformer_class is classes["transformer"]
    assert classes["scheduler"].__name__ == "FlowMatchEulerDiscreteScheduler"


class RecordingPipeline:
    """Plays OmniGen2's pipeline: records the call, reports steps, returns the first input image
    tinted by the step count (so the output depends on the inputs)."""

    def __init__(self):
        self.calls = []

    def __call__(self, prompt=None, input_images=None, width=None, height=None, num_inference_steps=28,
                 text_guidance_scale=4.0, image_guidance_scale=1.0, cfg_range=(0.0, 1.0), negative_prompt=None,
                 generator=None, max_sequence_length=None, max_pixels=1024 * 1024,
                 max_input_image_side_length=1024, align_res=True, output_type="pil", step_func=None):
        self.calls.append(dict(prompt=prompt, sizes=[im.size for im in input_images], width=width, height=height,
                               steps=num_inference_steps, text=text_guidance_scale, image=image_guidance_scale,
                               align_res=align_res, noise=float(__import__("torch").randn(1, generator=generator))))
        for i in range(num_inference_steps):
            if step_func is not None:
                step_func(i, num_inference_steps)
        out = input_images[0].resize((width, height))
        return type("Out", (), {"images": [out]})()


def test_omnigen2_editor_uses_paper_defaults_explicit_size_and_selector_order(pack):
    omnigen2 = core(pack, "editors.omnigen2")
    pipe = RecordingPipeline()
    editor = omnigen2.OmniGen2Editor(pipe)
    src = np.zeros((96, 96, 3), np.uint8)
    anchor = np.full((72, 88, 3), 200, np.uint8)
    out = editor.edit([src, anchor], "remove the hat, revealing the hair from the first image",
                      output_size=(88, 72), seed=4)
    (call,) = pipe.calls
    assert (call["steps"], call["text"], call["image"]) == (50, 5.0, 2.0)
    assert (call["width"], call["height"], call["align_res"]) == (80, 64, False)
    assert call["sizes"][0] == (64, 64) and call["sizes"][1] == (80, 64)  # restoration source first
    assert out.size == (88, 72)
    assert np.asarray(out).max() == 0  # the first image is what the (stand-in) pipeline edited


def test_omnigen2_editor_interrupt_between_steps(pack):
    comfy = core(pack, "comfy")
    errors = core(pack, "errors")
    pipe = RecordingPipeline()
    editor = core(pack, "editors.omnigen2").OmniGen2Editor(pipe)

    def cancel(name, data):
        if data["step"] == 1:
            comfy.request_interrupt()

    remove = comfy.add_listener(cancel)
    try:
        with pytest.raises(errors.Interrupted):
            editor.edit([np.zeros((64, 64, 3), np.uint8)], "x", output_size=(64, 64), seed=0, steps=5)
    finally:
        remove()
        comfy.clear_interrupt()


def test_omnigen2_same_seed_same_noise(pack):
    pipe = RecordingPipeline()
    editor = core(pack, "editors.omnigen2").OmniGen2Editor(pipe)
    for seed in (3, 3, 4):
        editor.edit([np.zeros((64, 64, 3), np.uint8)], "x", output_size=(64, 64), seed=seed, steps=1)
    noises = [c["noise"] for c in pipe.calls]
    assert noises[0] == noises[1] != noises[2]


@pytest.mark.parametrize("init, expected", [("def broken(:\n", "SyntaxError"),
                                            ("import omnigen2_missing_dependency_xyz\n", "omnigen2_missing_dependency_xyz"),
                                            ("raise RuntimeError('half-installed')\n", "half-installed")])
def test_a_broken_omnigen2_package_gives_the_packs_error_naming_the_folder(pack, no_omnigen2, tmp_path,
                                                                           monkeypatch, init, expected):
    omnigen2 = core(pack, "editors.omnigen2")
    pkg = tmp_path / "OmniGen2" / "omnigen2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    monkeypatch.setenv("RESPEC_OMNIGEN2_PATH", str(tmp_path / "OmniGen2"))
    with pytest.raises(omnigen2.OmniGen2NotInstalled) as info:
        omnigen2.import_omnigen2()
    message = str(info.value)
    assert expected in message and str(pkg) in message and "failed to import" in message
    assert "omnigen2" not in sys.modules
