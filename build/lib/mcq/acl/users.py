"""SCRAM credentials on the broker: the identities the plan's principals log in as."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from mcq.acl.exceptions import AclError
from mcq.acl.plan import Principals
from mcq.config import Settings

ITERATIONS = 8192


def set_scram_user(settings: Settings, user: str, password: str, admin: AdminClient | None = None) -> None:
    """Create USER or change its password (SCRAM-SHA-512) on the cluster ``settings.kafka`` names."""
    admin = admin or AdminClient(settings.kafka.client_config())
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, ITERATIONS)
    upsert = UserScramCredentialUpsertion(user, info, password.encode())
    try:
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
            future.result()
    except KafkaException as exc:
        where = settings.kafka.bootstrap_servers
        raise AclError(f"set SCRAM credentials of {user!r} at {where}: {exc.args[0]}") from None


def missing_users(settings: Settings, users: list[str], admin: AdminClient | None = None) -> list[str]:
    """Which of USERS have no SCRAM credentials on the cluster."""
    admin = admin or AdminClient(settings.kafka.client_config())
    missing = []
    try:
        futures = admin.describe_user_scram_credentials(users, request_timeout=30)
    except KafkaException as exc:
        raise AclError(f"describe SCRAM users at {settings.kafka.bootstrap_servers}: {exc.args[0]}") from None
    for user, future in futures.items():  # type: ignore[union-attr]
        try:
            future.result()
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.RESOURCE_NOT_FOUND:
                missing.append(user)
                continue
            raise AclError(f"describe SCRAM user {user!r} at {settings.kafka.bootstrap_servers}: {err}") from None
    return sorted(missing)


def make_local_users(settings: Settings, principals: Principals, admin: AdminClient | None = None) -> list[str]:
    """On the secure local stack: the principals' users that do not exist yet, made with the
    passwords the stack derives for them (``stack.local_password``), so each process of this
    stack logs in as its own principal; users that exist keep their password. Returns the
    users made."""
    admin = admin or AdminClient(settings.kafka.client_config())
    users = sorted(p.removeprefix("User:") for p in principals.all())
    made = missing_users(settings, users, admin)
    for user in made:
        set_scram_user(settings, user, settings.stack.local_password(user).get_secret_value(), admin)
    return made
