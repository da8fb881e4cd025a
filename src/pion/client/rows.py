"""K/V rows on the client: codec schemas, and decoding what ``V.FETCH ... FMT RAW`` ships.

A *schema* is the codec of every V-store layer, per side: ``{"k": [...], "v": [...]}``.
``vquant="auto"`` stores each layer in the model's own K/V dtype (``fp32``, ``fp16`` or
``bf16``): lossless. ``boundary_protect=N`` keeps K in fp16 everywhere and V in fp16 on the
first and last N layers, ``vquant`` in between (the reference's heterogeneous register).

Rows of the three float codecs are decoded here by viewing the bytes (no copy, no float32
detour, so a bf16 model gets its bf16 values bit for bit); every other codec goes through
``pion.codecs`` (the same code the server encodes with).
"""

from __future__ import annotations

import numpy as np

#: numpy dtype name -> the codec that stores it exactly
EXACT_CODEC = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def native_dtype(codec: str) -> np.dtype | None:
    """The numpy dtype whose raw bytes are this codec's rows, or None for block codecs."""
    if codec == "fp32":
        return np.dtype("<f4")
    if codec == "fp16":
        return np.dtype("<f2")
    if codec == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return None


def make_schema(n_layers: int, model_dtype: str, vquant: str = "auto", boundary_protect: int = 0) -> dict:
    """Per-layer codecs for K and V."""
    vquant = vquant.lower()
    exact = EXACT_CODEC.get(model_dtype, "fp32")
    body = exact if vquant == "auto" else vquant
    if boundary_protect < 0:
        raise ValueError("boundary_protect must be >= 0")
    if boundary_protect == 0:
        return {"k": [body] * n_layers, "v": [body] * n_layers}
    edge = "fp16"
    v = [edge if i < boundary_protect or i >= n_layers - boundary_protect else body for i in range(n_layers)]
    return {"k": [edge] * n_layers, "v": v}


def is_uniform(schema: dict) -> bool:
    """One codec for every layer and both sides: the plain ``KV.PREFIX.REGISTER`` form."""
    return len(set(schema["k"]) | set(schema["v"])) <= 1


def check_schema(schema: dict, k_dims: list[int], v_dims: list[int]) -> None:
    """Refuse, before any prefill, a codec that cannot take a layer's width (e.g. turbo4 and 96)."""
    from pion.codecs import CodecError, get_codec

    for side, dims in (("k", k_dims), ("v", v_dims)):
        for layer, (codec, dim) in enumerate(zip(schema[side], dims, strict=True)):
            try:
                get_codec(codec).check_dim(dim)
            except CodecError as exc:
                raise ValueError(f"layer {layer} {side.upper()}: {exc}") from None


def bytes_per_row(codec: str, dim: int) -> int:
    native = native_dtype(codec)
    if native is not None:
        return native.itemsize * dim
    from pion.codecs import get_codec

    return get_codec(codec).bytes_per_row(dim)


def decode_rows(data, codec: str, rows: int, dim: int) -> np.ndarray:
    """``(rows, dim)`` values of ``rows`` encoded rows (a view of ``data`` for the float codecs)."""
    native = native_dtype(codec)
    if native is not None:
        expected = rows * dim * native.itemsize
        if len(data) != expected:
            raise ValueError(f"{codec}: {len(data)} bytes for {rows}x{dim} rows, expected {expected}")
        return np.frombuffer(data, dtype=native).reshape(rows, dim)
    from pion.codecs import get_codec

    return get_codec(codec).decode(data, (rows, dim))


def wire_rows(rows: np.ndarray) -> tuple[bytes | memoryview, str | None]:
    """``(blob, FMT option)`` for ``V.STOREBATCH``: fp16 rows go as ``FMT F16``, all else as fp32.

    bf16 widens to fp32 exactly, so an exact codec on the server gets the model's values.
    """
    if rows.dtype == np.float16:
        return _bytes(np.ascontiguousarray(rows, dtype="<f2")), "F16"
    return _bytes(np.ascontiguousarray(rows, dtype="<f4")), None


def _bytes(arr: np.ndarray) -> memoryview:
    return memoryview(arr.view(np.uint8)).cast("B")
