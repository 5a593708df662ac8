"""`model.inputs`: constant inputs of the model besides the image (an image size, scale factors), bound once.

Each key names a model input; its value is a number or a flat list of numbers, read in C order into the
input's shape (one number fills every element). The type is the model's: a value an integer input cannot hold
exactly is refused when the pipeline opens (sdk.runtime.constants). The one input not named here is the image.
"""


from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from sdk.spec.bounds import Real, bounds_error, shown

MAX_CONSTANT_VALUES = 65_536
CONSTANT_HINT = "give each extra input a number or a flat list of numbers (its element count, in C order), e.g. scale_factor: [1.0, 1.0]"
_Value = Real("a constant input's element", ge=-1e9, le=1e9, hint=CONSTANT_HINT)


def _as_list(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        if not value:
            raise bounds_error("[] holds no value; allowed: a number or a non-empty flat list of numbers", hint=CONSTANT_HINT)
        if any(isinstance(v, (list, tuple, dict)) for v in value):
            raise bounds_error(f"{shown(value)} is nested; allowed: a flat list (the values in C order fill the input's shape)", hint=CONSTANT_HINT)
        return tuple(value)
    if isinstance(value, dict):
        raise bounds_error("a mapping is not a value; allowed: a number or a flat list of numbers", hint=CONSTANT_HINT)
    return (value,)


ConstantValues = Annotated[tuple[_Value, ...], BeforeValidator(_as_list), Field(max_length=MAX_CONSTANT_VALUES)]
ModelInputs = Annotated[dict[Annotated[str, Field(min_length=1, max_length=256)], ConstantValues], Field(max_length=16)]

__all__ = ["CONSTANT_HINT", "ConstantValues", "ModelInputs"]
