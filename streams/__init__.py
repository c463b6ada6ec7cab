"""streams: the Spark (PySpark) side of mcq — normalising raw CDC topics into the
compacted logical change topics (:mod:`streams.normalize`), and the batch jobs over
them, from the last state of every key (:mod:`streams.laststate`): ``mcq refresh``
(:mod:`streams.jobs.refresh`), ``mcq reconcile`` (:mod:`streams.jobs.reconcile`) and ``mcq rebuild``
(:mod:`streams.jobs.rebuild`).

:mod:`streams.session` builds the SparkSession every job uses, with the Kafka and Avro
connectors that the pyspark wheel does not carry.
"""

import logging

logging.getLogger("streams").addHandler(
    logging.NullHandler()
)  # a library logs nowhere until a shell says where (mcq.logs)
