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
