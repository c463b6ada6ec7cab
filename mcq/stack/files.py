"""Files of the local stack that hold a secret (a private key, a password): written whole
and private from their first byte.

``write_text`` then ``chmod(0o600)`` leaves a window in which the file exists with the
umask's mode (often world-readable) and part of its content; a crash in it leaves a
half-written key. Here the content goes to a temporary file of the same directory, made
0600 by ``open`` itself, synced, then renamed over the target: a reader sees the old file
or the whole new one, never a readable partial one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: Path, content: str | bytes) -> None:
    """Write ``content`` to ``path``, mode 0600, atomically."""
    data = content.encode() if isinstance(content, str) else content
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
