"""Optimised logical plan -> lazy Spark DataFrame, and a description of the Spark steps.

Every column of a scan gets an internal name (``alias__column``) until a
Project names the output. Mapping, node by node:

- Scan, Filter, Join, Sort, TopK, Limit: the Spark operations of the same name
  (TopK is ``orderBy`` + ``limit``, which Spark runs as a take-ordered).
- A chain of AIFilters (and the AI columns of the Project right above it):
  ``sortWithinPartitions`` by the document, then one ``mapInArrow`` running the
  chain as a short-circuit AND in the planner's order, the document's KV kept
  across the chain and the added score/classify columns.
- AIJoin without a relational condition: the (filtered) partner side becomes
  one broadcast row holding its rows as a list (at most
  ``quail.join.maxPartnerRows``), cross-joined to the anchor side, which stays
  partitioned across tasks; ``sortWithinPartitions`` by anchor, then
  ``mapInArrow`` evaluates each chunk of anchors against all partners (anchor
  KV once, partners stream) and emits matching pairs with both rows' columns.
- AIJoin with a relational condition: Spark's join makes the candidate pairs,
  sorted by anchor then partner; ``mapInArrow`` keeps the matching ones.

The result is lazy: nothing runs until the DataFrame is used.
"""
from __future__ import annotations

import dataclasses
import functools
import operator

from quail_spark import executor
from quail_spark import plan as P

PARTNERS = "__quail_partners"
MAX_PARTNERS_KEY = "quail.join.maxPartnerRows"
CHUNK_ROWS_KEY = "quail.batch.rows"
COMPARE = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, ">": operator.gt,
           "<=": operator.le, ">=": operator.ge}


class Lowering:
    """Lower one optimised plan. ``settings`` is a :class:`quail_spark.session.Settings`.

    After :meth:`lower`, ``steps`` describes the Spark operations in execution
    order and ``stages`` the AI operators (id, op, label) in evaluation order."""

    def __init__(self, spark, engine_conf: dict, settings, accumulator=None):
        self.spark, self.conf, self.settings, self.acc = spark, engine_conf, settings, accumulator
        self.steps: list[str] = []
        self.stages: list[dict] = []
        self._used: set = set()
        self._limit_for = None  # (AI plan node, n) while lowering below a LIMIT

    def lower(self, plan):
        """The lazy DataFrame of ``plan`` (columns named as the query's SELECT list)."""
        df, _ = self._node(plan)
        return df

    # ------------------------------------------------------------- nodes

    def _node(self, node):
        if isinstance(node, P.Scan):
            return self._scan(node)
        if isinstance(node, P.Filter):
            df, cols = self._node(node.child)
            self._step(f"filter (Spark): {P.render_expr(node.predicate)}")
            return df.filter(_expr(node.predicate, cols)), cols
        if isinstance(node, P.Join):
            return self._join(node)
        if isinstance(node, P.AIFilter):
            chain, _ = P.ai_chain(node)
            return self._pipeline(chain, None)
        if isinstance(node, P.AIJoin):
            return self._ai_join(node)
        if isinstance(node, P.Project):
            return self._project(node)
        if isinstance(node, (P.Sort, P.TopK)):
            df, cols = self._node(node.child)
            keys = [_sort_key(k, cols) for k in node.keys]
            text = ", ".join(P.render_expr(k) for k in node.keys)
            if isinstance(node, P.Sort):
                self._step(f"orderBy({text})")
                return df.orderBy(*keys), cols
            self._step(f"orderBy({text}).limit({node.k})  (Spark takes the top {node.k})")
            return df.orderBy(*keys).limit(node.k), cols
        if isinstance(node, P.Limit):
            return self._limit(node)
        raise TypeError(f"expected a plan node, got {type(node).__name__}")

    def _limit(self, node: P.Limit):
        """LIMIT n. Over an AI operator whose rows reach it unchanged, every task also stops
        after n rows of that operator, and a sort by the first column drains what the tasks
        emitted (so each task ends and reports its engine counters) before Spark's limit."""
        target = _top_ai(node.child)
        self._limit_for = (target, node.n) if target is not None else None
        df, cols = self._node(node.child)
        pushed, self._limit_for = self._limit_for is None and target is not None, None
        if pushed:
            df = df.sortWithinPartitions(_col(df.columns[0])) if df.columns else df
            self._step(f"sortWithinPartitions({df.columns[0] if df.columns else ''}).limit({node.n})"
                       f"  (each task stopped after {node.n} rows)")
        else:
            self._step(f"limit({node.n})")
        return df.limit(node.n), cols

    def _take_limit(self, *nodes) -> int | None:
        """The LIMIT pushed into the AI operator made of ``nodes`` (consumed once)."""
        if self._limit_for is not None and any(n is self._limit_for[0] for n in nodes if n is not None):
            n, self._limit_for = self._limit_for[1], None
            return n
        return None

    def _scan(self, node: P.Scan):
        df = self.spark.table(node.table)
        cols = {}
        for c in node.columns:
            name = f"{node.alias}__{c}"
            while name in self._used:
                name += "_"
            self._used.add(name)
            cols[P.ColumnRef(node.alias, c)] = name
        self._step(f"scan {node.table} AS {node.alias} [{', '.join(node.columns)}]")
        return df.select(*[_col(c.name).alias(n) for c, n in cols.items()]), cols

    def _join(self, node: P.Join):
        (left, lcols), (right, rcols) = self._node(node.left), self._node(node.right)
        cols = {**lcols, **rcols}
        if node.condition is None:
            self._step("crossJoin (Spark)")
            return left.crossJoin(right), cols
        self._step(f"join (Spark) on {P.render_expr(node.condition)}")
        return left.join(right, _expr(node.condition, cols), "inner"), cols

    def _project(self, node: P.Project):
        ai_items = [i for i in node.items if isinstance(i, P.AI_ITEMS)]
        if not ai_items:
            df, cols = self._node(node.child)
        elif isinstance(node.child, P.AIFilter) and not node.sort_keys:
            df, cols = self._pipeline(P.ai_chain(node.child)[0], node)  # one pass: chain, then columns
        else:
            df, cols = self._pipeline((), node)
        out, names = [], {}
        for item in node.items:
            name = P.item_name(item)
            if isinstance(item, P.AI_ITEMS):
                value = _col(cols[("item", item)])
            else:
                value = _expr(item.expr if isinstance(item, P.Alias) else item, cols)
            out.append(value.alias(name))
            names[P.ColumnRef(None, name)] = name
        self._step("select " + ", ".join(P.render_expr(i) if not isinstance(i, P.AI_ITEMS) else i.alias
                                         for i in node.items))
        return df.select(*out), names

    # ------------------------------------------------------------- AI operators

    def _pipeline(self, chain, project):
        """sortWithinPartitions + one mapInArrow: AND chain in order, then the Project's AI columns."""
        from pyspark.sql.types import DoubleType, StringType, StructField, StructType

        from gpu_worker import partition as part

        limit = self._take_limit(project, chain[-1] if chain else None)
        base = chain[0].child if chain else project.child
        df, cols = self._node(base)
        cols = dict(cols)
        sort_keys = chain[0].sort_keys if chain else project.sort_keys
        if sort_keys:
            df = df.sortWithinPartitions(*[_col(cols[c]) for c in sort_keys])
            self._step(f"sortWithinPartitions({', '.join(P.render_expr(c) for c in sort_keys)})"
                       "  (rows sharing a document prefix neighbour)")
        preds = tuple(part.Predicate(_doc(P.doc_columns(f.template), cols), P.question_text(f.template),
                                     self._stage("filter", f"ai_if({P.render_expr(f.template)})"))
                      for f in chain)
        added, aliases, fields = [], [], list(df.schema.fields)
        for item in (i for i in (project.items if project else ()) if isinstance(i, P.AI_ITEMS)):
            name = self._fresh(f"__ai_{item.alias}")
            cols[("item", item)] = name
            score = isinstance(item, P.AIScore)
            bare = not score and item.template.text.strip() == "{0}"
            question = "" if bare else P.question_text(item.template)
            label = P.render_expr(item).rsplit(" AS ", 1)[0]
            added.append(part.AddColumn("score" if score else "classify", name,
                                        _doc(P.doc_columns(item.template), cols), question,
                                        self._stage("score" if score else "classify", label),
                                        tuple(getattr(item, "labels", ()))))
            fields.append(StructField(name, DoubleType() if score else StringType(), True))
            aliases.append(item.alias)
        spec = part.PipelineSpec(preds, tuple(added), self.settings.chunk_rows, limit)
        task = functools.partial(executor.pipeline_task, self.conf, spec, self.acc)
        labels = {s["id"]: s["label"] for s in self.stages}
        what = "AI chain, short-circuit AND in this order" if chain else "add AI columns"
        stop = "" if limit is None else f", each task stops after {limit} rows"
        lines = [f"mapInArrow: {what} (chunks of {spec.chunk_rows} rows{stop})"]
        lines += [f"    {i}. {labels[p.stage]}" + ("  [document KV kept for the next]" * (f.retain == "document"))
                  for i, (f, p) in enumerate(zip(chain, preds), 1)]
        lines += [f"    + column {item_alias} = {labels[a.stage]}"
                  for item_alias, a in zip(aliases, added)]
        self._step("\n".join(lines))
        return df.mapInArrow(task, StructType(fields)), cols

    def _ai_join(self, node: P.AIJoin):
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        from gpu_worker import partition as part

        limit = self._take_limit(node)
        anchor_side, partner_side = ((node.left, node.right) if node.anchor in P.aliases(node.left)
                                     else (node.right, node.left))
        (adf, acols), (pdf, pcols) = self._node(anchor_side), self._node(partner_side)
        cols = {**acols, **pcols}
        a, b = P.anchor_column(node), P.partner_column(node)
        label = f"ai_if({P.render_expr(node.template)})"
        stop = "" if limit is None else f" (each task stops after {limit} pairs)"
        spec = part.JoinSpec(anchor=_doc((a,), cols), partner=_doc((b,), cols),
                             question=P.join_question_text(node), stage=self._stage("join", label),
                             max_partners=self.settings.max_partner_rows,
                             max_partners_key=MAX_PARTNERS_KEY, chunk_rows=self.settings.chunk_rows,
                             limit=limit)
        if node.condition is None:
            limit = self.settings.max_partner_rows
            packed = pdf.limit(limit + 1).select(
                F.collect_list(F.struct(*[_col(c) for c in pdf.columns])).alias(PARTNERS))
            pairs = adf.crossJoin(F.broadcast(packed)).sortWithinPartitions(_col(cols[a]))
            spec = dataclasses.replace(spec, partners=PARTNERS)
            task = functools.partial(executor.join_cross_task, self.conf, spec, self.acc)
            schema = adf.schema.fields + pdf.schema.fields
            self._step(f"broadcast partner side {P.render_expr(b)} as one list (at most {limit} rows, "
                       f"conf {MAX_PARTNERS_KEY!r}); crossJoin to anchors {P.render_expr(a)} "
                       f"(anchors stay partitioned across tasks)")
            self._step(f"sortWithinPartitions({P.render_expr(a)})")
            self._step(f"mapInArrow: AI join {label}, anchor {P.render_expr(a)} computed once per "
                       f"anchor, partners stream against it; matching pairs out{stop}")
        else:
            pairs = (adf.join(pdf, _expr(node.condition, cols), "inner")
                     .sortWithinPartitions(_col(cols[a]), _col(cols[b])))
            task = functools.partial(executor.join_pairs_task, self.conf, spec, self.acc)
            schema = pairs.schema.fields
            self._step(f"join (Spark) on {P.render_expr(node.condition)}; sortWithinPartitions("
                       f"{P.render_expr(a)}, {P.render_expr(b)})")
            self._step(f"mapInArrow: AI join {label} over the candidate pairs, anchor "
                       f"{P.render_expr(a)} computed once per anchor group; matching pairs out{stop}")
        return pairs.mapInArrow(task, StructType(list(schema))), cols

    # ------------------------------------------------------------- helpers

    def _stage(self, op: str, label: str) -> str:
        sid = f"s{len(self.stages) + 1}"
        self.stages.append({"id": sid, "op": op, "label": label})
        return sid

    def _fresh(self, name: str) -> str:
        while name in self._used:
            name += "_"
        self._used.add(name)
        return name

    def _step(self, text: str) -> None:
        self.steps.append(text)

    def describe(self) -> str:
        """The physical plan as numbered steps, in execution order."""
        lines = ["== Physical plan (Spark) =="]
        for i, step in enumerate(self.steps, 1):
            first, *rest = step.split("\n")
            lines.append(f"{i}. {first}")
            lines.extend("   " + r for r in rest)
        return "\n".join(lines)


def _top_ai(node):
    """The AI operator whose output rows reach ``node``'s parent unchanged, if any."""
    if isinstance(node, P.Project):
        if any(isinstance(i, P.AI_ITEMS) for i in node.items):
            return node
        node = node.child
    return node if isinstance(node, (P.AIFilter, P.AIJoin)) else None


def _doc(columns, cols):
    from gpu_worker.partition import Doc

    return Doc(tuple(cols[c] for c in columns), tuple(c.name for c in columns))


def _col(name: str):
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _sort_key(key: P.SortKey, cols):
    c = _col(cols[key.expr])
    return c.desc() if key.descending else c.asc()


def _expr(e, cols):
    """A relational plan expression as a Spark Column."""
    from pyspark.sql import functions as F

    if isinstance(e, P.ColumnRef):
        return _col(cols[e])
    if isinstance(e, P.Literal):
        return F.lit(e.value)
    if isinstance(e, P.Comparison):
        return COMPARE[e.op](_expr(e.left, cols), _expr(e.right, cols))
    if isinstance(e, P.And):
        return functools.reduce(operator.and_, [_expr(t, cols) for t in e.terms])
    if isinstance(e, P.InList):
        out = _expr(e.expr, cols).isin([v.value for v in e.values])
    elif isinstance(e, P.Like):
        out = _expr(e.expr, cols).like(e.pattern.value)
    elif isinstance(e, P.IsNull):
        out = _expr(e.expr, cols).isNull()
    elif isinstance(e, P.Between):
        out = _expr(e.expr, cols).between(_expr(e.low, cols), _expr(e.high, cols))
    else:
        raise TypeError(f"expected a relational expression, got {type(e).__name__}: {e!r}")
    return ~out if e.negated else out
