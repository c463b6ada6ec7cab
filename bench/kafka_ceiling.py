"""The ceiling: what the stack's own broker moves with Kafka's perf-test tools, beside
which mcq's figures are read (``kafka-producer-perf-test`` / ``kafka-consumer-perf-test``).

Method: a topic of its own (3 partitions, like a logical topic); the producer tool
sends ``--records`` records of ``--size`` bytes (about a change record's Avro size) as
fast as it can with acks=all, then the consumer tool reads them back. Both run from the
Kafka jars the stack already resolved (``jvm/kafka``: kafka-tools), on the same 2 cores
as the broker.

    .venv/bin/python -m bench.kafka_ceiling --records 500000 --size 400

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from mcq.config import load_settings


def tool(main_class: str, *args: str) -> str:
    settings = load_settings()
    classpath = f"{settings.stack.jvm_cache / 'kafka'}/*"
    proc = subprocess.run(
        [str(settings.stack.java), "-Xmx512m", "-cp", classpath, main_class, *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{main_class} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=400, help="record size in bytes")
    args = ap.parse_args()
    settings = load_settings()
    bootstrap = settings.kafka.bootstrap_servers
    topic = f"bench-ceiling-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(settings.kafka.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=-1)])[topic].result()
    try:
        print(f"producing {args.records} records of {args.size} bytes to {topic}", flush=True)
        out = tool(
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(args.records), "--record-size", str(args.size),
            "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
        )  # fmt: skip
        final = [line for line in out.splitlines() if "records sent" in line][-1]
        print(final, flush=True)
        produced = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\)", final)
        latency = re.search(r"([\d.]+) ms avg latency.*?([\d.]+) ms 99th", final)
        assert produced and latency, final
        print(f"consuming {args.records} records from {topic}", flush=True)
        out = tool(
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(args.records),
            "--group", f"bench-{uuid.uuid4().hex[:8]}", "--timeout", "60000",
        )  # fmt: skip
        # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
        row = [line for line in out.splitlines() if line and line[0].isdigit()][-1].split(", ")
        consumed_rate, consumed_mb = float(row[5]), float(row[3])
    finally:
        admin.delete_topics([topic])
    print("\n| tool | records | record bytes | records/s | MB/s | latency avg / p99 ms |")
    print("|---|---|---|---|---|---|")
    print(
        f"| kafka-producer-perf-test (acks=all) | {args.records} | {args.size} | {float(produced.group(1)):,.0f} | "
        f"{float(produced.group(2)):.1f} | {float(latency.group(1)):.0f} / {float(latency.group(2)):.0f} |"
    )
    print(f"| kafka-consumer-perf-test | {args.records} | {args.size} | {consumed_rate:,.0f} | {consumed_mb:.1f} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
