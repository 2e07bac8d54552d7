"""Elements: mkc's names for what tensors hold ("bf16", "f16", "f32", "i32", as in mkc_argument),
and how PyTorch and __cuda_array_interface__ spell them.

PyTorch dtypes are recognised by name (str(torch.bfloat16) == "torch.bfloat16"), so that nothing
here imports torch.
"""

ITEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}
ELEMENTS = tuple(ITEM_BYTES)

_ALIASES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "int32": "i32"}
_TORCH_DTYPES = {f"torch.{alias}": element for alias, element in _ALIASES.items()}

# __cuda_array_interface__ typestrs, little-endian. bf16 has none (no NumPy dtype): raw 2-byte
# elements stand for it, and mkc exports it as raw ("|V2").
TYPESTRS = {"bf16": "|V2", "f16": "<f2", "f32": "<f4", "i32": "<i4"}
_ACCEPTED_TYPESTRS = {
    "bf16": {"<i2", "<u2", "<V2", "|V2"},
    "f16": {"<f2"},
    "f32": {"<f4"},
    "i32": {"<i4"},
}


def element_of(dtype):
    """The element `dtype` names: one of ELEMENTS, its long name ("bfloat16"), or a torch dtype.

    Raises ValueError for an element mkc does not have, TypeError for something not a dtype.
    """
    if isinstance(dtype, str):
        name = dtype.lower()
        if name in ITEM_BYTES:
            return name
        if name in _ALIASES:
            return _ALIASES[name]
        raise ValueError(f"dtype {dtype!r} is not an element mkc has: "
                         f"{', '.join(ELEMENTS)} (or {', '.join(_ALIASES)})")
    name = str(dtype)
    if name.startswith("torch."):
        if name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]
        raise ValueError(f"dtype {name} is not an element mkc has: "
                         f"{', '.join(_TORCH_DTYPES)}")
    raise TypeError(f"dtype must be a string such as 'bf16' or a torch dtype, not "
                    f"{type(dtype).__name__}")


def torch_element(dtype):
    """The element of a torch tensor of `dtype`, or None if mkc has no such element."""
    return _TORCH_DTYPES.get(str(dtype))


_torch_elements = {}


def torch_elements(dtype):
    """The elements a torch tensor of `dtype` may be passed as (none or one), remembered per
    dtype: a launch asks for each of its tensors."""
    elements = _torch_elements.get(dtype)
    if elements is None:
        elements = _torch_elements[dtype] = frozenset({torch_element(dtype)} - {None})
    return elements


def typestr_holds(typestr, element):
    """Whether __cuda_array_interface__ elements of `typestr` can be passed as `element`."""
    return typestr in _ACCEPTED_TYPESTRS[element]
