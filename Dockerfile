# syntax=docker/dockerfile:1
# The mcq images, from Debian bookworm's own packages and a wheelhouse (no compiler, no
# network access to PyPI during the build). `make image` fills the wheelhouse and builds
# both targets daemonless (buildah, with a base made by mmdebstrap: scripts/build-image.sh);
# with a Docker engine and a registry, after `make wheelhouse jvm`:
#   docker build --target listener -t registry.example/mcq-listener:0.1.0 .
#   docker build -t registry.example/mcq:0.1.0 .
# Targets:
#   listener  the `mcq` CLI without a JRE or Spark: listeners, setup commands, status (slim)
#   full      (the default) adds Java 17, Spark and the JVM jars: the normaliser and the batch jobs,
#             and Spark on Kubernetes (the entrypoint's `driver` and `executor`)
# The entrypoint (scripts/image/entrypoint.sh): `driver ARGS` / `executor` as Spark's own image
# takes them, any other arguments an mcq command.
# Dependencies are the lock files' exact versions (requirements/*.lock; their hashes are checked
# when `make wheelhouse` downloads them, and the image installs those pins only).
# Pin the base by digest in your registry (BASE_IMAGE=…@sha256:…).
ARG BASE_IMAGE=debian:bookworm-20251117-slim

# What both targets share: Python, tini, the non-root user and its writable directories.
FROM ${BASE_IMAGE} AS runtime
# every stage inherits it: scripts/build-image.sh prunes the stages' leftovers by it
LABEL org.opencontainers.image.title=mcq
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv tini ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
    && groupadd --gid 10001 mcq && useradd --uid 10001 --gid mcq --home-dir /var/lib/mcq --no-create-home mcq \
    && install -d -o mcq -g mcq /var/lib/mcq /var/lib/mcq-checkpoint
COPY scripts/image/entrypoint.sh /opt/mcq/entrypoint.sh
ENV PATH=/opt/venv/bin:$PATH \
    MCQ_HOME=/var/lib/mcq \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /var/lib/mcq

# The listener's virtualenv: mcq without extras, exactly the versions of requirements/listener.lock.
FROM runtime AS listener-venv
COPY out/wheelhouse/ scripts/image/install-venv.sh /wheels/
RUN /wheels/install-venv.sh listener

FROM runtime AS listener
COPY --from=listener-venv /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/mcq/entrypoint.sh"]
CMD ["--help"]

# The full image's virtualenv: mcq[all] (Spark, the console), exactly requirements/all.lock.
FROM runtime AS full-venv
COPY out/wheelhouse/ scripts/image/install-venv.sh /wheels/
RUN /wheels/install-venv.sh all

# The full image: a headless Java 17 for Spark, the jars `make jvm` resolved from Maven Central
# (Spark's Kafka/Avro connectors, mcq's local file system for Spark; mcq's Connect transform for a
# Strimzi KafkaConnect to take), and the Spark driver's
# class-data archive for this image's java and jars (streams/jvm_archive.py).
FROM runtime AS full
USER 0
# (the JRE's postinst links its manual pages: a slim base has no /usr/share/man/man1)
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
COPY --from=full-venv /opt/venv /opt/venv
COPY .cache/jvm/spark/ /opt/mcq/jvm/spark/
COPY .cache/jvm/connect-plugins/mcq-connect-transforms/ /opt/mcq/jvm/connect-transforms/
COPY streams/submit.py /opt/mcq/submit.py
# SPARK_HOME: pyspark's distribution, which the entrypoint's `driver` and `executor` (Spark on
# Kubernetes) start; executors run Python with the image's own interpreter
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    MCQ_STACK__JVM_CACHE=/opt/mcq/jvm \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python
RUN MCQ_HOME=/tmp/mcq /opt/venv/bin/python -m streams.jvm_archive && rm -rf /tmp/mcq
USER 10001:10001
EXPOSE 8080 8090
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/mcq/entrypoint.sh"]
CMD ["--help"]
