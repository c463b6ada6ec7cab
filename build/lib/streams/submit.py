"""The normaliser as a Spark application file: ``spark-submit streams/submit.py [OPTIONS]``
(the image's ``/opt/mcq/submit.py``, the Helm chart's SparkApplication). The arguments are
those of ``mcq streams normalize``; Spark's master is spark-submit's."""

from __future__ import annotations

import sys

from mcq.cli import main

if __name__ == "__main__":
    main(args=["streams", "normalize", *sys.argv[1:]], prog_name="mcq streams normalize")
