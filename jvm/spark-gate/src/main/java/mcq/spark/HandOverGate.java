package mcq.spark;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.utils.Utils;

/**
 * The hand-over gate of a normaliser that takes over from a running one
 * (streams/handover.py). Its real-time queries start with the gate closed: each record
 * waits in {@link #written} until {@link #open} gives the fences of what the old
 * instance wrote, then is dropped if the old instance wrote it already. Called by
 * Spark SQL's {@code java_method} in the tasks, which share the driver's JVM under a
 * local master (the only one the gate serves). Open until closed: a query of a run that
 * never takes over passes every record at once.
 *
 * <p>After a crash the fences are per output partition as well (what landed of what a
 * producer sent is a prefix per partition, not per topic): a record's partition is the
 * one Kafka's producer chose for its key (murmur2 of the key, as the built-in
 * partitioner does), so a record the crashed instance lost is written again even when a
 * later one of another partition landed.
 *
 * <p>While the gate is closed, a record the old instance is known to have written
 * already ({@link #landed}: what a follower of the output topics saw land, per output
 * partition as after a crash) is dropped at once instead of waiting: the held queries
 * follow the old instance, their JIT warm and their checkpoint current, and what is
 * left for them at the take-over is what the old instance had not written yet.
 *
 * <p>The instance that hands over closes its gate for good ({@link #close}) and waits
 * until Kafka acknowledged every record that passed it ({@link #awaitSent}: {@link Sent},
 * the real-time writers' producer interceptor, counts them out): nothing it writes can
 * follow.
 */
public final class HandOverGate {
    private static final Object LOCK = new Object();
    private static volatile boolean open = true;
    /** "rawTopic\0partition\0topic" -> the highest raw offset the old instance wrote there. */
    private static Map<String, Long> offsets = Map.of();
    /** The same key -> the keys (hex) it wrote at that offset. */
    private static Map<String, Set<String>> keysAt = Map.of();
    /** Output topic -> its partitions, for a topic fenced per partition (after a crash). */
    private static Map<String, Integer> partitionsOf = Map.of();
    /** "rawTopic\0partition\0topic\0outputPartition" -> what landed there (a follower's, {@link #landed}). */
    private static final ConcurrentHashMap<String, Fence> LANDED = new ConcurrentHashMap<>();
    /** Output topic -> its partitions, for {@link #LANDED}. */
    private static final ConcurrentHashMap<String, Integer> LANDED_PARTITIONS = new ConcurrentHashMap<>();
    /** "rawTopic\0partition" -> the highest raw offset a task asked about while the gate was closed. */
    private static final ConcurrentHashMap<String, Long> SEEN = new ConcurrentHashMap<>();
    /** Records that passed the gate and were not yet acknowledged by Kafka. */
    private static final AtomicLong PASSING = new AtomicLong();
    /** Records whose write failed (an acknowledgement with an error). */
    private static final AtomicLong FAILED = new AtomicLong();
    /**
     * What this instance wrote, per raw partition and output topic: the fences it opened
     * with, raised by every record that passed since. Once it closed for good and Kafka
     * acknowledged all of them without an error, these are the next instance's fences.
     */
    private static final ConcurrentHashMap<String, Fence> PASSED = new ConcurrentHashMap<>();

    private record Fence(long offset, Set<String> keys) {
        Fence raise(long at, String key) {
            if (at > offset) {
                return new Fence(at, Set.of(key));
            }
            if (at < offset || keys.contains(key)) {
                return this;
            }
            Set<String> more = new HashSet<>(keys);
            more.add(key);
            return new Fence(offset, Set.copyOf(more));
        }

        Fence higher(Fence other) {
            if (other.offset != offset) {
                return other.offset > offset ? other : this;
            }
            Set<String> more = new HashSet<>(keys);
            more.addAll(other.keys);
            return new Fence(offset, Set.copyOf(more));
        }

        boolean covers(long at, String key) {
            return at < offset || (at == offset && keys.contains(key));
        }
    }

    private HandOverGate() {}

    /** Hold every record until {@link #open}. */
    public static void close() {
        synchronized (LOCK) {
            open = false;
            offsets = Map.of();
            keysAt = Map.of();
            partitionsOf = Map.of();
        }
        LANDED.clear(); // a new hold: its follower tells what landed from its checkpoint on
        LANDED_PARTITIONS.clear();
        SEEN.clear();
    }

    /**
     * Let the records through, less the fenced ones. {@code fences}: one line per raw
     * partition and output topic, tab-separated: raw topic, partition, output topic,
     * highest raw offset written, the keys written at it (hex, comma-separated); after a
     * crash two more: the output partition and the topic's partitions (the fence is that
     * partition's alone).
     */
    public static void open(String fences) {
        Map<String, Long> newOffsets = new HashMap<>();
        Map<String, Set<String>> newKeys = new HashMap<>();
        Map<String, Integer> newPartitions = new HashMap<>();
        for (String line : fences.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f.length != 5 && f.length != 7) {
                throw new IllegalArgumentException("a fence line has 5 or 7 fields: " + line);
            }
            String at = f[0] + '\0' + f[1] + '\0' + f[2];
            if (f.length == 7) {
                newPartitions.put(f[2], Integer.parseInt(f[6]));
                at = at + '\0' + f[5];
            }
            newOffsets.put(at, Long.parseLong(f[3]));
            Set<String> keys = keysOf(f[4]);
            newKeys.put(at, keys);
            if (f.length == 5) { // all up to it is written: the next hand-over's fences start there
                Fence fence = new Fence(Long.parseLong(f[3]), Set.copyOf(keys));
                PASSED.merge(at, fence, (mine, theirs) -> mine.offset() >= theirs.offset() ? mine : theirs);
            }
        }
        synchronized (LOCK) {
            offsets = newOffsets;
            keysAt = newKeys;
            partitionsOf = newPartitions;
            open = true;
            LOCK.notifyAll();
        }
        LANDED.clear(); // the fences say it all from here
        LANDED_PARTITIONS.clear();
    }

    /**
     * What a follower of the output topics saw land since the held queries' checkpoint
     * (lines in {@link #open}'s crash format: raw topic, partition, output topic, highest
     * raw offset, keys at it, output partition, the topic's partitions). A held record it
     * covers is dropped at once: the old instance wrote it, whatever happens next.
     */
    public static void landed(String lines) {
        for (String line : lines.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f.length != 7) {
                throw new IllegalArgumentException("a landed line has 7 fields: " + line);
            }
            LANDED_PARTITIONS.put(f[2], Integer.parseInt(f[6]));
            Fence fence = new Fence(Long.parseLong(f[3]), Set.copyOf(keysOf(f[4])));
            LANDED.merge(f[0] + '\0' + f[1] + '\0' + f[2] + '\0' + f[5], fence, Fence::higher);
        }
        synchronized (LOCK) {
            LOCK.notifyAll();
        }
    }

    /** A fence line's keys: hex, comma-separated, any case. */
    private static Set<String> keysOf(String field) {
        Set<String> keys = new HashSet<>();
        for (String key : field.split(",")) {
            if (!key.isEmpty()) {
                keys.add(key.toLowerCase());
            }
        }
        return keys;
    }

    /** The highest raw offset of this raw partition a task asked about since the gate closed; -1: none. */
    public static long seen(String rawTopic, int partition) {
        return SEEN.getOrDefault(rawTopic + '\0' + partition, -1L);
    }

    /** Whether a follower saw this record land (see {@link #landed}). */
    private static boolean sawLanded(String at, String topic, long offset, String key) {
        Integer partitions = LANDED_PARTITIONS.get(topic);
        if (partitions == null) {
            return false;
        }
        Fence fence = LANDED.get(at + '\0' + partitionOf(key, partitions));
        return fence != null && fence.covers(offset, key);
    }

    public static boolean isOpen() {
        return open;
    }

    /**
     * Whether the old instance wrote this record already: waits while the gate is
     * closed (a stop of the query interrupts the wait).
     */
    public static boolean written(String rawTopic, int partition, String topic, long offset, String hexKey) {
        String at = rawTopic + '\0' + partition + '\0' + topic;
        String key = hexKey == null ? "" : hexKey.toLowerCase();
        while (true) {
            PASSING.incrementAndGet(); // before the look at open: a close then waits for this record
            if (open) {
                break;
            }
            PASSING.decrementAndGet();
            SEEN.merge(rawTopic + '\0' + partition, offset, Math::max); // held: how far it follows
            synchronized (LOCK) {
                while (!open) {
                    if (sawLanded(at, topic, offset, key)) { // the old instance wrote it: on to the next
                        PASSED.compute(at, (k, f) -> f == null ? new Fence(offset, Set.of(key)) : f.raise(offset, key));
                        return true;
                    }
                    try {
                        LOCK.wait();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException("stopped while held at the hand-over gate", e);
                    }
                }
            }
        }
        String fencedAt = at;
        Integer partitions = partitionsOf.get(topic);
        if (partitions != null) {
            fencedAt = at + '\0' + partitionOf(hexKey, partitions);
        }
        Long fence = offsets.get(fencedAt);
        boolean written = fence != null && offset <= fence;
        if (written && offset == fence) {
            Set<String> keys = keysAt.get(fencedAt);
            written = keys != null && hexKey != null && keys.contains(hexKey.toLowerCase());
        }
        if (written) {
            PASSING.decrementAndGet(); // not sent: dropped here
        }
        // in raw order: what passed or was dropped as written is in Kafka up to here
        PASSED.compute(at, (k, f) -> f == null ? new Fence(offset, Set.of(key)) : f.raise(offset, key));
        return written;
    }

    /** The partition Kafka's built-in partitioner gives a record with this key (hex). */
    public static int partitionOf(String hexKey, int partitions) {
        byte[] key = java.util.HexFormat.of().parseHex(hexKey == null ? "" : hexKey);
        return Utils.toPositive(Utils.murmur2(key)) % partitions;
    }

    /**
     * Wait (at most {@code timeoutMs}) until Kafka acknowledged every record that passed
     * the gate; false if some were not (or a task ended between the two): then only
     * stopping the queries makes sure.
     */
    public static boolean awaitSent(long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (PASSING.get() > 0) {
            if (System.currentTimeMillis() > deadline) {
                return false;
            }
            Thread.sleep(1);
        }
        return true;
    }

    /** Records that passed the gate and were not acknowledged yet. */
    public static long passing() {
        return PASSING.get();
    }

    /** Writes that failed since this JVM started (then {@link #passed} is not what landed). */
    public static long failed() {
        return FAILED.get();
    }

    /** What this instance wrote, in {@link #open}'s format (see {@link #PASSED}). */
    public static String passed() {
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, Fence> e : new TreeMap<>(PASSED).entrySet()) {
            String[] at = e.getKey().split("\0", -1);
            out.append(at[0]).append('\t').append(at[1]).append('\t').append(at[2]).append('\t')
                    .append(e.getValue().offset()).append('\t')
                    .append(String.join(",", new java.util.TreeSet<>(e.getValue().keys()))).append('\n');
        }
        return out.toString();
    }

    /** The real-time writers' producer interceptor: a record acknowledged. */
    public static final class Sent implements ProducerInterceptor<Object, Object> {
        @Override
        public ProducerRecord<Object, Object> onSend(ProducerRecord<Object, Object> record) {
            return record;
        }

        /** Once per record: written (acknowledged), or failed (the task then fails). */
        @Override
        public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
            if (exception != null) {
                FAILED.incrementAndGet();
            }
            PASSING.decrementAndGet();
        }

        @Override
        public void close() {}

        @Override
        public void configure(Map<String, ?> configs) {}
    }
}
