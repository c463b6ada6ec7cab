"""mcq — the Meta Change Queue rebuilt on Kafka, Debezium and Spark.

This package holds what every part shares: configuration (:mod:`mcq.config`), the
command line (:mod:`mcq.cli`) and the local stack of real services
(:mod:`mcq.stack`). The pipeline itself lives in the top-level ``streams`` and
``consumers`` packages.
"""

__version__ = "0.1.0"
