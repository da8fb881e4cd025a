"""``PionPromptCache.export`` / ``import_``: a stored prefix as a file the caller owns.

The file is ``pion.codecs.artifact``'s safetensors (rows in the stored codec, recurrent state,
the manifest in its metadata, a SHA-256 over every byte), made by the server's
``KV.PREFIX.EXPORT``. It can be copied to another machine and imported into another Pion.
Import is fail closed twice: here, the checksum and the manifest against *this* model (its
fingerprint, cache layout, codec schema, and the artifact's own tokens), refusing with the
reason before anything is sent; then on the server, the checksum and the artifact's consistency
again, and the rules of any store (another prefix under that namespace refuses it unless
``replace``).
"""

from __future__ import annotations

import os
import tempfile

from pion.client.manifest import mismatch, parse_manifest
from pion.codecs.artifact import Artifact, ArtifactError, unpack


class ArtifactRefused(ValueError):
    """An artifact that must not be loaded for this model (damaged, truncated, or another model's)."""


def check(pc, data: bytes) -> Artifact:
    """The artifact in ``data``, if it is intact and this model's; else ArtifactRefused with the reason."""
    try:
        art = unpack(data)
    except ArtifactError as exc:
        raise ArtifactRefused(str(exc)) from None
    why = mismatch(parse_manifest(art.manifest_raw), fp_hash=pc.fp_hash, layout=pc.layout, codecs=pc.schema,
                   token_ids=[int(t) for t in art.tokens])
    if why is not None:
        raise ArtifactRefused(f"the artifact is not for this model: {why}")
    return art


def export_prefix(pc, ns: str, path: str | os.PathLike) -> int:
    """Write the artifact of ``ns`` to ``path`` (atomically: a temp file renamed); its size."""
    data = pc.client.execute("KV.PREFIX.EXPORT", ns)
    check(pc, data)  # never write a file this model would refuse
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    handle, temp = tempfile.mkstemp(prefix=".pion-artifact-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return len(data)


def import_prefix(pc, path: str | os.PathLike, replace: bool = False) -> str:
    """Check the artifact at ``path`` against this model, then store it; its namespace."""
    with open(path, "rb") as handle:
        data = handle.read()
    art = check(pc, data)
    pc.client.execute("KV.PREFIX.IMPORT", data, *(["REPLACE"] if replace else []))
    return art.ns.decode("utf-8", "replace")
