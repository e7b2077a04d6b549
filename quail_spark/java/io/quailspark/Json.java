package io.quailspark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.math.BigDecimal;
import java.math.MathContext;

/**
 * The specs of the internal UDFs (the JSON text of their first argument, read by quail_spark/executor.py
 * and quail_spark/explain.py) made and read with Jackson, on Spark's classpath.
 */
final class Json {
    // NaN written bare and read back, as Python's json module does (a score bound may be NaN)
    private static final ObjectMapper MAPPER = JsonMapper.builder().disable(JsonWriteFeature.WRITE_NAN_AS_STRINGS)
        .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS).build();
    private static final MathContext FIGURES = new MathContext(6);

    private Json() {}

    static ObjectNode object() {
        return MAPPER.createObjectNode();
    }

    static ArrayNode array() {
        return MAPPER.createArrayNode();
    }

    /** An estimate as the specs carry it: six significant figures. */
    static double figure(double x) {
        if (Double.isNaN(x) || Double.isInfinite(x)) return x;
        return new BigDecimal(x).round(FIGURES).doubleValue();
    }

    static String text(JsonNode node) {
        try {
            return MAPPER.writeValueAsString(node);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The JSON read from {@code in} (an unreadable or malformed stream raises). */
    static JsonNode read(java.io.InputStream in) throws java.io.IOException {
        return MAPPER.readTree(in);
    }

    /** The JSON of {@code text}, or null where it is none. */
    static JsonNode read(String text) {
        if (text == null) return null;
        try {
            return MAPPER.readTree(text);
        } catch (JsonProcessingException e) {
            return null;
        }
    }
}
