"""Values an operator gives the chart beside the generated ones (``mcq helm values``): where
the engines are, the Secrets, one scaled listener, the campus's named target ``ad``. Shared
by the chart's offline tests (tests/deploy) and its real install (tests/cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mcq"
CAMPUS = ROOT / "examples" / "campus.yaml"

AD_TARGET: dict[str, Any] = {
    "ad": {
        "settings": {"type": "ldap", "url": "ldaps://dc1.campus.example", "base_dn": "DC=campus,DC=example",
                     "bind_dn": "CN=mcq,CN=Users,DC=campus,DC=example"},
        "existingSecret": "mcq-ad",
        "key": "password",
    }
}  # fmt: skip
"""The campus registry's ADSI listener writes to the named target ``ad``: the chart refuses
to render without it."""

OPERATOR_VALUES: dict[str, Any] = {
    "image": {"repository": "registry.campus.example/mcq", "tag": "0.1.0"},
    "settings": {
        "kafka": {"bootstrapServers": "campus-kafka-bootstrap.kafka:9093", "securityProtocol": "SASL_SSL",
                  "saslMechanism": "SCRAM-SHA-512", "saslUsername": "mcq"},
        "schemaRegistry": {"url": "https://apicurio.registry/apis/ccompat/v7", "username": "mcq-admin",
                           "readerUsername": "mcq-reader"},
        "source": {"host": "pg.campus.example", "dbname": "simon"},
        "vendor": {"host": "pg-vendor.campus.example", "dbname": "vendor"},
        "ldap": {"url": "ldaps://ldap.campus.example", "baseDn": "dc=campus,dc=example",
                 "bindDn": "cn=mcq,dc=campus,dc=example"},
    },
    "credentials": {
        "kafkaSaslPassword": {"existingSecret": "mcq-kafka", "key": "password"},
        "schemaRegistryPassword": {"existingSecret": "mcq-registry", "key": "password"},
        "schemaRegistryReaderPassword": {"existingSecret": "mcq-registry-reader", "key": "password"},
        "connectPassword": {"existingSecret": "mcq-connect-rest", "key": "password"},
        "sourcePassword": {"existingSecret": "mcq-source", "key": "password"},
        "vendorPassword": {"existingSecret": "mcq-vendor", "key": "password"},
        "ldapPassword": {"existingSecret": "mcq-ldap", "key": "bind-password"},
    },
    "targets": AD_TARGET,
    "kafkaCaSecret": "campus-cluster-ca-cert",
    "listenerOverrides": {
        "LDAP": {"replicas": 2, "kafkaCredentials": {"existingSecret": "mcq-listener-ldap-own",
                                                     "usernameKey": "username"}},
        "Insite": {"suspend": True},
        "BEST": {"persistence": {"enabled": True, "size": "2Gi"}},
    },
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "console": {"enabled": True, "users": {"alice": {"role": "admin", "existingSecret": "console-users",
                                                     "key": "alice"}},
                "sessionSecret": {"existingSecret": "console-session", "key": "secret"}},
    "entities": {"enabled": True},  # every general check covers its workload too
}  # fmt: skip


def write_values(path: Path, values: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path
