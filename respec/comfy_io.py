"""A stand-in for ComfyUI's V3 node schema (`comfy_api.latest.io`), for the pack outside ComfyUI.

The nodes declare themselves with `io` from `respec.comfy.io`: ComfyUI's own module inside a
server (0.8.0 and later), this one in the tests, the CLI and the workflow builder. It has the part
of ComfyUI's surface the pack uses, with the same names, keyword parameters and V1 listing
(`GET_NODE_INFO_V1`, `INPUT_TYPES`, `RETURN_TYPES`...), so a node is read the same way in both
worlds. `scripts/comfyui/check_in_comfyui.py` compares this module's listing of every V3 node with
the listing a real server gives (`--object-info-baseline`) and its parameters with the real
module's, so the stand-in cannot drift from ComfyUI.

Only keyword arguments: ComfyUI's positional orders differ between classes and versions.
"""
from __future__ import annotations

import asyncio
import dataclasses
from enum import Enum
from typing import Any


def _pruned(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


class Hidden(str, Enum):
    """Values ComfyUI gives a node without a socket; read as `cls.hidden.<name>` in a node."""
    unique_id = "UNIQUE_ID"
    prompt = "PROMPT"
    extra_pnginfo = "EXTRA_PNGINFO"
    dynprompt = "DYNPROMPT"


class HiddenHolder:
    """`cls.hidden` of a node: the hidden values of the call (None outside ComfyUI)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __getattr__(self, name):
        return None

    @classmethod
    def from_dict(cls, d: dict | None) -> "HiddenHolder":
        return cls(**{h.name: (d or {}).get(h) for h in Hidden})


class Input:
    """A socket input; `extra_dict` keys reach the listing as they are."""

    def __init__(self, id: str, display_name: str | None = None, optional: bool = False,
                 tooltip: str | None = None, lazy: bool | None = None, extra_dict: dict | None = None,
                 raw_link: bool | None = None):
        self.id, self.display_name, self.optional = id, display_name, optional
        self.tooltip, self.lazy, self.extra_dict, self.raw_link = tooltip, lazy, extra_dict, raw_link

    def get_io_type(self):
        return self.kind.io_type

    def as_dict(self) -> dict:
        return _pruned({"display_name": self.display_name, "tooltip": self.tooltip, "lazy": self.lazy,
                        "rawLink": self.raw_link} | _pruned(self.extra_dict or {}))


class WidgetInput(Input):
    def __init__(self, id: str, display_name=None, optional=False, tooltip=None, lazy=None, default=None,
                 socketless=None, force_input=None, extra_dict=None, raw_link=None):
        super().__init__(id, display_name, optional, tooltip, lazy, extra_dict, raw_link)
        self.default, self.socketless, self.force_input = default, socketless, force_input

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned({"default": self.default, "socketless": self.socketless,
                                            "forceInput": self.force_input})


class Output:
    def __init__(self, id: str | None = None, display_name: str | None = None, tooltip: str | None = None,
                 is_output_list: bool = False):
        self.id, self.display_name, self.tooltip, self.is_output_list = id, display_name or id, tooltip, is_output_list


def _socket(io_type: str, input_cls=Input, output_cls=Output):
    """A socket type: a class with its own Input and Output classes that know it."""
    kind = type(io_type, (), {"io_type": io_type})
    kind.Input = type("Input", (input_cls,), {"kind": kind})
    kind.Output = type("Output", (output_cls,), {"kind": kind})
    return kind


def Custom(io_type: str):
    """A custom socket type such as RESPEC_HISTORY."""
    return _socket(io_type)


class _Int(WidgetInput):
    def __init__(self, id: str, display_name=None, optional=False, tooltip=None, lazy=None, default=None,
                 min=None, max=None, step=None, control_after_generate=None, display_mode=None,
                 socketless=None, force_input=None, extra_dict=None, raw_link=None):
        super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, force_input,
                         extra_dict, raw_link)
        self.numbers = {"min": min, "max": max, "step": step, "control_after_generate": control_after_generate,
                        "display": display_mode}

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned(self.numbers)


class _Float(WidgetInput):
    def __init__(self, id: str, display_name=None, optional=False, tooltip=None, lazy=None, default=None,
                 min=None, max=None, step=None, round=None, display_mode=None, socketless=None,
                 force_input=None, extra_dict=None, raw_link=None):
        super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, force_input,
                         extra_dict, raw_link)
        self.numbers = {"min": min, "max": max, "step": step, "round": round, "display": display_mode}

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned(self.numbers)


class _String(WidgetInput):
    def __init__(self, id: str, display_name=None, optional=False, tooltip=None, lazy=None, multiline=False,
                 placeholder=None, default=None, dynamic_prompts=None, socketless=None, force_input=None,
                 extra_dict=None, raw_link=None):
        super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, force_input,
                         extra_dict, raw_link)
        self.text = {"multiline": multiline, "placeholder": placeholder, "dynamicPrompts": dynamic_prompts}

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned(self.text)


class _Boolean(WidgetInput):
    def __init__(self, id: str, display_name=None, optional=False, tooltip=None, lazy=None, default=None,
                 label_on=None, label_off=None, socketless=None, force_input=None, extra_dict=None,
                 raw_link=None):
        super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, force_input,
                         extra_dict, raw_link)
        self.labels = {"label_on": label_on, "label_off": label_off}

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned(self.labels)


class _Combo(WidgetInput):
    # ComfyUI's Combo.Input takes no force_input (a linked drop-down: extra_dict={"forceInput": True}).
    def __init__(self, id: str, options=None, display_name=None, optional=False, tooltip=None, lazy=None,
                 default=None, control_after_generate=None, upload=None, image_folder=None, remote=None,
                 socketless=None, extra_dict=None, raw_link=None):
        super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, extra_dict,
                         raw_link)
        self.options = list(options) if options is not None else None
        self.control_after_generate = control_after_generate

    def as_dict(self) -> dict:
        return super().as_dict() | _pruned({"multiselect": False, "options": self.options,
                                            "control_after_generate": self.control_after_generate})


Image = _socket("IMAGE")
Mask = _socket("MASK")
Latent = _socket("LATENT")
Conditioning = _socket("CONDITIONING")
Vae = _socket("VAE")
AnyType = _socket("*")
Int = _socket("INT", _Int)
Float = _socket("FLOAT", _Float)
String = _socket("STRING", _String)
Boolean = _socket("BOOLEAN", _Boolean)
Combo = _socket("COMBO", _Combo)


@dataclasses.dataclass
class Schema:
    node_id: str
    display_name: str | None = None
    category: str = "sd"
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    hidden: list = dataclasses.field(default_factory=list)
    description: str = ""
    search_aliases: list = dataclasses.field(default_factory=list)
    is_input_list: bool = False
    is_output_node: bool = False
    not_idempotent: bool = False

    def finalize(self) -> "Schema":
        # As ComfyUI does: an output node is given the prompt and its PNG info.
        if self.is_output_node:
            self.hidden = list(self.hidden) + [h for h in (Hidden.prompt, Hidden.extra_pnginfo) if h not in self.hidden]
        for i, o in enumerate(self.outputs):
            if o.id is None:
                o.id = f"_{i}_{o.kind.io_type}_"
        ids = [i.id for i in self.inputs]
        if len(ids) != len(set(ids)) or len({o.id for o in self.outputs}) != len(self.outputs):
            raise ValueError(f"{self.node_id}: input and output ids must be unique")
        return self

    def v1_inputs(self) -> dict:
        """The V1 `INPUT_TYPES()` dict: required / optional / hidden."""
        out: dict = {"required": {}}
        for i in self.inputs:
            out.setdefault("optional" if i.optional else "required", {})[i.id] = (i.get_io_type(), i.as_dict())
        for h in self.hidden:
            out.setdefault("hidden", {})[h.name] = (h.value,)
        return out


class NodeOutput:
    """What `execute` returns: the outputs in order, and what the UI shows (`ui`)."""

    def __init__(self, *args, ui: dict | None = None):
        self.args, self.ui = args, ui

    @property
    def result(self) -> tuple:
        return self.args


class _ClassProperty:
    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, cls):
        return self.fn(cls)


class ComfyNode:
    """Base of a node: `define_schema` and `execute` classmethods; optional `validate_inputs`,
    `fingerprint_inputs` and `check_lazy_status` classmethods."""

    hidden = HiddenHolder()
    RELATIVE_PYTHON_MODULE = None

    @classmethod
    def define_schema(cls) -> Schema:
        raise NotImplementedError

    @classmethod
    def GET_SCHEMA(cls) -> Schema:
        return cls.define_schema().finalize()

    FUNCTION = "EXECUTE_NORMALIZED"
    CATEGORY = _ClassProperty(lambda cls: cls.GET_SCHEMA().category)
    DESCRIPTION = _ClassProperty(lambda cls: cls.GET_SCHEMA().description)
    OUTPUT_NODE = _ClassProperty(lambda cls: cls.GET_SCHEMA().is_output_node)
    RETURN_TYPES = _ClassProperty(lambda cls: tuple(o.kind.io_type for o in cls.GET_SCHEMA().outputs))
    RETURN_NAMES = _ClassProperty(lambda cls: tuple(o.display_name or o.kind.io_type for o in cls.GET_SCHEMA().outputs))
    OUTPUT_TOOLTIPS = _ClassProperty(lambda cls: tuple(o.tooltip or None for o in cls.GET_SCHEMA().outputs))
    OUTPUT_IS_LIST = _ClassProperty(lambda cls: tuple(o.is_output_list for o in cls.GET_SCHEMA().outputs))

    @classmethod
    def PREPARE_CLASS_CLONE(cls, v3_data: dict | None) -> type:
        """The class for one call, as ComfyUI makes it: a subclass whose `hidden` holds the call's
        hidden values ({"hidden_inputs": {Hidden.unique_id: "7"}})."""
        return type(f"{cls.__name__}Clone", (cls,), {
            "hidden": HiddenHolder.from_dict((v3_data or {}).get("hidden_inputs"))})

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return cls.GET_SCHEMA().v1_inputs()

    @classmethod
    def EXECUTE_NORMALIZED(cls, *args, **kwargs) -> NodeOutput:
        out = cls.execute(*args, **kwargs)
        if asyncio.iscoroutine(out):
            out = asyncio.run(out)
        if isinstance(out, NodeOutput):
            return out
        if isinstance(out, dict):
            return NodeOutput(*out.get("result", ()), ui=out.get("ui"))
        return NodeOutput(*(out or ()))

    @classmethod
    def GET_NODE_INFO_V1(cls) -> dict[str, Any]:
        """The node's /object_info entry as ComfyUI 0.24 lists a V3 node (the keys the pack's
        listing compares: ids, inputs, outputs, defaults, texts)."""
        s = cls.GET_SCHEMA()
        inputs = s.v1_inputs()
        outs = s.outputs
        return {"input": inputs, "input_order": {k: list(v) for k, v in inputs.items()},
                "is_input_list": s.is_input_list, "output": [o.kind.io_type for o in outs],
                "output_is_list": [o.is_output_list for o in outs],
                "output_name": [o.display_name or o.kind.io_type for o in outs],
                "output_tooltips": [o.tooltip or None for o in outs], "name": s.node_id,
                "display_name": s.display_name, "category": s.category, "description": s.description,
                "output_node": s.is_output_node, "python_module": cls.RELATIVE_PYTHON_MODULE,
                "search_aliases": s.search_aliases or None}


class ComfyExtension:
    """What `comfy_entrypoint()` returns: the node classes, from `get_node_list` (awaited)."""

    async def on_load(self) -> None:
        return None

    async def get_node_list(self) -> list[type[ComfyNode]]:
        raise NotImplementedError
