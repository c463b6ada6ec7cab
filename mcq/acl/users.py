"""SCRAM credentials on the broker: the identities the plan's principals log in as."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from mcq.acl.exceptions import AclError
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
