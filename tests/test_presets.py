"""Every engine preset in conf/engine is a valid engine configuration."""
import json
from pathlib import Path

import pytest

from quail_spark import executor

PRESETS = sorted((Path(__file__).resolve().parent.parent / "conf" / "engine").glob("*.json"))


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_engine_preset_is_valid(path):
    preset = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    conf = executor.engine_conf(**preset)
    assert conf["model"] == preset["model"] and conf["device"] == preset["device"]


def test_presets_exist():
    assert {p.stem for p in PRESETS} >= {"cpu", "gpu", "gpu-fp8"}


SPARK_PRESETS = sorted((Path(__file__).resolve().parent.parent / "conf" / "spark").glob("*.json"))


@pytest.mark.parametrize("path", SPARK_PRESETS, ids=[p.stem for p in SPARK_PRESETS])
def test_spark_presets_enable_the_extension_and_the_progress_bar(path):
    from quail_spark.presets import load_preset

    conf = load_preset(f"spark/{path.stem}")
    assert conf["spark.sql.extensions"] == "io.quailspark.QuailExtensions"
    assert conf["spark.ui.showConsoleProgress"] == "true"
    import quail_spark

    assert quail_spark.spark_conf().items() <= conf.items()  # the jar path, once built


def test_load_preset_names_the_choices():
    from quail_spark.presets import load_preset

    with pytest.raises(FileNotFoundError, match="spark/local-cpu"):
        load_preset("spark/nope")
