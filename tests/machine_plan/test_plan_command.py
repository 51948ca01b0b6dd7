"""``python -m workbench plan``: flags to paste, one JSON object, bad input in one line
with exit status 2 (a machine nothing fits: 1), and only planning's imports."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.machine_plan.gguf_writing import write_shape_gguf as write_gguf
from plan_machines import parts_file
from workbench.app.plan_command import plan_main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def setup(tmp_path):
    model = write_gguf(tmp_path / "m.gguf", layers=16, experts=64, top_k=4, hidden=1024, expert_ff=512, vocab=4096,
                       heads=8, kv_heads=2, head_dim=128)[0]
    return model, parts_file(tmp_path, ram_gib=32, gpus={"gpu_1g6": 1.6, "gpu_1g1": 1.1})


def _fresh_interpreter(probe: str) -> subprocess.CompletedProcess:
    """``probe`` run by a new interpreter of this one, from the repository root."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def _args(model, parts, *extra):
    return ["--model", str(model), "--gpu", "gpu_1g6", "--host", "test_host", "--parts", str(parts), *extra]


def test_the_text_report_ends_with_the_flags_to_paste(setup, capsys):
    """The report ranks plans and prints the llama-server line of the best, both forms."""
    model, parts = setup
    assert plan_main(_args(model, parts, "--context", "2048")) == 0
    out = capsys.readouterr().out
    assert "paste: llama-server -m" in out and "--n-cpu-moe" in out and "-ot 'blk" in out
    assert "CUDA0" in out and "validated on" in out


def test_json_is_one_object(setup, capsys):
    """--json prints exactly one JSON object with --top plans."""
    model, parts = setup
    assert plan_main(_args(model, parts, "--json", "--top", "2")) == 0
    body = json.loads(capsys.readouterr().out)
    assert len(body["plans"]) == 2 and body["runtime"]["name"] == "llama.cpp"


def test_bad_input_is_one_line_and_status_2(setup, tmp_path, capsys):
    """A file that is not a GGUF, an unknown host, a context of 0: one line each, status 2."""
    model, parts = setup
    junk = tmp_path / "junk.gguf"
    junk.write_text("not a model")
    for argv in (_args(junk, parts), ["--model", str(model), "--gpu", "gpu_1g6", "--host", "nope", "--parts", str(parts)],
                 _args(model, parts, "--context", "0")):
        assert plan_main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error:" in err


def test_a_machine_nothing_fits_is_status_1(setup, capsys):
    """Too small a GPU: status 1 and how many GiB are missing on which device."""
    model, parts = setup
    argv = ["--model", str(model), "--gpu", "gpu_1g1", "--host", "test_host", "--parts", str(parts)]
    assert plan_main(argv) == 1
    assert "CUDA0 needs" in capsys.readouterr().err


def test_the_command_imports_only_planning(setup):
    """``python -m workbench plan`` refuses a bad file with status 2 before it imports torch,
    pandas, the decode model, the walkthrough, the views, matplotlib or transformers (a
    fresh interpreter; its CPU time is benchmarks/plan_machine.py's figure, not a test's)."""
    model, parts = setup
    bad = model.with_name("bad.gguf")
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 16)
    probe = ("import runpy, sys, time\n"
             f"sys.argv = ['workbench', 'plan', '--model', {str(bad)!r}, '--host', 'test_host', '--parts', {str(parts)!r}]\n"
             "try:\n    runpy.run_module('workbench', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'transformers', 'ipywidgets', 'torch',\n"
             "               'pandas') or m.startswith(('workbench.views', 'workbench.app.walkthrough', 'workbench.hf',\n"
             "               'workbench.speed', 'workbench.machine_plan.search')))\n"
             "print(code, time.process_time(), heavy)\n")
    done = _fresh_interpreter(probe)
    code, cpu, heavy = done.stdout.split(" ", 2)
    assert code == "2" and heavy.strip() == "[]", done.stdout + done.stderr
    assert "tensors" in done.stderr or "metadata" in done.stderr


def test_the_main_parser_lists_plan(capsys):
    """``python -m workbench --help`` names the plan command."""
    from workbench.app.cli import main
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "plan" in capsys.readouterr().out


def test_a_shipped_name_or_config_needs_a_format(tmp_path, capsys):
    """A shipped name or a config.json plans with --format, and without one is refused
    saying so; the paste line names a placeholder file, not the config."""
    import shutil
    from workbench.machine_plan.model_tensors import shipped_config_path
    parts = parts_file(tmp_path, ram_gib=512, gpus={"gpu_24g": 24})
    base = ["--gpu", "gpu_24g", "--host", "test_host", "--parts", str(parts)]
    assert plan_main(["--model", "qwen3_moe_15b_a2b", *base]) == 2
    assert "--format" in capsys.readouterr().err
    assert plan_main(["--model", "qwen3_moe_15b_a2b", "--format", "q4_k", *base]) == 0
    assert "-m MODEL.gguf" in capsys.readouterr().out
    config = tmp_path / "config.json"
    shutil.copy(shipped_config_path("deepseek_v3_671b"), config)
    assert plan_main(["--model", str(config), "--format", "q2_k", "--json", *base]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["model"]["architecture"] == "deepseek2" and body["plans"][0]["settings"]["n_cpu_moe"] > 3


def test_help_and_a_bad_argument_load_no_command():
    """``python -m workbench --help`` and a bad argument of any command are answered by the
    light parser: torch, matplotlib and the walkthrough are never imported."""
    probe = ("import runpy, sys\n"
             "for argv in (['--help'], ['walkthrough', '--backend', 'tpu']):\n"
             "    sys.argv = ['workbench', *argv]\n"
             "    try:\n        runpy.run_module('workbench', run_name='__main__')\n"
             "    except SystemExit as e:\n        print('exit', e.code)\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'matplotlib', 'pandas'}),\n"
             "      'workbench.app.walkthrough' in sys.modules)\n")
    done = _fresh_interpreter(probe)
    assert done.stdout.splitlines()[-3:] == ["exit 0", "exit 2", "[] False"], done.stdout[-500:] + done.stderr[-1000:]
