"""Least-privilege Kafka ACLs derived from the registry (the Oracle AQ seed's per-subscriber
queue privileges): each listener reads only its interests' logical topics and its own
lanes, uses only its own consumer groups and writes only its own lanes; the normaliser
reads raw topics and writes logical ones; Connect writes raw topics and its own.

``plan`` is pure (registry in, grants out); ``cluster`` compares a plan with a broker and
applies the difference; ``users`` keeps SCRAM credentials (the local stack's broker imports only that one)."""

from mcq.acl.exceptions import AclError

__all__ = ["AclError"]
