"""The local stack: real PostgreSQL, OpenLDAP, Kafka (KRaft), Kafka Connect with
Debezium and Apicurio Registry, run as processes under ``MCQ_HOME``.

    layout of MCQ_HOME
    ├── conf/<service>/   generated configuration
    ├── data/<service>/   state that survives `down` / `up`
    ├── logs/<service>.log
    └── run/<service>.pid
"""

from mcq.stack.exceptions import MissingRuntime, PortInUse, ServiceFailed, StackError
from mcq.stack.stack import ServiceStatus, Stack

__all__ = ["MissingRuntime", "PortInUse", "ServiceFailed", "ServiceStatus", "Stack", "StackError"]
