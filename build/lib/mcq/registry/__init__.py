"""The registry: what can be logged (tables/subtypes), who listens (listeners) and to
what (interests), validated on load and shared at run time through a compacted topic.

    registry/
    ├── model.py       typed definitions (pydantic) and cross-reference checks
    ├── rules.py       content rules: a safe SQL-like boolean language (lark), no eval
    ├── loader.py      YAML with file:line errors
    ├── store.py       the shared store: a compacted Kafka topic, apply / read / diff
    └── exceptions.py
"""

from mcq.registry.exceptions import RegistryError, RegistryInvalid
from mcq.registry.loader import load_registry, parse_registry
from mcq.registry.model import Feed, Interest, Listener, LogicalTable, Registry, Source

__all__ = [
    "Feed",
    "Interest",
    "Listener",
    "LogicalTable",
    "Registry",
    "RegistryError",
    "RegistryInvalid",
    "Source",
    "load_registry",
    "parse_registry",
]
