"""Topics: one compacted topic per logical table/subtype plus mcq's system topics,
created idempotently; drift between the registry and the cluster is reported, never
silently changed."""

from mcq.topics.exceptions import TopicError, TopicReadError, TopicSettingsError
from mcq.topics.plan import TopicSpec, apply_topics, delete_topics, plan_topics

__all__ = [
    "TopicError",
    "TopicReadError",
    "TopicSettingsError",
    "TopicSpec",
    "apply_topics",
    "delete_topics",
    "plan_topics",
]
