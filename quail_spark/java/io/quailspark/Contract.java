package io.quailspark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What the Python side defines once and the rules read: the jar's {@code io/quailspark/contract.json},
 * written by {@code quail_spark/extension.py} (its {@code contract()}) from gpu_worker.ai_calls and
 * quail_spark.cost when the jar is built: the AI functions by kind, the internal UDFs, the decode
 * calls' default lengths, and the default model's {@code spark.quail.model.*} settings.
 */
final class Contract {
    private static final JsonNode ROOT = load();

    /** Function name (lower case) -> kind: the public AI functions and quail_extract, ai_extract's UDF. */
    static final Map<String, String> KINDS = strings(ROOT.get("functions"));
    /** The internal UDFs the rules make (gpu_worker.ai_calls.INTERNAL). */
    static final List<String> INTERNAL = list(ROOT.get("internal"));
    /** The SQL name of ai_extract, the function the extension injects (AiExtractFunction). */
    static final String EXTRACT_FUNCTION = ROOT.get("extract_function").asText();
    /** The UDF install() registers for ai_extract (the JSON text of each row's object). */
    static final String EXTRACT_UDF = ROOT.get("extract_udf").asText();
    static final int GENERATE_TOKENS = ROOT.get("decode_defaults").get("generate_tokens").asInt();
    static final int FIELD_TOKENS = ROOT.get("decode_defaults").get("field_tokens").asInt();
    static final int SUMMARY_WORDS = ROOT.get("decode_defaults").get("summary_words").asInt();
    /** spark.quail.model.* (without the prefix) of the default model, priced when install() set none. */
    static final Map<String, String> DEFAULT_MODEL = strings(ROOT.get("default_model"));

    private Contract() {}

    /** {@code name}, checked to be one of the internal UDFs the Python side registers. */
    static String internal(String name) {
        if (!INTERNAL.contains(name)) {
            throw new IllegalStateException("quail-spark: " + name + " is not an internal UDF of the contract "
                + INTERNAL);
        }
        return name;
    }

    /** The default model's setting {@code key} as a number. */
    static double defaultModel(String key) {
        return Double.parseDouble(DEFAULT_MODEL.get(key));
    }

    private static JsonNode load() {
        try (InputStream in = Contract.class.getResourceAsStream("contract.json")) {
            if (in == null) {
                throw new IllegalStateException("quail-spark: the jar has no io/quailspark/contract.json; "
                    + "build it with quail_spark.extension.jar_path()");
            }
            return Json.read(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static Map<String, String> strings(JsonNode node) {
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : node.properties()) out.put(e.getKey(), e.getValue().asText());
        return Collections.unmodifiableMap(out);
    }

    private static List<String> list(JsonNode node) {
        List<String> out = new ArrayList<>();
        node.forEach(n -> out.add(n.asText()));
        return Collections.unmodifiableList(out);
    }
}
