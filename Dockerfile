# syntax=docker/dockerfile:1
# The mcq image: the `mcq` CLI (listeners, normaliser, setup commands) with a Java runtime
# for Spark and the JVM jars resolved by jvm/. Built off these machines (no engine here):
#   docker build -t registry.example/mcq:0.1.0 .
# Base images are pinned by version; pin them by digest in your registry (PYTHON_IMAGE=…@sha256:…).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG MAVEN_IMAGE=maven:3.9.9-eclipse-temurin-17

# 1. The JVM artifacts: Spark's Kafka/Avro/JDBC jars, mcq's local file system for Spark and the Connect
#    transform, from Maven Central.
FROM ${MAVEN_IMAGE} AS jvm
WORKDIR /build
COPY jvm/ jvm/
RUN mvn -q -f jvm/pom.xml -pl spark,spark-localfs,connect-transforms -am package -Dmcq.cache=/build/cache \
    && rm -rf /build/cache/*/target

# 2. The Python environment: mcq and its dependencies in a virtualenv.
FROM ${PYTHON_IMAGE} AS python
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mcq/ mcq/
COPY streams/ streams/
COPY consumers/ consumers/
RUN /opt/venv/bin/pip install . && /opt/venv/bin/mcq --version

# 3. The runtime: slim Python, a headless JRE for Spark (Debian bookworm: Java 17), the venv and the jars; no compiler,
# no Maven, no secrets (every credential arrives as environment from a Secret at run time).
FROM ${PYTHON_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless tini \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 mcq && useradd --uid 10001 --gid mcq --home-dir /var/lib/mcq --no-create-home mcq \
    && install -d -o mcq -g mcq /var/lib/mcq /var/lib/mcq-checkpoint
COPY --from=python /opt/venv /opt/venv
COPY --from=jvm /build/cache /opt/mcq/jvm
COPY streams/submit.py /opt/mcq/submit.py
# the Spark driver's class-data archive for this image's java and jars (streams/jvm_archive.py)
RUN JAVA_HOME=/usr/lib/jvm/default-java MCQ_STACK__JVM_CACHE=/opt/mcq/jvm MCQ_HOME=/tmp/mcq \
    /opt/venv/bin/python -m streams.jvm_archive && rm -rf /tmp/mcq
ENV PATH=/opt/venv/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/default-java \
    MCQ_STACK__JVM_CACHE=/opt/mcq/jvm \
    MCQ_HOME=/var/lib/mcq \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/mcq
EXPOSE 8080 8090
ENTRYPOINT ["/usr/bin/tini", "--", "mcq"]
CMD ["--help"]
