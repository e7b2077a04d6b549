package io.quailspark;

import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.catalog.CatalogColumnStat;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.ColumnStat;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StringType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The one cost model of AI calls: speed-of-light seconds of the tokens a prompt computes,
 * for the model shape the installed engine runs (docs/architecture.md, "Speed of light"):
 *
 * <pre>
 * FLOPs = 2 * N_lin * fresh + 4 * L * n_q * d * attended_pairs + 2 * d_model * |answer ids|
 * seconds = FLOPs / rate + prompt_s      (prompt_s: a prompt's fixed host seconds, measured on a CPU, else 0)
 * </pre>
 *
 * {@code quail_spark.install} puts the shape into the session's conf ({@code spark.quail.model.*});
 * without it the rules price SmolLM2-135M on a CPU. Token counts: a template's from its
 * characters; a document column's from Spark's column statistics ({@code avgLen} of
 * {@code ANALYZE TABLE ... COMPUTE STATISTICS FOR COLUMNS}), else a {@code tokens} hint, else
 * {@link #DEFAULT_DOC_TOKENS}. KV sharing: a predicate after the first of a fused chain
 * computes only its question; a join's anchor prefix is computed once per anchor.
 */
final class AiCost {
    static final String CONF = "spark.quail.model.";
    static final double DEFAULT_SELECTIVITY = 0.5;
    static final double DEFAULT_DOC_TOKENS = 300;
    static final double DEFAULT_ROWS = 1000;      // a side whose rows Spark cannot estimate
    static final double CHARS_PER_TOKEN = 4.0;  // bytes per token without the installed tokenizer's figure
    // fixed parts of a prompt in tokens without the installed tokenizer's figures (a chat template's estimate)
    static final double HEADER = 12, SEPARATOR = 2, DOC2_LABEL = 5, CUE = 6, ANSWER_IDS = 2;

    final String model;
    final double nLin, layers, qHeads, headDim, hidden, rate, attnRate;
    // fixed seconds of each prompt (a segment of fresh tokens) the engine computes, whatever its length: the host
    // work around it, measured where it is not negligible (a CPU engine), else 0
    final double promptSeconds;
    // the prompt frame in tokens (install() measures it with the model's tokenizer, spark.quail.model.frame_*):
    // before the document, around a filter's question, between the anchor and the question of a join, per pair
    final double head, ask, joinMid, joinTail;

    private AiCost(String model, double[] shape, double[] frame) {
        this.model = model;
        this.nLin = shape[0];
        this.layers = shape[1];
        this.qHeads = shape[2];
        this.headDim = shape[3];
        this.hidden = shape[4];
        this.rate = shape[5];
        this.attnRate = shape[6];
        this.promptSeconds = shape[7];
        this.head = frame[0];
        this.ask = frame[1];
        this.joinMid = frame[2];
        this.joinTail = frame[3];
    }

    /**
     * The shape of this session's engine, from spark.quail.model.* (SmolLM2-135M on a CPU by default):
     * the rate of its linear layers and of its attention (measured by the engine where install() found
     * the figure, else a preset) and its prompt frame.
     */
    static AiCost session() {
        double rate = conf("rate");
        return new AiCost(SQLConf.get().getConfString(CONF + "name", Contract.DEFAULT_MODEL.get("name")),
            new double[] {conf("n_lin"), conf("layers"), conf("q_heads"), conf("head_dim"), conf("hidden"), rate,
                conf("attn_rate", rate), conf("prompt_s", 0)},
            new double[] {conf("frame_head", HEADER), conf("frame_ask", SEPARATOR + CUE),
                conf("frame_join_mid", SEPARATOR), conf("frame_join_tail", DOC2_LABEL + CUE)});
    }

    /** spark.quail.model.{@code key}, else the default model's (the jar's contract). */
    private static double conf(String key) {
        return conf(key, Contract.defaultModel(key));
    }

    private static double conf(String key, double dflt) {
        try {
            return Double.parseDouble(SQLConf.get().getConfString(CONF + key, Double.toString(dflt)).trim());
        } catch (NumberFormatException e) {
            return dflt;
        }
    }

    /** Requested and fresh tokens and SoL seconds of some prompts. */
    static final class Cost {
        final double requested, fresh, seconds;

        Cost(double requested, double fresh, double seconds) {
            this.requested = requested;
            this.fresh = fresh;
            this.seconds = seconds;
        }

        Cost plus(Cost o) {
            return new Cost(requested + o.requested, fresh + o.fresh, seconds + o.seconds);
        }

        Cost times(double k) {
            return new Cost(requested * k, fresh * k, seconds * k);
        }

        /** As a spec carries it: six significant figures. */
        Specs.Cost spec() {
            return new Specs.Cost(Json.figure(requested), Json.figure(fresh), Json.figure(seconds));
        }
    }

    static final Cost ZERO = new Cost(0, 0, 0);

    /** {@code n} prompts with {@code cached} tokens from cache and {@code fresh} computed; {@code head} answer rows. */
    Cost prompts(double n, double cached, double fresh, double head) {
        double pairs = fresh * cached + fresh * (fresh + 1) / 2;
        double seconds = (2 * nLin * fresh + 2 * hidden * head) / rate + 4 * layers * qHeads * headDim * pairs / attnRate;
        return new Cost(n * (cached + fresh), n * fresh, n * (seconds + promptSeconds));
    }

    /**
     * One row of a filter (score, classify): the document computed, or already cached in its chain. The
     * frame before the document is every row's: the engine computes it once, so a row reads it from cache.
     */
    Cost filter(double docTokens, double questionTokens, boolean docCached) {
        double doc = head + docTokens, question = ask + questionTokens;
        return docCached ? prompts(1, doc, question, ANSWER_IDS) : prompts(1, head, docTokens + question, ANSWER_IDS);
    }

    /**
     * One row of a decode call: its prompt(s) as a filter's (the document computed, or cached when an
     * earlier call on the row computed it; ai_extract forks one prompt per field from it), then
     * {@code output} tokens decoded, each a decode step of one token attending to the prompt and the
     * tokens before it. {@code output}: max_tokens for ai_generate, fields x the per-field max for
     * ai_extract (an upper bound: decoding stops earlier at the end of an answer).
     */
    Cost decode(double docTokens, double questionTokens, boolean docCached, double output, int prompts) {
        Cost prompt = filter(docTokens, questionTokens, docCached);
        double ask = SEPARATOR + questionTokens + CUE;
        if (prompts > 1) prompt = prompt.plus(prompts(prompts - 1, HEADER + docTokens, ask, 0));
        double context = HEADER + docTokens + ask + output / (2.0 * prompts);
        Cost steps = prompts(output, context, 1, 0);
        return new Cost(prompt.requested + output, prompt.fresh + output, prompt.seconds + steps.seconds);
    }

    /**
     * An AI join over anchors x partners: anchor and question once per anchor (after the frame, computed
     * once for all), partner and cue per pair.
     */
    Cost join(double anchors, double anchorTokens, double partners, double partnerTokens, double questionTokens) {
        double prefix = head + anchorTokens + joinMid + questionTokens;
        Cost once = prompts(anchors, head, prefix - head, 0);
        Cost perPair = prompts(anchors * partners, prefix, joinTail + partnerTokens, ANSWER_IDS);
        return new Cost(perPair.requested, once.fresh + perPair.fresh, once.seconds + perPair.seconds);
    }

    /** Hellerstein's rank: cost per row / (1 - selectivity). */
    static double rank(double seconds, double selectivity) {
        return seconds / (1.0 - Math.min(Math.max(selectivity, 0.0), 0.999));
    }

    static double textTokens(String text) {
        return Math.max(1.0, Math.ceil(text.length() / bytesPerToken()));
    }

    /** Tokens per word piece ({@link AiSample#pieces}) of the installed tokenizer (install() measures it), else 1.1. */
    static double tokensPerPiece() {
        double t = conf("tokens_per_piece", 1.1);
        return t > 0 ? t : 1.1;
    }

    /** UTF-8 bytes per token of the installed tokenizer on text (install() measures it), else 4. */
    static double bytesPerToken() {
        double b = conf("bytes_per_token", CHARS_PER_TOKEN);
        return b > 0 ? b : CHARS_PER_TOKEN;
    }

    /** Rows of a plan (see {@link AiRows}), or null when unknown. */
    static Double rows(LogicalPlan p) {
        return AiRows.of(p).rows;
    }

    /** Where {@link #rows} of a plan came from, or "default" when it is unknown. */
    static String rowsSource(LogicalPlan p) {
        AiRows r = AiRows.of(p);
        return r.rows != null ? r.source : "default";
    }

    /** Average tokens of a column from Spark's column statistics (avgLen in bytes), or null without them. */
    static Double statsTokens(Expression col, LogicalPlan plan) {
        if (!(col instanceof Attribute)) return null;
        Attribute a = (Attribute) col;
        for (LogicalPlan leaf : CollectionConverters.asJava(plan.collectLeaves())) {
            if (!leaf.outputSet().contains(a)) continue;
            Option<ColumnStat> cs = leaf.stats().attributeStats().get(a);
            if (cs.isDefined() && cs.get().avgLen().isDefined()) {
                return ((Number) cs.get().avgLen().get()).doubleValue() / bytesPerToken();
            }
            if (leaf instanceof LogicalRelation) {
                Option<CatalogTable> t = ((LogicalRelation) leaf).catalogTable();
                if (t.isDefined() && t.get().stats().isDefined()) {
                    Option<CatalogColumnStat> c = t.get().stats().get().colStats().get(a.name());
                    if (c.isDefined() && c.get().avgLen().isDefined()) {
                        return ((Number) c.get().avgLen().get()).doubleValue() / bytesPerToken();
                    }
                }
            }
        }
        return null;
    }

    /** Tokens of a document column and where the figure came from: statistics, hint, or default. */
    static final class Tokens {
        final double tokens;
        final String source;

        Tokens(double tokens, String source) {
            this.tokens = tokens;
            this.source = source;
        }
    }

    static Tokens docTokens(Expression col, LogicalPlan plan, Double hinted) {
        if (hinted != null) return new Tokens(hinted, "hint");
        Double stats = statsTokens(col, plan);
        if (stats != null) return new Tokens(stats, "statistics");
        Double local = localTokens(col, plan);
        if (local != null) return new Tokens(local, "in-memory rows");
        AiSample.Facts f = AiSample.of(plan, col);
        if (f != null && f.avgPieces != null) return new Tokens(Math.max(1.0, f.avgPieces * tokensPerPiece()), f.source());
        return new Tokens(DEFAULT_DOC_TOKENS, "default");
    }

    /**
     * Average tokens of a string column of rows the driver holds (a DataFrame made from local data,
     * a VALUES list: a LocalRelation), measured on up to {@code LOCAL_SAMPLE} of them; null elsewhere.
     */
    static Double localTokens(Expression col, LogicalPlan plan) {
        if (!(col instanceof Attribute) || !(((Attribute) col).dataType() instanceof StringType)) return null;
        Attribute a = (Attribute) col;
        for (LogicalPlan leaf : CollectionConverters.asJava(plan.collectLeaves())) {
            if (!(leaf instanceof LocalRelation)) continue;
            List<Attribute> out = CollectionConverters.asJava(leaf.output());
            int at = -1;
            for (int i = 0; i < out.size(); i++) if (out.get(i).exprId().equals(a.exprId())) at = i;
            if (at < 0) continue;
            double pieces = 0;
            int n = 0;
            for (InternalRow r : CollectionConverters.asJava(((LocalRelation) leaf).data())) {
                if (n >= LOCAL_SAMPLE) break;
                if (r.isNullAt(at)) continue;
                pieces += AiSample.pieces(r.getUTF8String(at).toString());
                n++;
            }
            return n == 0 ? null : Math.max(1.0, pieces / n * tokensPerPiece());
        }
        return null;
    }

    static final int LOCAL_SAMPLE = 10_000;

    /**
     * Of two join sides without document lengths, the one at least twice the other's bytes (Spark's
     * size estimate: the files' size for a file source), 0 or 1; -1 when either size is unknown (an RDD)
     * or they are close. The larger side streams as the anchor side, the smaller is broadcast.
     */
    static int largerSide(LogicalPlan a, LogicalPlan b) {
        double unknown = SQLConf.get().defaultSizeInBytes();
        double sa = a.stats().sizeInBytes().doubleValue(), sb = b.stats().sizeInBytes().doubleValue();
        if (sa >= unknown || sb >= unknown) return -1;
        return sa >= 2 * sb ? 0 : sb >= 2 * sa ? 1 : -1;
    }
}
