"""spark-submit entry point of ``quail-spark enrich`` (same arguments).

    spark-submit --properties-file gpu-cluster.conf jobs/enrich.py notes.json --fail-on-error

Under spark-submit the job uses the session spark-submit configured (pass the
GPU preset's keys with --conf or --properties-file); see docs/enrichment.md, "On a
cluster".
"""
import sys

from quail_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["enrich", *sys.argv[1:]]))
