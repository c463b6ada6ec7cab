"""Topics: one compacted topic per logical table/subtype plus mcq's system topics,
created idempotently; drift between the registry and the cluster is reported, never
silently changed."""

from mcq.topics.plan import TopicSettingsError, TopicSpec, apply_topics, plan_topics

__all__ = ["TopicSettingsError", "TopicSpec", "apply_topics", "plan_topics"]
