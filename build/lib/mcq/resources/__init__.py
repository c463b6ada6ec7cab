"""What mcq reads at run time from its own distribution, never from a checkout's path.

The files live where a reader of the repository looks for them -- ``schemas/`` (the change
contract's Avro schemas), ``connect/`` (the connector base every Debezium source shares)
and ``examples/`` (the sample campus: its registry, refresh and vendor scripts) -- and
ship inside the package as ``mcq/resources/<folder>/`` (links to those folders in the
checkout, files in a wheel). They are read through :mod:`importlib.resources`, so an
editable install, a wheel in any virtualenv and the image read the same bytes.

A resource that is missing or unreadable is one :class:`ResourceMissing` naming it and the
install it was looked for in (an install that left the package data out), never a bare
traceback.
"""

from __future__ import annotations

from importlib import metadata, resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

from mcq.errors import McqError

Folder = Literal["schemas", "connect", "examples"]

DISTRIBUTION = "meta-change-queue"


class ResourceMissing(McqError):
    """A file mcq ships with itself is not in this install (or cannot be read)."""


def _install() -> str:
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "not installed as a distribution"
    return f"{DISTRIBUTION} {version} at {Path(__file__).parent}"


def resource(folder: Folder, name: str) -> Traversable:
    """The packaged file ``<folder>/<name>`` (e.g. ``schemas``, ``change_key.avsc``)."""
    item = resources.files(__name__).joinpath(folder).joinpath(name)
    if not item.is_file():
        raise ResourceMissing(f"{folder}/{name}: not in this install ({_install()}); reinstall the package")
    return item


def read_text(folder: Folder, name: str) -> str:
    """The text of the packaged file ``<folder>/<name>``; :class:`ResourceMissing` when it
    is not there or cannot be read."""
    item = resource(folder, name)
    try:
        return item.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResourceMissing(f"{folder}/{name}: unreadable in this install ({_install()}): {exc}") from None


def names(folder: Folder, suffix: str = "") -> list[str]:
    """The packaged files of ``folder`` whose names end with ``suffix``, sorted."""
    root = resources.files(__name__).joinpath(folder)
    if not root.is_dir():
        raise ResourceMissing(f"{folder}/: not in this install ({_install()}); reinstall the package")
    return sorted(item.name for item in root.iterdir() if item.is_file() and item.name.endswith(suffix))
