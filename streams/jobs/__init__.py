"""The batch jobs a person runs against a listener's target or the topics: ``mcq refresh``
(a listener's view sent again through its bulk lane), ``mcq rebuild`` (a target loaded
from the logical topics' last states, in Spark or read directly), ``mcq reconcile`` (a
target compared with what it should hold, and repaired) and ``mcq report`` (what changed,
per table and listener). They read what the normaliser wrote and write through the
listeners' adapters; the normaliser imports nothing of them (``make lint``)."""
