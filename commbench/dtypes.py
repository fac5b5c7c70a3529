"""Element types commbench runs, their sizes and the names users and logs spell them with."""

from __future__ import annotations

from commbench.errors import UsageError

DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "float64": 8,
    "int8": 1,  # OSU and IMB move bytes (MPI_CHAR): 1-byte sizes; sums exact to 63 ranks
}
DTYPE_ALIASES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "fp64": "float64",
    "char": "int8",
    "byte": "int8",
}


def dtype_size(dtype: str) -> int:
    """Bytes per element of a dtype name."""
    return DTYPE_SIZES[dtype]


def canonical_dtype(name: str) -> str:
    """`bf16` -> `bfloat16`; unknown names are a UsageError listing the choices."""
    name = DTYPE_ALIASES.get(name.lower(), name.lower())
    if name not in DTYPE_SIZES:
        raise UsageError(f"unknown dtype {name!r}: choose from {', '.join(DTYPE_SIZES)}")
    return name


def canonical_dtype_name(name: str) -> str:
    """`bf16` -> `bfloat16`; names commbench does not run (int8 from an import) kept as is."""
    key = str(name).lower()
    key = DTYPE_ALIASES.get(key, key)
    return key if key in DTYPE_SIZES else str(name).lower()
