"""Which names a deployment owns: what ``mcq topics remove`` may delete, and what never."""

from __future__ import annotations

from mcq.topics.remove import owned


def test_a_deployment_owns_every_name_under_its_prefix_and_nothing_beside() -> None:
    topics = ["camp.people", "camp._registry", "camp.listener.LDAP.applied", "campus.people", "camp", "other.x"]
    assert owned(topics, "camp", topics) == ["camp._registry", "camp.listener.LDAP.applied", "camp.people"]


def test_a_longer_prefix_with_a_registry_store_of_its_own_is_another_deployment() -> None:
    topics = ["mcq.people", "mcq._registry", "mcq.test._registry", "mcq.test.people", "mcq.test2.people"]
    # mcq.test2 has no registry store: its topics are names under mcq, so they are mcq's
    assert owned(topics, "mcq", topics) == ["mcq._registry", "mcq.people", "mcq.test2.people"]
    subjects = ["mcq.people-value", "mcq.test.people-value"]
    assert owned(subjects, "mcq", topics) == ["mcq.people-value"]
    groups = ["mcq.LDAP", "mcq.LDAP.bulk", "mcq.test.LDAP"]
    assert owned(groups, "mcq", topics) == ["mcq.LDAP", "mcq.LDAP.bulk"]


def test_raw_topics_of_a_capture_are_never_a_deployments_even_under_the_default_prefix() -> None:
    topics = ["mcq.raw.campus.w.people", "mcq.people", "mcq._registry"]
    assert owned(topics, "mcq", topics) == ["mcq._registry", "mcq.people"]
    assert owned(["mcq.raw.campus.w.people-value", "mcq.people-value"], "mcq", topics) == ["mcq.people-value"]
