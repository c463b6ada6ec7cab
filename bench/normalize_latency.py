"""Source commit -> logical topic latency of ``mcq streams normalize`` at steady rates.

Method: a captured campus world of its own (a schema, a Debezium connector, raw topics);
the normaliser runs as ``mcq streams normalize`` (its own process, ``local[*]``) with the
trigger given; a driver thread commits one telephone-number update per transaction at a
steady rate, noting each commit's wall-clock time; a consumer of the logical
PERSON/Telephone topic notes when each number arrives. Latency = arrival - commit.
A rate is "kept up with" when every change arrived and the last tenth of the run was no
slower than three times the first tenth (a backlog that grows shows as rising latency).

    .venv/bin/python -m bench.normalize_latency --rates 20,100,400 --seconds 40 --trigger "1 second"

Needs the local stack up (``mcq stack up``). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Consumer
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mcq.config import load_settings
from mcq.contract import registry_client
from mcq.testing.worlds import captured_world

from .stats import percentile
from .table import print_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="20,100,400", help="changes per second, comma separated")
    ap.add_argument("--seconds", type=float, default=40.0, help="how long each rate is driven")
    ap.add_argument("--trigger", default="1 second", help="the normaliser's trigger (microbatch mode)")
    ap.add_argument("--mode", default="realtime", choices=["realtime", "microbatch"], help="the normaliser's mode")
    ap.add_argument("--checkpoint-interval", default="5 minutes", help="the normaliser's (realtime mode)")
    ap.add_argument("--people", type=int, default=500)
    ap.add_argument("--master", help="the normaliser's Spark master (default: local[*])")
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C: the captured world (connector, slot, schema) is removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = load_settings().model_copy(update={"topic_prefix": f"bench{uuid.uuid4().hex[:6]}"})
    rows: list[str] = []
    with captured_world(settings, people=args.people) as world:
        registry_file = Path(f"/tmp/{settings.topic_prefix}.yaml")
        registry_file.write_text(world.registry_yaml)
        env = {**os.environ, "MCQ_TOPIC_PREFIX": settings.topic_prefix}
        log = open(f"/tmp/{settings.topic_prefix}-normalize.log", "wb")  # noqa: SIM115
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcq.cli",
                "streams",
                "normalize",
                "--http-port",
                "0",
                "--registry",
                str(registry_file),
                "--trigger",
                args.trigger,
                "--mode",
                args.mode,
                "--checkpoint-interval",
                args.checkpoint_interval,
                "--checkpoint",
                f"/tmp/{settings.topic_prefix}-ckpt",
                *(["--master", args.master] if args.master else []),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        phones_table = world.registry.table("PERSON", "Telephone")
        assert phones_table is not None
        topic = phones_table.topic(settings.topic_prefix)
        arrived: dict[str, float] = {}
        stop = threading.Event()

        def consume() -> None:
            des = AvroDeserializer(registry_client(settings))
            c = Consumer(
                {
                    **settings.kafka.client_config(),
                    "group.id": f"bench-{uuid.uuid4().hex}",
                    "auto.offset.reset": "earliest",
                    "topic.metadata.refresh.interval.ms": 1000,
                }
            )
            c.subscribe([topic])
            while not stop.is_set():
                msg = c.poll(0.2)
                if msg is None or msg.error() or msg.value() is None:
                    continue
                v = des(msg.value(), SerializationContext(topic, MessageField.VALUE))
                number = (v.get("after") or {}).get("phone_number")
                if number and number.startswith("B-"):
                    arrived.setdefault(number, time.time())
            c.close()

        raw_arrived: dict[str, float] = {}

        def consume_raw() -> None:
            """Debezium's share: when each number reaches the raw topic."""
            c = Consumer(
                {
                    **settings.kafka.client_config(),
                    "group.id": f"bench-{uuid.uuid4().hex}",
                    "auto.offset.reset": "earliest",
                    "topic.metadata.refresh.interval.ms": 1000,
                }
            )
            c.subscribe([world.topic(f"{world.schema}.directory_telephone")])
            while not stop.is_set():
                msg = c.poll(0.2)
                if msg is None or msg.error() or msg.value() is None:
                    continue
                envelope = json.loads(msg.value())
                number = ((envelope.get("payload", envelope) or {}).get("after") or {}).get("phone_number")
                if number and number.startswith("B-"):
                    raw_arrived.setdefault(number, time.time())
            c.close()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        threading.Thread(target=consume_raw, daemon=True).start()
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            phones = conn.execute(
                f"SELECT person_id, tele_type FROM {world.schema}.directory_telephone ORDER BY 1, 2"
            ).fetchall()
            # warm-up: the snapshot and the first batches are through before measuring
            conn.execute(
                f"UPDATE {world.schema}.directory_telephone SET phone_number = 'B-warm' "
                "WHERE person_id = %s AND tele_type = %s",
                phones[0],
            )
            deadline = time.time() + 300
            while "B-warm" not in arrived and time.time() < deadline:
                time.sleep(0.5)
            for rate in [int(r) for r in args.rates.split(",")]:
                committed: dict[str, float] = {}
                n = int(rate * args.seconds)
                start = time.time()
                for i in range(n):
                    due = start + i / rate
                    if (wait := due - time.time()) > 0:
                        time.sleep(wait)
                    pid, tele = phones[i % len(phones)]
                    number = f"B-{rate}-{i}"
                    conn.execute(
                        f"UPDATE {world.schema}.directory_telephone SET phone_number = %s "
                        "WHERE person_id = %s AND tele_type = %s",
                        (number, pid, tele),
                    )
                    committed[number] = time.time()
                achieved = n / (time.time() - start)
                wait_until = time.time() + 120
                while time.time() < wait_until and not all(k in arrived for k in committed):
                    time.sleep(0.5)
                lat = [arrived[k] - t for k, t in committed.items() if k in arrived]
                raw = [raw_arrived[k] - t for k, t in committed.items() if k in raw_arrived] or [float("nan")]
                missing = n - len(lat)
                tenth = max(1, len(lat) // 10)
                kept_up = missing == 0 and statistics.mean(lat[-tenth:]) <= 3 * max(0.5, statistics.mean(lat[:tenth]))
                rows.append(
                    f"| {rate} | {achieved:.0f} | {n} | {percentile(raw, 50):.2f} / {percentile(raw, 99):.2f} | "
                    f"{percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} | "
                    f"{max(lat):.2f} | {missing} | {'yes' if kept_up else 'no'} |"
                )
                print(rows[-1], flush=True)
        stop.set()
        job.terminate()
        job.wait(60)
    how = f"checkpoint every {args.checkpoint_interval}" if args.mode == "realtime" else f"trigger {args.trigger!r}"
    columns = ["rate/s asked", "rate/s driven", "changes", "raw p50 / p99 s", "p50 s", "p99 s", "max s", "missing",
               "kept up"]  # fmt: skip
    where = f", master {args.master}" if args.master else ""
    print_table(f"{args.mode} mode, {how}, {os.cpu_count()} cores{where}", columns, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
