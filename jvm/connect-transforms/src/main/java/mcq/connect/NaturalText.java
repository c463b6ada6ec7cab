package mcq.connect;

import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * Debezium's temporal encodings in a change event's row images ({@code before}, {@code after})
 * written as the natural text mcq's change contract carries, inside the Connect worker.
 *
 * <p>With this transform a connector can write its values as JSON <em>without</em> their
 * Connect schema: the schema is only needed to know that an integer is a day number or a
 * count of microseconds, and that knowledge is used here, once per field, instead of being
 * sent with every record (a record with its schema is about 6 times larger; reading and
 * parsing it was most of the normaliser's time on a backlog).
 *
 * <p>The texts are exactly those of {@code streams/debezium.py} (the normaliser's decoder for
 * records that do carry their schema):
 * <ul>
 *   <li>date (days, or Connect's Date): {@code 1987-06-05}</li>
 *   <li>timestamp (milli/micro/nano, or Connect's Timestamp): {@code 2024-02-29T13:14:15} plus
 *       {@code .ffffff} when the fraction is not zero</li>
 *   <li>timestamptz (Debezium's ISO text): the same instant in UTC with the same fraction rule
 *       and a {@code Z}</li>
 *   <li>time (milli/micro/nano, or Connect's Time): {@code 13:14:15} plus {@code .ffffff}
 *       when the fraction is not zero ({@code 24:00:00} stays)</li>
 *   <li>date and timestamp's {@code infinity} and {@code -infinity} as those words (as
 *       timestamptz's already are), not the far-off dates Debezium's encodings of them read as</li>
 *   <li>numeric's special values (a field whose schema parameter
 *       {@code __debezium.source.column.type} is {@code NUMERIC}: the connector's
 *       {@code datatype.propagate.source.type}): PostgreSQL's own {@code NaN}, {@code Infinity},
 *       {@code -Infinity} where Debezium's string mode writes {@code NAN},
 *       {@code POSITIVE_INFINITY}, {@code NEGATIVE_INFINITY} (which no numeric column accepts
 *       back); every other numeric value is already PostgreSQL's text</li>
 *   <li>an array of dates, timestamps or times: each element as above (Debezium sends day
 *       numbers and counts of microseconds there too), NULL elements kept</li>
 *   <li>a {@code bit(n)} with n above 1 (a field named {@code io.debezium.data.Bits} whose source type,
 *       propagated as for numeric, is {@code BIT}): PostgreSQL's text of it, {@code 101}, where
 *       Debezium sends the bits as bytes, lowest bit first, trailing zero bytes cut; its
 *       {@code length} parameter gives n. ({@code bit(1)} arrives as a boolean and stays one;
 *       {@code varbit} loses its length in the same bytes, so {@code mcq connect apply} refuses it.)</li>
 * </ul>
 * Every other field, and every record that is not a change event (tombstones, heartbeats),
 * passes unchanged. A NULL stays NULL: fields are read without their schema's default
 * ({@code Struct.get} answers a NULL in a column declared {@code DEFAULT x} with x, which
 * Debezium puts in the schema), as the connector's JsonConverter writes them
 * ({@code replace.null.with.default=false}). A record marks itself as converted with the header {@code mcq.text: 1}.
 */
public class NaturalText<R extends ConnectRecord<R>> implements Transformation<R> {

    public static final String HEADER = "mcq.text";

    private static final String DATE = "io.debezium.time.Date";
    private static final String CONNECT_DATE = "org.apache.kafka.connect.data.Date";
    private static final String MILLI_TIMESTAMP = "io.debezium.time.Timestamp";
    private static final String CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp";
    private static final String MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp";
    private static final String NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp";
    private static final String ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp";
    private static final String MILLI_TIME = "io.debezium.time.Time";
    private static final String CONNECT_TIME = "org.apache.kafka.connect.data.Time";
    private static final String MICRO_TIME = "io.debezium.time.MicroTime";
    private static final String NANO_TIME = "io.debezium.time.NanoTime";
    private static final String BITS = "io.debezium.data.Bits";
    /** The schema parameter Debezium's {@code datatype.propagate.source.type} sets. */
    static final String SOURCE_TYPE = "__debezium.source.column.type";

    /** Envelope schema -> its converted schema; a connector has one per table and version. */
    private final Map<Schema, Schema> converted = new LinkedHashMap<>(64, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Schema, Schema> eldest) {
            return size() > 1024;
        }
    };

    @Override
    public void configure(Map<String, ?> configs) {
    }

    @Override
    public ConfigDef config() {
        return new ConfigDef();
    }

    @Override
    public void close() {
    }

    @Override
    public R apply(R record) {
        Schema schema = record.valueSchema();
        if (!(record.value() instanceof Struct value) || schema == null || schema.type() != Schema.Type.STRUCT) {
            return record;
        }
        if (!isImage(schema.field("after")) && !isImage(schema.field("before"))) {
            return record;
        }
        Schema out = converted.computeIfAbsent(schema, NaturalText::envelopeSchema);
        Struct result = new Struct(out);
        for (Field field : schema.fields()) {
            Object x = value.getWithoutDefault(field.name());
            if (x instanceof Struct row && isImage(field)) {
                x = row(row, out.field(field.name()).schema());
            }
            result.put(field.name(), x);
        }
        R next = record.newRecord(record.topic(), record.kafkaPartition(), record.keySchema(), record.key(), out,
                result, record.timestamp(), record.headers());
        next.headers().addString(HEADER, "1");
        return next;
    }

    private static boolean isImage(Field field) {
        return field != null && (field.name().equals("after") || field.name().equals("before"))
                && field.schema().type() == Schema.Type.STRUCT;
    }

    private static Schema envelopeSchema(Schema envelope) {
        SchemaBuilder builder = copyHeader(SchemaBuilder.struct(), envelope);
        for (Field field : envelope.fields()) {
            builder.field(field.name(), isImage(field) ? rowSchema(field.schema()) : field.schema());
        }
        return builder.build();
    }

    private static Schema rowSchema(Schema row) {
        SchemaBuilder builder = copyHeader(SchemaBuilder.struct(), row);
        for (Field field : row.fields()) {
            Schema s = field.schema();
            if (isTemporal(s.name()) || isBits(s)) {
                SchemaBuilder text = SchemaBuilder.string();
                builder.field(field.name(), s.isOptional() ? text.optional().build() : text.build());
            } else if (isTemporalArray(s)) {
                SchemaBuilder texts = SchemaBuilder.array(Schema.OPTIONAL_STRING_SCHEMA);
                builder.field(field.name(), s.isOptional() ? texts.optional().build() : texts.build());
            } else {
                builder.field(field.name(), s);
            }
        }
        return builder.build();
    }

    private static SchemaBuilder copyHeader(SchemaBuilder builder, Schema schema) {
        if (schema.name() != null) {
            builder.name(schema.name());
        }
        if (schema.version() != null) {
            builder.version(schema.version());
        }
        if (schema.doc() != null) {
            builder.doc(schema.doc());
        }
        if (schema.isOptional()) {
            builder.optional();
        }
        return builder;
    }

    private static boolean isTemporal(String name) {
        if (name == null) {
            return false;
        }
        return switch (name) {
            case DATE, CONNECT_DATE, MILLI_TIMESTAMP, CONNECT_TIMESTAMP, MICRO_TIMESTAMP, NANO_TIMESTAMP,
                    ZONED_TIMESTAMP, MILLI_TIME, CONNECT_TIME, MICRO_TIME, NANO_TIME -> true;
            default -> false;
        };
    }

    /** An array of dates, timestamps or times: its elements are made text as a lone value is. */
    private static boolean isTemporalArray(Schema schema) {
        return schema.type() == Schema.Type.ARRAY && schema.valueSchema() != null
                && isTemporal(schema.valueSchema().name());
    }

    private static Struct row(Struct row, Schema out) {
        Struct result = new Struct(out);
        for (Field field : row.schema().fields()) {
            Object x = row.getWithoutDefault(field.name());
            if (x != null && isTemporal(field.schema().name())) {
                x = text(field.schema().name(), x);
            } else if (x instanceof List<?> values && isTemporalArray(field.schema())) {
                String name = field.schema().valueSchema().name();
                List<String> texts = new ArrayList<>(values.size());
                for (Object value : values) {
                    texts.add(value == null ? null : text(name, value));
                }
                x = texts;
            } else if (x != null && isBits(field.schema())) {
                x = bits(x instanceof java.nio.ByteBuffer buffer ? bytes(buffer) : (byte[]) x,
                        Integer.parseInt(field.schema().parameters().get("length")));
            } else if (x instanceof String number && isNumeric(field.schema())) {
                x = numeric(number);
            }
            result.put(field.name(), x);
        }
        return result;
    }

    private static boolean isNumeric(Schema schema) {
        return schema.type() == Schema.Type.STRING && schema.parameters() != null
                && "NUMERIC".equalsIgnoreCase(schema.parameters().get(SOURCE_TYPE));
    }

    /** A {@code bit(n)}, n above 1: Debezium's Bits with its length, from a column whose source type is BIT. */
    private static boolean isBits(Schema schema) {
        return BITS.equals(schema.name()) && schema.parameters() != null
                && "BIT".equalsIgnoreCase(schema.parameters().get(SOURCE_TYPE))
                && schema.parameters().get("length") != null;
    }

    private static byte[] bytes(java.nio.ByteBuffer buffer) {
        byte[] out = new byte[buffer.remaining()];
        buffer.duplicate().get(out);
        return out;
    }

    /**
     * Debezium's bytes of a {@code bit(length)} (bit i of the value in byte i / 8, bit i % 8,
     * lowest first; trailing zero bytes cut) -> PostgreSQL's text, highest bit first.
     */
    static String bits(byte[] littleEndian, int length) {
        StringBuilder text = new StringBuilder(length);
        for (int i = length - 1; i >= 0; i--) {
            boolean set = i / 8 < littleEndian.length && ((littleEndian[i / 8] >> (i % 8)) & 1) == 1;
            text.append(set ? '1' : '0');
        }
        return text.toString();
    }

    /** A numeric column's text in Debezium's string mode -> PostgreSQL's spelling of it. */
    static String numeric(String text) {
        return switch (text) {
            case "NAN" -> "NaN";
            case "POSITIVE_INFINITY" -> "Infinity";
            case "NEGATIVE_INFINITY" -> "-Infinity";
            default -> text;
        };
    }

    /** One temporal value as its natural text. */
    static String text(String name, Object value) {
        return switch (name) {
            case DATE -> date(((Number) value).longValue());
            case CONNECT_DATE -> LocalDate.ofEpochDay(
                    Math.floorDiv(((java.util.Date) value).getTime(), 86_400_000L)).toString();
            case MILLI_TIMESTAMP -> milliTimestamp(((Number) value).longValue());
            case CONNECT_TIMESTAMP -> timestamp(((java.util.Date) value).getTime() * 1000);
            case MICRO_TIMESTAMP -> microTimestamp(((Number) value).longValue());
            case NANO_TIMESTAMP -> timestamp(Math.floorDiv(((Number) value).longValue(), 1000L));
            case ZONED_TIMESTAMP -> zoned(value.toString());
            case MILLI_TIME -> timeOfDay(((Number) value).longValue() * 1000);
            case CONNECT_TIME -> timeOfDay(((java.util.Date) value).getTime() * 1000);
            case MICRO_TIME -> timeOfDay(((Number) value).longValue());
            case NANO_TIME -> timeOfDay(Math.floorDiv(((Number) value).longValue(), 1000L));
            default -> value.toString();
        };
    }

    /*
     * PostgreSQL's infinity and -infinity, as Debezium encodes them: its driver's infinite
     * instants (PGStatement.DATE_POSITIVE_INFINITY, ms) as they come out of its conversions,
     * each far outside the dates and timestamps PostgreSQL holds, so never a real value.
     */
    static final long DAY_INFINITY = -622_191_234L;
    static final long DAY_MINUS_INFINITY = -625_821_272L;
    static final long MILLI_INFINITY = 9_223_372_036_825_200_000L;
    static final long MILLI_MINUS_INFINITY = -9_223_372_036_832_400_000L;

    /** Days since the epoch -> {@code yyyy-MM-dd}; PostgreSQL's infinities by name. */
    static String date(long days) {
        if (days == DAY_INFINITY) {
            return "infinity";
        }
        return days == DAY_MINUS_INFINITY ? "-infinity" : LocalDate.ofEpochDay(days).toString();
    }

    static String milliTimestamp(long millis) {
        if (millis == MILLI_INFINITY) {
            return "infinity";
        }
        return millis == MILLI_MINUS_INFINITY ? "-infinity" : timestamp(millis * 1000);
    }

    static String microTimestamp(long micros) {
        if (micros == Long.MAX_VALUE) {
            return "infinity";
        }
        return micros == Long.MIN_VALUE ? "-infinity" : timestamp(micros);
    }

    /** {@code yyyy-MM-ddTHH:mm:ss} plus {@code .ffffff} when the fraction is not zero. */
    static String timestamp(long micros) {
        long seconds = Math.floorDiv(micros, 1_000_000L);
        int fraction = (int) Math.floorMod(micros, 1_000_000L);
        LocalDateTime t = LocalDateTime.ofEpochSecond(seconds, fraction * 1000, ZoneOffset.UTC);
        String text = String.format("%04d-%02d-%02dT%02d:%02d:%02d", t.getYear(), t.getMonthValue(),
                t.getDayOfMonth(), t.getHour(), t.getMinute(), t.getSecond());
        return fraction == 0 ? text : text + String.format(".%06d", fraction);
    }

    /** Debezium's ISO text of a timestamptz -> the same instant in UTC; unparsable text stays. */
    static String zoned(String text) {
        try {
            Instant instant = OffsetDateTime.parse(text).toInstant();
            return timestamp(Math.addExact(Math.multiplyExact(instant.getEpochSecond(), 1_000_000L),
                    instant.getNano() / 1000)) + "Z";
        } catch (DateTimeParseException | ArithmeticException e) {
            return text;
        }
    }

    /** Microseconds since midnight -> {@code HH:MM:SS[.ffffff]}. */
    static String timeOfDay(long micros) {
        long seconds = Math.floorDiv(micros, 1_000_000L);
        long fraction = micros - seconds * 1_000_000L;
        String text = String.format("%02d:%02d:%02d", seconds / 3600, seconds / 60 % 60, seconds % 60);
        return fraction == 0 ? text : text + String.format(".%06d", fraction);
    }
}
