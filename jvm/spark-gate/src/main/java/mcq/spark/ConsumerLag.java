package mcq.spark;

import java.lang.management.ManagementFactory;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * How far the Kafka consumers of this JVM are behind, per topic and partition, from
 * Kafka's documented JMX metrics (streams/lag.py). Here rather than through py4j: the
 * platform MBean server's class is not exported by its module, so py4j's reflection
 * cannot call it.
 */
public final class ConsumerLag {
    private static final String PATTERN = "kafka.consumer:type=consumer-fetch-manager-metrics,*";

    private ConsumerLag() {}

    /**
     * One line per consumer and partition it reads: the topic as the metric tags it,
     * the partition, {@code records-lead} (position minus the log's start) and {@code
     * records-lag} (the end at the last fetch minus the position), tab-separated; NaN
     * where the consumer has not fetched yet.
     */
    public static String sample() throws JMException {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        StringBuilder out = new StringBuilder();
        for (ObjectName name : server.queryNames(new ObjectName(PATTERN), null)) {
            String topic = name.getKeyProperty("topic");
            String partition = name.getKeyProperty("partition");
            if (topic == null || partition == null) {
                continue; // the consumer's or a topic's totals
            }
            try {
                Object lead = server.getAttribute(name, "records-lead");
                Object lag = server.getAttribute(name, "records-lag");
                out.append(unquoted(topic)).append('\t').append(unquoted(partition)).append('\t')
                        .append(lead).append('\t').append(lag).append('\n');
            } catch (JMException gone) {
                // the consumer closed between the query and the read
            }
        }
        return out.toString();
    }

    private static String unquoted(String value) {
        return value.length() >= 2 && value.startsWith("\"") && value.endsWith("\"")
                ? ObjectName.unquote(value) : value;
    }
}
