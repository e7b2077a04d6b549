package io.quailspark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Limit$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Rows and document lengths measured on a bounded sample, for plans over a source that Spark has no
 * statistics for: a Parquet, JSON or CSV folder read without {@code ANALYZE}, or the RDD of a DataFrame
 * made from a Python list, a pandas frame without Arrow or an RDD ({@code LogicalRDD}).
 *
 * <p>The plan below an AI call (its relational filters and projections over one such leaf) runs once
 * over the leaf's first {@code spark.quail.sample.rows} rows (default 500; 0 turns sampling off): the
 * rows that pass give the relational operators' selectivity and the document column's average length.
 * The leaf's rows are exact when the sample read fewer rows than the limit, else Parquet footers'
 * counts, else the files' bytes over the sample's bytes per row; an RDD's rows are its count as far as
 * it gets in {@code COUNT_MS} (Spark's countApprox). Facts are cached per (files with their sizes and
 * modification times, or the RDD's id; plan below the call; column), so a second query plans without
 * scanning; each carries what its scan cost.
 */
final class AiSample {
    static final String ROWS_CONF = "spark.quail.sample.rows";
    static final int DEFAULT_ROWS = 500;
    static final int MAX_FOOTERS = 200;  // more Parquet files than this: rows extrapolated by bytes
    private static final Map<String, Facts> CACHE = new ConcurrentHashMap<>();

    /** What a sample measured: rows out of the plan, average UTF-8 bytes of the column, the scan's cost. */
    static final class Facts {
        final double rows, leafRows, sampled, passed;
        final Double avgPieces;  // word pieces of the column's non-NULL values that passed, null without a column
        final double seconds;
        boolean cached;

        Facts(double rows, double leafRows, double sampled, double passed, Double avgPieces, double seconds) {
            this.rows = rows;
            this.leafRows = leafRows;
            this.sampled = sampled;
            this.passed = passed;
            this.avgPieces = avgPieces;
            this.seconds = seconds;
        }

        String source() {
            return cached ? String.format(Locale.ROOT, "sample of %.0f rows, cached", sampled)
                : String.format(Locale.ROOT, "sample of %.0f rows, scan %.2f s", sampled, seconds);
        }
    }

    /**
     * The facts of {@code plan} (and its string document {@code col}: a column, or a deterministic expression of
     * columns such as {@code CAST(id AS STRING)} or {@code concat(title, body)}; null for rows only), or null.
     * Over several leaves (a join's result), a document's facts are those of the input its columns come from.
     */
    static Facts of(LogicalPlan plan, Expression col) {
        int limit = limit();
        if (limit <= 0) return null;
        if (col != null) {
            if (!(col.dataType() instanceof StringType) || !col.deterministic()
                || col.exists(x -> x instanceof PythonUDF || x instanceof SubqueryExpression)  // no job at planning
                || col.references().isEmpty() || !col.references().subsetOf(plan.outputSet())) return null;
            plan = columnInput(plan, col.references());
            if (plan == null) return null;
        }
        if (hasPythonUdf(plan)) return null;
        List<LogicalPlan> leaves = CollectionConverters.asJava(plan.collectLeaves());
        if (leaves.size() != 1) return null;
        LogicalPlan leaf = leaves.get(0);
        HadoopFsRelation fs = leaf instanceof LogicalRelation && ((LogicalRelation) leaf).relation() instanceof HadoopFsRelation
            ? (HadoopFsRelation) ((LogicalRelation) leaf).relation() : null;
        if (fs == null && !(leaf instanceof LogicalRDD) || leaf.isStreaming()) return null;
        String source = fs != null ? files(fs) : "rdd " + ((LogicalRDD) leaf).rdd().id();
        String key = source + "|" + limit + "|" + plan.canonicalized() + "|" + (col == null ? "" : col.canonicalized());
        Facts hit = CACHE.get(key);
        if (hit != null) {
            hit.cached = true;
            return hit;
        }
        try {
            Facts f = measure(plan, leaf, fs, col, limit);
            CACHE.put(key, f);
            return f;
        } catch (RuntimeException e) {  // a source that cannot be read here is priced as before
            return null;
        }
    }

    /** The part of {@code plan} over one leaf that outputs the columns {@code refs}, down through the inputs of
     * joins (and every other node of several inputs); null when they are made above them or come from two. */
    private static LogicalPlan columnInput(LogicalPlan plan, AttributeSet refs) {
        while (plan.children().size() > 1) {
            LogicalPlan next = null;
            for (LogicalPlan c : CollectionConverters.asJava(plan.children())) {
                if (refs.subsetOf(c.outputSet())) next = c;
            }
            if (next == null) return null;
            plan = next;
        }
        return plan.children().isEmpty() || plan.collectLeaves().size() == 1 ? plan
            : columnInput(plan.children().head(), refs);
    }

    static int limit() {
        try {
            return Integer.parseInt(SQLConf.get().getConfString(ROWS_CONF, Integer.toString(DEFAULT_ROWS)).trim());
        } catch (NumberFormatException e) {
            return DEFAULT_ROWS;
        }
    }

    private static Facts measure(LogicalPlan plan, LogicalPlan leaf, HadoopFsRelation fs, Expression doc, int limit) {
        long t0 = System.nanoTime();
        SparkSession spark = SparkSession.active();
        LogicalPlan limited = (LogicalPlan) Limit$.MODULE$.apply(Literal.create(limit, DataTypes.IntegerType), leaf);
        InternalRow[] leafRows = collect(spark, limited);
        double rowBytes = 0;
        List<Attribute> out = new ArrayList<>(CollectionConverters.asJava(((LogicalPlan) leaf).output()));
        for (InternalRow r : leafRows) rowBytes += textBytes(r, out);
        double n = leafRows.length;
        double total = n < limit ? n : fs == null ? rddRows((LogicalRDD) leaf, n) : footerRows(fs);
        if (total < 0) total = n == 0 ? 0 : fs.location().sizeInBytes() / Math.max(1.0, rowBytes / n);
        LogicalPlan below = replace(plan, leaf, limited);
        List<NamedExpression> cols = new ArrayList<>();
        cols.add(doc == null ? (Attribute) plan.output().head() : doc instanceof Attribute ? (Attribute) doc
            : new Alias(doc, "document", NamedExpression$.MODULE$.newExprId(), Catalyst.seq(new ArrayList<String>()),
                Option.empty(), Catalyst.seq(new ArrayList<String>())));
        InternalRow[] passedRows = collect(spark, new Project(CollectionConverters.asScala(cols).toSeq(), below));
        double passed = passedRows.length, pieces = 0, nonNull = 0;
        if (doc != null) {
            for (InternalRow r : passedRows) {
                if (r.isNullAt(0)) continue;
                pieces += pieces(r.getUTF8String(0).toString());
                nonNull++;
            }
        }
        double selectivity = n == 0 ? 0 : passed / n;
        Double avg = doc == null || nonNull == 0 ? null : pieces / nonNull;
        return new Facts(total * selectivity, total, n, passed, avg, (System.nanoTime() - t0) / 1e9);
    }

    /**
     * Word pieces of a text: runs of letters, single digits, single other non-space characters (what a
     * byte-level BPE tokenizer's pre-split gives, with punctuation apart); install() measures the
     * installed tokenizer's tokens per piece ({@code spark.quail.model.tokens_per_piece}), the same
     * split in Python (quail_spark/calibration.py).
     */
    static int pieces(String text) {
        Matcher m = PIECE.matcher(text);
        int n = 0;
        while (m.find()) n++;
        return n;
    }

    private static final Pattern PIECE = Pattern.compile("[\\p{L}\\p{M}]+|\\p{Nd}|[^\\p{L}\\p{M}\\p{Nd}\\s]");

    private static InternalRow[] collect(SparkSession spark, LogicalPlan plan) {
        return Dataset.ofRows(spark, plan).queryExecution().executedPlan().executeCollect();
    }

    /** {@code plan} with {@code leaf} replaced by {@code with}. */
    private static LogicalPlan replace(LogicalPlan plan, LogicalPlan leaf, LogicalPlan with) {
        if (plan == leaf) return with;
        List<LogicalPlan> kids = new ArrayList<>();
        for (LogicalPlan c : CollectionConverters.asJava(plan.children())) kids.add(replace(c, leaf, with));
        return plan.withNewChildren(CollectionConverters.asScala(kids).toSeq());
    }

    /** Bytes a row takes as text (a JSON or CSV line's order of magnitude): values plus a little per field. */
    private static double textBytes(InternalRow r, List<Attribute> out) {
        double b = 1;
        for (int i = 0; i < out.size(); i++) {
            DataType t = out.get(i).dataType();
            if (r.isNullAt(i)) continue;
            b += out.get(i).name().length() + 4
                + (t instanceof StringType ? r.getUTF8String(i).numBytes() : t.defaultSize());
        }
        return b;
    }

    /** Milliseconds the count of an RDD's rows may take at planning time (Spark's countApprox). */
    static final long COUNT_MS = 1000;

    /** Rows of an RDD leaf: its count, or as far as the count got in {@code COUNT_MS}; at least {@code n}. */
    private static double rddRows(LogicalRDD leaf, double n) {
        return Math.max(n, leaf.rdd().countApprox(COUNT_MS, 0.95).initialValue().mean());
    }

    /** Rows of a Parquet source from its footers; -1 for another format or too many files. */
    private static double footerRows(HadoopFsRelation fs) {
        if (!(fs.fileFormat() instanceof ParquetFileFormat)) return -1;
        String[] files = fs.location().inputFiles();
        if (files.length > MAX_FOOTERS) return -1;
        Configuration conf = SparkSession.active().sessionState().newHadoopConf();
        double rows = 0;
        try {
            for (String f : files) {
                @SuppressWarnings("deprecation")
                List<BlockMetaData> blocks = ParquetFileReader.readFooter(conf, new Path(f)).getBlocks();
                for (BlockMetaData b : blocks) rows += b.getRowCount();
            }
        } catch (java.io.IOException e) {
            return -1;
        }
        return rows;
    }

    /** The files of a source with their sizes and modification times (the cache key). */
    private static String files(HadoopFsRelation fs) {
        StringBuilder key = new StringBuilder();
        Configuration conf = SparkSession.active().sessionState().newHadoopConf();
        for (String f : fs.location().inputFiles()) {
            key.append(f);
            try {
                Path p = new Path(f);
                FileStatus s = p.getFileSystem(conf).getFileStatus(p);
                key.append(':').append(s.getLen()).append(':').append(s.getModificationTime());
            } catch (java.io.IOException e) {
                key.append(":?");
            }
            key.append(';');
        }
        return key.toString();
    }

    private static boolean hasPythonUdf(LogicalPlan plan) {
        for (Expression e : CollectionConverters.asJava(plan.expressions())) {
            if (e.exists(x -> x instanceof PythonUDF)) return true;
        }
        for (LogicalPlan c : CollectionConverters.asJava(plan.children())) if (hasPythonUdf(c)) return true;
        return false;
    }
}
