"""The listener runtime: ``mcq listen NAME`` (see :mod:`consumers.runtime.listener`)."""
