"""Who is asking, and may they act.

Two roles: ``read`` sees every page, ``admin`` may also act (requeue, discard, edit
interests). A user is known by a login checked against an argon2 hash from the settings
(``console.users``), or, behind an authenticating reverse proxy, by the header it sets
(``console.trusted_user_header``), believed only from ``console.trusted_proxies``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from mcq.config import ConsoleSettings

Role = Literal["read", "admin"]
MAX_NAME = 64
"""The longest user name a login form may carry (longer ones are refused unread)."""
MAX_PASSWORD = 1024
"""The longest password argon2 is asked to check (its cost grows with the length)."""
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
        """The user NAME when PASSWORD is theirs; None otherwise (same work either way).
        Runs argon2 (tens of milliseconds of CPU): call it off the event loop."""
        if len(name) > MAX_NAME or len(password) > MAX_PASSWORD:
            return None
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

    def current(self, name: str, role: str, stamp: str | None) -> User | None:
        """The user a session names, as the settings know them now: None when they were
        removed or their password changed since the session began (``stamp``), their
        role the current one (a demotion takes effect at once)."""
        known = self.settings.users.get(name)
        if known is None or stamp != self.stamp(name):
            return None
        return User(name, known.role, "login")

    def stamp(self, name: str) -> str | None:
        """What a session of NAME carries to be recognised as still valid: a digest of the
        user's stored hash (a new password ends every session begun with the old one)."""
        known = self.settings.users.get(name)
        if known is None:
            return None
        return hashlib.sha256(known.password_hash.get_secret_value().encode()).hexdigest()[:16]

    @property
    def anyone_can_log_in(self) -> bool:
        return bool(self.settings.users) or bool(self.settings.trusted_user_header)


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0


@dataclass
class LoginThrottle:
    """Failed logins per user name and per client address: after ``free`` failures, each
    further attempt must wait 1 s after the last failure, doubling with every failure up
    to ``max_s`` (a lockout with backoff); a success clears the name's and the address's."""

    free: int = 3
    max_s: float = 900.0
    clock: Callable[[], float] = field(default=time.monotonic)
    _failures: dict[tuple[str, str], _Failures] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_s(self, name: str, address: str) -> float:
        """Seconds until NAME may try again from ADDRESS (0: now)."""
        now = self.clock()
        with self._lock:
            return max(self._wait(("name", name), now), self._wait(("address", address), now))

    def _wait(self, key: tuple[str, str], now: float) -> float:
        f = self._failures.get(key)
        if f is None or f.count < self.free:
            return 0.0
        backoff = min(self.max_s, 2.0 ** (f.count - self.free))
        return max(0.0, f.last + backoff - now)

    def failed(self, name: str, address: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) > 100_000:  # bounded: forget the oldest half
                for key in sorted(self._failures, key=lambda k: self._failures[k].last)[:50_000]:
                    del self._failures[key]
            for key in (("name", name[:MAX_NAME]), ("address", address)):
                f = self._failures.setdefault(key, _Failures())
                f.count += 1
                f.last = now

    def succeeded(self, name: str, address: str) -> None:
        with self._lock:
            self._failures.pop(("name", name), None)
            self._failures.pop(("address", address), None)
