package io.quailspark;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
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
    // the specs' records: snake_case names, a null field absent
    private static final ObjectMapper SPECS = JsonMapper.builder().disable(JsonWriteFeature.WRITE_NAN_AS_STRINGS)
        .propertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE)
        .serializationInclusion(JsonInclude.Include.NON_NULL).build();
    private static final MathContext FIGURES = new MathContext(6);

    private Json() {}

    /** An estimate as the specs carry it: six significant figures. */
    static double figure(double x) {
        if (Double.isNaN(x) || Double.isInfinite(x)) return x;
        return new BigDecimal(x).round(FIGURES).doubleValue();
    }

    /** The JSON text of a spec ({@link Specs}' records). */
    static String spec(Object record) {
        try {
            return SPECS.writeValueAsString(record);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A spec record as a tree (to add a field every kind of spec takes: the budget). */
    static JsonNode tree(Object record) {
        return SPECS.valueToTree(record);
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
