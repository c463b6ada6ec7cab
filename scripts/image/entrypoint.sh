#!/bin/sh
# The images' entrypoint (under tini). Spark on Kubernetes starts its driver and executor
# pods with this image and the first argument `driver` or `executor` (the Kubeflow Spark
# operator and `spark-submit --master k8s://` alike); anything else is an mcq command.
#   driver ARGS    spark-submit in client mode on this pod (ARGS: spark-submit's, then the
#                  application: local:///opt/mcq/submit.py and mcq streams normalize's options)
#   executor       Spark's Kubernetes executor backend, configured by the SPARK_* variables the
#                  driver gives the pod (as Spark's own image does)
set -eu
case "${1:-}" in
  driver|executor)
    if [ -z "${SPARK_HOME:-}" ] || [ ! -d "$SPARK_HOME/jars" ]; then
      echo "mcq image: '$1' is for Spark on Kubernetes, and this image has no Spark (the listener image): use the full image, mcq:<version>" >&2
      exit 2
    fi
    ;;
esac
case "${1:-}" in
  driver)
    shift
    # mcq's Spark log configuration (errors only on a user's terminal; streams/log4j2.properties,
    # beside pyspark in the same site-packages) for the driver's JVM, which spark-submit starts;
    # JSON lines like mcq's own under MCQ_LOG__FORMAT=json (the chart's default)
    conf=log4j2.properties
    [ "${MCQ_LOG__FORMAT:-text}" = json ] && conf=log4j2-json.properties
    log4j="$SPARK_HOME/../streams/$conf"
    if [ -f "$log4j" ]; then
      SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} -Dlog4j2.configurationFile=file:$(cd "$(dirname "$log4j")" && pwd)/$conf"
      export SPARK_SUBMIT_OPTS
    fi
    # Spark's Kafka and Avro connectors (the image's jars, `make jvm`) on the driver's class path
    # from its start: a running driver's `spark.jars` reach only the executors
    jars=$(ls "${MCQ_STACK__JVM_CACHE:-/opt/mcq/jvm}"/spark/*.jar 2>/dev/null | paste -sd, -)
    exec "$SPARK_HOME/bin/spark-submit" ${jars:+--jars "$jars"} \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    for name in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP \
                SPARK_EXECUTOR_MEMORY; do
      eval "value=\${$name:-}"
      [ -n "$value" ] || { echo "mcq image: executor: $name is not set (the Spark driver sets it on the pod)" >&2; exit 2; }
    done
    # the driver's executor JVM options, as SPARK_JAVA_OPT_0, _1, ... (in order)
    set --
    i=0
    while eval "[ -n \"\${SPARK_JAVA_OPT_$i+x}\" ]"; do
      eval "set -- \"\$@\" \"\$SPARK_JAVA_OPT_$i\""
      i=$((i + 1))
    done
    exec "${JAVA_HOME:-/usr}/bin/java" "$@" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*:${SPARK_EXTRA_CLASSPATH:-}:$PWD" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
    ;;
  *)
    exec mcq "$@"
    ;;
esac
