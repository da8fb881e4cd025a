"""Codec speed and error: encode/decode time of a 2048x512 fp32 block and the error table.

For every codec: milliseconds to encode and to decode a 2,048 x 512 fp32 block (best of
``--repeat``; goal < 20 ms each), bytes per row at the block's dim, and the reconstruction
error on two synthetic inputs: standard normal rows, and the same with one channel in 32 scaled
x8 (the outlier channels real K caches have). Error = max abs error and relative RMS error
(RMS of the error / RMS of the data).
Prints one JSON line per codec and a markdown table (``--table`` for the table alone, the one
docs/kvcache.md shows).

    python benchmarks/bench_codecs.py            # full size
    python benchmarks/bench_codecs.py --smoke    # CI-sized
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pion.codecs import get_codec  # noqa: E402

CODECS = ["fp32", "fp16", "bf16", "int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32", "bf16_rope_fp8_body"]


def gaussian(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def with_outliers(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    """Unit-normal rows with 1 channel in 32 scaled x8 (K-cache outlier channels)."""
    x = gaussian(rows, dim, seed)
    x[:, ::32] *= 8.0
    return x


def best_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def errors(codec, x: np.ndarray) -> tuple[float, float]:
    y = codec.decode(codec.encode(x), x.shape)
    err = y.astype(np.float64) - x
    return float(np.abs(err).max()), float(np.sqrt((err**2).mean() / (x.astype(np.float64) ** 2).mean()))


def measure(name: str, rows: int, dim: int, repeat: int) -> dict:
    codec = get_codec(name, rope=64)
    x = gaussian(rows, dim)
    data = codec.encode(x)
    normal_max, normal_rms = errors(codec, x)
    outlier_max, outlier_rms = errors(codec, with_outliers(rows, dim))
    return {
        "codec": name, "rows": rows, "dim": dim, "bytes_per_row": codec.bytes_per_row(dim),
        "ratio_vs_fp16": round(2 * dim / codec.bytes_per_row(dim), 2),
        "encode_ms": round(best_ms(lambda: codec.encode(x), repeat), 2),
        "decode_ms": round(best_ms(lambda: codec.decode(data, x.shape), repeat), 2),
        "max_abs_error": normal_max, "rel_rms_error": normal_rms,
        "outliers_max_abs_error": outlier_max, "outliers_rel_rms_error": outlier_rms,
    }


def table(results: list[dict]) -> str:
    lines = [
        "| codec | bytes/row (D=%d) | vs fp16 | max abs err | rel RMS err | max abs err (outliers) "
        "| rel RMS err (outliers) | encode ms | decode ms |" % results[0]["dim"],
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['codec']} | {r['bytes_per_row']} | {r['ratio_vs_fp16']}x | {r['max_abs_error']:.3g} | "
            f"{r['rel_rms_error']:.3g} | {r['outliers_max_abs_error']:.3g} | {r['outliers_rel_rms_error']:.3g} | "
            f"{r['encode_ms']} | {r['decode_ms']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--table", action="store_true", help="print only the markdown table")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.repeat = 64, 1
    results = [measure(name, args.rows, args.dim, args.repeat) for name in CODECS]
    if not args.table:
        for result in results:
            print(json.dumps(result))
        slow = [r["codec"] for r in results if max(r["encode_ms"], r["decode_ms"]) >= 20 and not args.smoke]
        print(f"# goal: encode and decode under 20 ms each; over it: {slow or 'none'}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
