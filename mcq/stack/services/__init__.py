"""The services of the local stack: how each is prepared, started and checked.

Every service is a real server: PostgreSQL and OpenLDAP from Debian's packages,
Kafka, Kafka Connect (with Debezium) and Apicurio Registry from the JVM artifacts that
``jvm/pom.xml`` resolves from Maven Central. A health check is a real round trip, not
an open port: a produced-and-consumed record, a plugin listing, a registry answer, a bind.
"""

from mcq.config import KAFKA_ADMIN, KAFKA_CONNECT
from mcq.stack.services.ad import ActiveDirectory, ad_directory
from mcq.stack.services.base import JvmService, NotReady, Service
from mcq.stack.services.connect import DEBEZIUM_POSTGRES_CONNECTOR, Connect
from mcq.stack.services.kafka import HEALTH_TOPIC, KAFKA_CONTROLLER, Kafka, new_cluster_id
from mcq.stack.services.kubernetes import KUBERNETES, KUBERNETES_SERVICES, KubeApiServer, kubeconfig
from mcq.stack.services.ldap import Ldap
from mcq.stack.services.postgres import Postgres
from mcq.stack.services.registry import Registry
from mcq.stack.services.spark import SPARK, SPARK_SERVICES, SparkMaster, SparkWorker, master_url

SERVICES: tuple[type[Service], ...] = (Postgres, Ldap, Kafka, Registry, Connect)
"""In start order: the registry stores its schemas in PostgreSQL, Connect needs Kafka."""

OPTIONAL: tuple[type[Service], ...] = (ActiveDirectory, *SPARK_SERVICES, *KUBERNETES_SERVICES)
"""Started only when asked (``mcq stack up --with ad``); stopped with the rest."""

GROUPS: dict[str, tuple[str, ...]] = {
    SPARK: tuple(cls.name for cls in SPARK_SERVICES),
    KUBERNETES: tuple(cls.name for cls in KUBERNETES_SERVICES),
}
"""Names ``--with`` takes for several optional services at once."""

__all__ = [
    "DEBEZIUM_POSTGRES_CONNECTOR",
    "GROUPS",
    "HEALTH_TOPIC",
    "KAFKA_ADMIN",
    "KAFKA_CONNECT",
    "KAFKA_CONTROLLER",
    "KUBERNETES",
    "OPTIONAL",
    "SERVICES",
    "SPARK",
    "ActiveDirectory",
    "Connect",
    "JvmService",
    "Kafka",
    "KubeApiServer",
    "Ldap",
    "NotReady",
    "Postgres",
    "Registry",
    "Service",
    "SparkMaster",
    "SparkWorker",
    "ad_directory",
    "kubeconfig",
    "master_url",
    "new_cluster_id",
]
