"""How many tasks run an AI operator at once, read from the query's physical plan before it runs.

The cost model prices one engine's serial seconds (the rate an engine measured in a task, with
that task's cores or GPU). A stage runs as many of those engines at once as it has tasks in
flight: the fewer of the session's task slots (executor cores over ``spark.task.cpus``: a local
``local[2]`` session two, a GPU cluster one per GPU) and the operator's input partitions (the
first exchange below the AI call on its streamed side, else its scan's partitions; AQE may
still coalesce a shuffle of small data), and never more than its rows. The estimate of a
query's wall is each operator's engine seconds over that number (``operators.estimated``).

Spark Connect has no handle on the physical plan from Python: there every operator counts as
one task at a time (the estimate is then an upper bound where tasks run in parallel).
"""
from __future__ import annotations

from quail_spark.explain import calls_in_line
from quail_spark.operators import op_id


def slots(spark) -> int:
    """Tasks the session runs at once: its default parallelism (local[N]: N; a cluster: executor cores)
    over ``spark.task.cpus``."""
    try:
        cores = spark.sparkContext.defaultParallelism
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext
        return 1
    per_task = int(spark.conf.get("spark.task.cpus", "1") or 1)
    return max(1, cores // max(per_task, 1))


def task_threads(spark) -> int:
    """The threads a task's Python worker computes with: PySpark sets its OMP_NUM_THREADS to
    ``spark.executorEnv.OMP_NUM_THREADS``, else ``spark.task.cpus`` (SPARK-42613)."""
    from quail_spark.metrics import conf_value

    for key in ("spark.executorEnv.OMP_NUM_THREADS", "spark.task.cpus"):
        value = conf_value(spark, key)
        if value and str(value).strip().isdigit():
            return max(1, int(value))
    return 1


def tasks_at_once(df) -> dict:
    """{operator id: tasks that run it at once} for the rules' AI operators of ``df``'s physical plan
    ({} where the plan is out of reach: Spark Connect)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return {}
    try:
        plan = jdf.queryExecution().executedPlan()
        if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
            plan = plan.executedPlan()  # the plan before any stage ran: exchanges in place
    except Exception:  # noqa: BLE001 - a plan Spark cannot prepare has no estimate either
        return {}
    n_slots, out = slots(df.sparkSession), {}
    for node in _nodes(plan):
        calls = _calls(node)
        if not calls:
            continue
        n = min(n_slots, _partitions(node.children().apply(0)))
        for kind, spec in calls:
            out[op_id(kind, spec)] = max(1, n)
    return out


def _nodes(plan):
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        ch = node.children()
        stack += [ch.apply(i) for i in range(ch.size())]


def _calls(node) -> list:
    """[(kind, spec)] of the rules' internal calls a Python-evaluating node computes ([] for any other node)."""
    name = node.getClass().getSimpleName()
    if "Python" not in name and "Arrow" not in name:
        return []
    return calls_in_line(node.simpleString(1 << 20))


def _partitions(node) -> int:
    """The partitions of ``node``'s output: the first node down its streamed side whose partitioning says,
    else its leaf's RDD (built, not run: a file scan's splits, a local relation's slices)."""
    while True:
        try:
            n = node.outputPartitioning().numPartitions()
        except Exception:  # noqa: BLE001 - a partitioning of children that disagree until exchanges are in
            n = 0
        if n > 0:
            return n
        ch = node.children()
        if ch.size() == 0:
            try:
                return max(1, node.execute().getNumPartitions())
            except Exception:  # noqa: BLE001
                return 1
        kids = [ch.apply(i) for i in range(ch.size())]
        streamed = [k for k in kids if "Broadcast" not in k.getClass().getSimpleName()]
        node = (streamed or kids)[0]
