"""Errors of the registry. Each names where the problem is (file:line) and what to do.

RegistryError
├── RegistryFileError     the YAML cannot be read or parsed at all
├── RegistryInvalid       one or more definitions are wrong (each problem: file:line: message)
├── RuleSyntaxError       a content rule does not parse (column of the rule given)
└── RegistryStoreError    the shared store (a compacted Kafka topic) cannot be read or written
    └── RegistryStoreInvalid  what the store holds is not a valid registry (each problem: key, offset)
"""

from __future__ import annotations

from mcq.errors import McqError


class RegistryError(McqError):
    """Base of every registry error."""


class RegistryFileError(RegistryError):
    """The registry file cannot be read or is not YAML."""


class RuleSyntaxError(RegistryError):
    """A content rule that does not parse."""

    def __init__(self, rule: str, column: int, expected: str) -> None:
        self.rule = rule
        self.column = column
        super().__init__(f"rule does not parse at column {column} ({expected}): {rule!r}")


class RegistryInvalid(RegistryError):
    """Definitions that break the registry's rules; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class RegistryStoreError(RegistryError):
    """The registry store (Kafka topic) refused a read or write."""


class RegistryStoreInvalid(RegistryStoreError):
    """Records of the store that are not a valid registry; ``problems`` holds one line each
    (topic, key, offset and what is wrong)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))
