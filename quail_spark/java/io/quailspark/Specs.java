package io.quailspark;

import java.util.List;

import com.fasterxml.jackson.annotation.JsonFormat;

/**
 * The specs of the internal calls: one record per call, the JSON text of its first argument
 * ({@link Json#spec}: snake_case names, a null field absent). quail_spark/specs.py reads each into
 * its dataclass of the same name and fields; the two are checked against each other on every golden
 * plan (tests/quail_spark_planner/test_specs.py). Estimates are rounded to six significant figures
 * ({@link Json#figure}) where a record is made.
 */
final class Specs {
    private Specs() {}

    /** Tokens requested (full prompts) and fresh (computed), and one engine's serial seconds. */
    record Cost(double requested, double fresh, double seconds) {}

    /** The query's token budget and id ({@link QuailBudget} adds it to every priced spec). */
    record Budget(long maxTokens, String query) {}

    /** One ai_if of a chain, in evaluation order, with its estimate. */
    record ChainCall(String template, double selectivity, String selectivitySource, double secondsPerRow,
                     double rank, double evaluated) {}

    /** quail_chain(spec, document): the AI predicates of one filter over one document ({@link QuailFilterChain}). */
    record Chain(String doc, double docTokens, String tokensSource, double rows, String rowsSource,
                 List<ChainCall> calls, Cost cost) {}

    /** One column of an AI join: its rows and tokens, their sources, its cost as the anchor. */
    record Side(String column, double rows, String rowsSource, double tokens, String tokensSource,
                Cost costAsAnchor) {}

    /** {@code ai_score(...) <op> bound}, written [op, bound]. */
    @JsonFormat(shape = JsonFormat.Shape.ARRAY)
    record ScoreBound(String op, double bound) {}

    /** The order {@link QuailAiJoinOrder} chose among a tree's AI joins, and the written one, with their costs. */
    record JoinOrder(List<String> chosen, double seconds, List<String> written, double writtenSeconds) {}

    /**
     * quail_join / quail_join_score: an inner AI join's call ({@link QuailAiJoin}). {@code scoreBounds}: the
     * ON's comparisons of the score with literals; {@code scoreCompared}: the comparison Spark makes with each
     * pair's score; {@code pairs}: the pairs the join order priced.
     */
    record Join(String template, double selectivity, String selectivitySource, Integer anchorArg,
                List<ScoreBound> scoreBounds, String scoreCompared, String anchor, String why, List<Side> sides,
                Cost cost, JoinOrder joinOrder, Double pairs) {}

    /** One AI call of a quail_eval: its function, its arguments' positions, its estimate. */
    record EvalCall(String fn, List<Integer> args, String template, double secondsPerRow, Double outputTokens) {}

    /** quail_eval(spec, args...): the AI calls of one plan node over one document ({@link QuailFuseCalls}). */
    record Eval(List<EvalCall> calls, String doc, double docTokens, String tokensSource, double rows,
                String rowsSource, Cost cost) {}

    /**
     * quail_match / quail_match_score: an outer, semi or anti AI join's call on each row's partners
     * ({@link PartnerMatch}); {@code templateArg}: each pair's template comes first.
     */
    record Match(Boolean templateArg, String template, Integer anchorArg, String kind) {}
}
