"""The command line, run as a user runs it (a subprocess): every bad argument is one line
on stderr and exit status 2, checked before any work, with nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # each case starts an interpreter that imports torch


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WORKBENCH_DISABLE_CUDA="1")
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """A folder with the bad inputs the cases point at."""
    root = tmp_path_factory.mktemp("cli")
    (root / "a_file.txt").write_text("not a folder")
    (root / "binary.json").write_bytes(bytes(range(256)) * 4)
    (root / "broken.json").write_text("{not json")
    (root / "partial.json").write_text('{"hidden_size": 64}')
    (root / "config_dir").mkdir()
    return root


#: (name, arguments, what the one-line error must say); every case exits 2.
CASES = [
    ("missing config", ["walkthrough", "--config", "absent.json", "--out", "out1"], "--config: no file 'absent.json'"),
    ("config is a directory", ["walkthrough", "--config", "config_dir", "--out", "out2"], "--config: config path config_dir is a directory"),
    ("config is binary", ["walkthrough", "--config", "binary.json", "--out", "out3"], "--config: config file binary.json is not a text file"),
    ("config is not json", ["walkthrough", "--config", "broken.json", "--out", "out4"], "--config: config file broken.json is not valid JSON"),
    ("config lacks keys", ["walkthrough", "--config", "partial.json", "--out", "out5"], "--config: partial.json: config is missing required keys"),
    ("bad full config", ["walkthrough", "--full-config", "broken.json", "--out", "out6"], "--full-config: config file broken.json is not valid JSON"),
    ("out is a file", ["walkthrough", "--out", "a_file.txt"], "--out: 'a_file.txt' is a file"),
    ("out under a file", ["walkthrough", "--out", "a_file.txt/sub"], "--out: 'a_file.txt/sub' cannot be made: a_file.txt is a file"),
    ("unknown backend", ["walkthrough", "--backend", "tpu", "--out", "out7"], "argument --backend: invalid choice: 'tpu'"),
    ("cuda without a gpu", ["walkthrough", "--backend", "cuda", "--out", "out8"], "--backend cuda: CUDA is unavailable"),
    ("no sweep workers", ["walkthrough", "--sweep-workers", "0", "--out", "out9"], "--sweep-workers: 0 processes; give 1 or more"),
    ("negative sweep workers", ["walkthrough", "--sweep-workers", "-3", "--out", "out11"], "--sweep-workers: -3 processes; give 1 or more"),
    ("empty out", ["walkthrough", "--out", ""], "--out: '' names no folder"),
    ("blank out", ["walkthrough", "--out", "   "], "names no folder; give a folder for the tables"),
    ("config too large to run", ["walkthrough", "--config", "full", "--out", "out10"], "--config full: 34.7 B parameters (64.6 GiB of weights) is more than the 2.0 B"),
    ("unknown example", ["propagate", "--example", "nope"], "--example: unknown example 'nope'; valid ones are mlp"),
    ("rule without a device", ["propagate", "--place", "aten.linear"], "--place takes DEVICE=PATTERN"),
    ("unknown device", ["propagate", "--place", "tpu:0=aten.linear"], "--place: bad device in placement rules: unknown device type 'tpu'"),
    ("bad pattern prefix", ["propagate", "--place", "cuda:0=layer:x"], "--place: pattern 'layer:x' has an unknown prefix"),
    ("strict unmatched", ["propagate", "--strict", "--place", "cuda:0=aten.nothing"], "--place: placement failed"),
    ("no command", [], "the following arguments are required: command"),
    ("unknown option", ["propagate", "--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.fixture(scope="module")
def outcomes(files):
    """Every case run once, four at a time (each is a fresh interpreter importing torch)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda case: _run(case[1], files), CASES))
    return dict(zip((c[0] for c in CASES), done))


@pytest.mark.parametrize("name, args, message", CASES, ids=[c[0] for c in CASES])
def test_a_bad_argument_is_one_line_and_status_2(outcomes, files, name, args, message):
    """Exit status 2, stderr exactly one line naming the option and what is valid (no
    traceback), nothing on stdout, and no output folder made."""
    result = outcomes[name]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("python -m workbench") and message in lines[0], lines[0]
    assert result.stdout == ""
    assert not any((files / f"out{i}").exists() for i in range(1, 11))


def test_a_good_command_still_runs(files):
    """The checks let a good command through: ``propagate`` of an example exits 0 and says
    its propagated graph equals eager."""
    result = _run(["propagate", "--example", "mlp", "--place", "cuda:0=aten.linear"], files)
    assert result.returncode == 0, result.stderr
    assert "propagated graph equals eager: True" in result.stdout


def test_the_walkthrough_writes_every_published_run_to_anchors_csv(tmp_path, capsys):
    """anchors.csv holds one row per published decode run (modeled or with the reason it is
    not), the printout names every fitted term with its leave-one-out error, and a modeled
    row's ratio is its modeled over its published speed."""
    import pandas as pd

    from workbench.app.cli import write_published_anchors
    from workbench.speed.regime_model import regime_model
    from workbench.speed.published_runs import published_decode_runs

    write_published_anchors(tmp_path)
    table = pd.read_csv(tmp_path / "anchors.csv")
    published = published_decode_runs()
    assert sorted(table["id"]) == sorted(published["id"])
    modeled = table.dropna(subset=["modeled tok/s"])
    assert len(modeled) >= 4
    assert ((modeled["modeled tok/s"] / modeled["published tok/s"] - modeled["ratio"]).abs() < 1e-9).all()
    assert table.loc[table["modeled tok/s"].isna(), "not modeled because"].str.len().gt(0).all()
    printed = capsys.readouterr().out
    for term in regime_model().terms:
        assert f"fitted {term.name}:" in printed and "leave-one-out" in printed
