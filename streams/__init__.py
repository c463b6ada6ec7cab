"""streams: the Spark (PySpark) side of mcq — normalising raw CDC topics into the
compacted logical change topics (:mod:`streams.normalize`), and the batch jobs over
them (:mod:`streams.refresh`: ``mcq refresh``).

:mod:`streams.session` builds the SparkSession every job uses, with the Kafka and Avro
connectors that the pyspark wheel does not carry.
"""
