"""streams: the Spark (PySpark) side of mcq — normalising raw CDC topics into the
compacted logical change topics, and the batch jobs (refresh, replay, reconcile).

:mod:`streams.session` builds the SparkSession every job uses, with the Kafka and Avro
connectors that the pyspark wheel does not carry.
"""
