"""The wheel: presets inside (found by load_preset once installed), the ``quail-spark`` command,
no top-level ``jobs`` package, no top-level package named like another installed distribution's."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_carries_presets_and_the_command_and_no_jobs_package(tmp_path):
    # --no-build-isolation: the venv's setuptools builds it (fast, no download)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(REPO)], check=True, timeout=120)
    (whl,) = tmp_path.glob("quail_spark-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert {n.split("/")[0] for n in names} == {"quail_spark", "gpu_worker", "quail_kernels", whl.name.split("-")[0]
                                               + "-" + whl.name.split("-")[1] + ".dist-info"}
    assert {"quail_spark/conf/spark/local-cpu.json", "quail_spark/conf/spark/gpu-cluster.json",
            "quail_spark/conf/engine/cpu.json"} <= set(names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "quail-spark = quail_spark.cli:main" in zipfile.ZipFile(whl).read(entry).decode()

    # installed (outside the checkout), the presets load and the command runs
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(whl)],
                   check=True, timeout=120)
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = ("import quail_spark.presets as p; c = p.load_preset('spark/gpu-cluster'); "
            "print(p.CONF_DIR, c['spark.sql.extensions'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.startswith(str(target)) and "io.quailspark.QuailExtensions" in out
    cmd = subprocess.run([str(target / "bin" / "quail-spark"), "enrich", "--help"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert cmd.returncode == 0 and "--fail-on-error" in cmd.stdout


def test_no_top_level_package_shadows_another_distribution():
    """Each package of ours is ours alone: a top-level name that another installed distribution also
    provides shadows it (from the checkout, or overwrites it in site-packages). ``kernels`` did: it is
    Hugging Face's kernel package, which transformers >= 5.25 requires and imports on every model load."""
    ours = {"quail_spark", "gpu_worker", "quail_kernels"}
    owners = packages_distributions()
    for name in ours:
        others = {d for d in owners.get(name, []) if d.lower().replace("_", "-") != "quail-spark"}
        assert not others, f"top-level package {name!r} is also provided by {sorted(others)}"
    # what broke: transformers' activations import Hugging Face's ``kernels`` when it is installed;
    # from the checkout's root (the tests' and jobs' working directory) it must still be theirs
    code = "import transformers.activations, importlib.util as u; s = u.find_spec('kernels'); print(s and s.origin)"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert not run.stdout.strip().startswith(str(REPO / "kernels")), run.stdout
