"""`postprocess.decoder` with `kind: python`: a user's decoder function, for what no built-in kind covers.

`entry` is `package.module:function` (imported with importlib) or the name of an entry point in the
`sdk.decoders` group (an installed package's `[project.entry-points."sdk.decoders"]`). Its form is
checked here, at load; whether it imports and is callable is checked when the pipeline opens
(`sdk.postprocess.plugin`). The contract: docs/guides/decoder-plugins.md.
"""


import math
import re
from typing import Annotated, Literal, Union

from pydantic import Field, StrictBool, field_validator

from sdk.spec.bounds import Flag, Frozen, Int, Real, bounds_error, shown

ENTRY_POINT_GROUP = "sdk.decoders"
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
MODULE_ENTRY = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
ENTRY_POINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ENTRY_HINT = (
    "write `entry: package.module:function` (the module importable on the device, or under decoder.path), "
    f"or the name of an entry point of the {ENTRY_POINT_GROUP!r} group"
)
MAX_OPTION_TEXT = 4096
MAX_OPTION_NUMBER = 1e15
OptionValue = Union[  # noqa: UP007  (in this order: a YAML string stays a string, an integer an integer)
    StrictBool,
    Annotated[str, Field(max_length=MAX_OPTION_TEXT)],
    Int(-(10**15), 10**15, "an integer option, handed to the plug-in as it is"),
    Real("a number option, handed to the plug-in as it is", ge=-1e15, le=1e15),
]


class PythonDecoder(Frozen):
    kind: Literal["python"]
    entry: str
    # A folder relative to the pipeline file put first on sys.path before `entry` is imported; it travels with the release.
    path: str | None = None
    # Passed unchanged as the function's third argument (a read-only mapping).
    options: Annotated[dict[Annotated[str, Field(max_length=128)], OptionValue], Field(max_length=64)] = Field(default_factory=dict)
    # The SDK's per-class NMS on what the function returns; false when the function suppresses itself.
    nms: Flag = True

    @field_validator("entry")
    @classmethod
    def _entry_form(cls, entry: str) -> str:
        if MODULE_ENTRY.match(entry) or (":" not in entry and ENTRY_POINT_NAME.match(entry)):
            return entry
        raise bounds_error(
            f"{shown(entry)} is neither `package.module:function` nor an entry point name; "
            f"allowed: dotted Python names joined by one ':' (e.g. mydecoders.heads:decode), or a name of the {ENTRY_POINT_GROUP!r} group",
            hint=ENTRY_HINT,
        )

    @field_validator("path")
    @classmethod
    def _relative_folder(cls, path: str | None) -> str | None:
        if path is not None and (not path or path.startswith("/") or "\x00" in path or ".." in path.replace("\\", "/").split("/")):
            raise bounds_error(
                f"{shown(path)} is not a folder inside the pipeline's folder; allowed: a relative path without '..'",
                hint="put the plug-in's module beside the pipeline file (e.g. path: plugins) so that it travels with the release",
            )
        return path

    @field_validator("options")
    @classmethod
    def _finite(cls, options: dict) -> dict:
        for key, value in options.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and abs(value) <= MAX_OPTION_NUMBER):
                raise bounds_error(
                    f"options.{key}: {shown(value)} is out of range; allowed: a number from -1e15 to 1e15, a string or a boolean",
                    hint="options are handed to the plug-in as they are written",
                )
        return options


__all__ = ["ENTRY_POINT_GROUP", "MODULE_ENTRY", "PythonDecoder"]
