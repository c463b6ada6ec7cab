"""Who is asking, and may they act.

Two roles: ``read`` sees every page, ``admin`` may also act (requeue, discard, edit
interests). A user is known by a login checked against an argon2 hash from the settings
(``console.users``), or, behind an authenticating reverse proxy, by the header it sets
(``console.trusted_user_header``), believed only from ``console.trusted_proxies``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from mcq.config import ConsoleSettings

Role = Literal["read", "admin"]
_hasher = PasswordHasher()
_UNKNOWN_USER_HASH = _hasher.hash("an unknown user's password is checked against this, in the same time")


def hash_password(password: str) -> str:
    """An argon2id hash for ``console.users.<NAME>.password_hash``."""
    return _hasher.hash(password)


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    via: str  # "login" or "proxy"

    @property
    def can_act(self) -> bool:
        return self.role == "admin"


class Authenticator:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings

    def login(self, name: str, password: str) -> User | None:
        """The user NAME when PASSWORD is theirs; None otherwise (same work either way)."""
        known = self.settings.users.get(name)
        stored = known.password_hash.get_secret_value() if known else _UNKNOWN_USER_HASH
        try:
            _hasher.verify(stored, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        return User(name, known.role, "login") if known else None

    def from_proxy(self, client_host: str | None, headers: dict[str, str]) -> User | None:
        """The user a trusted reverse proxy names, when one is configured and this request
        comes from it."""
        header = self.settings.trusted_user_header
        if not header or client_host not in self.settings.trusted_proxies:
            return None
        name = headers.get(header.lower(), "").strip()
        if not name:
            return None
        role_header = self.settings.trusted_role_header
        role = headers.get(role_header.lower(), "read").strip() if role_header else "read"
        return User(name, "admin" if role == "admin" else "read", "proxy")

    @property
    def anyone_can_log_in(self) -> bool:
        return bool(self.settings.users) or bool(self.settings.trusted_user_header)
