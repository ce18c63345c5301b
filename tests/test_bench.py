"""gpurl_bench as CI runs it (`python -m gpurl.apps.bench --quick`, on the CPU): every case end to end, the JSON with every
field of every record, the markdown table listing every case, the chart; a bad flag is one line on stderr, exit 2."""
import dataclasses, importlib.util, json, subprocess, sys

import pytest

from _cli import script_env

def _bench(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpurl.apps.bench", *map(str, args)], cwd=cwd, env=script_env(),
                          capture_output=True, text=True, timeout=300)

def test_quick_suite_end_to_end(tmp_path):
    from gpurl.apps.bench import CASES
    from gpurl.core.timing import Record
    r = _bench("--quick", "--quiet", "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    records = json.loads((tmp_path / "out" / "results.json").read_text())["records"]
    fields = {f.name for f in dataclasses.fields(Record)}
    assert records and all(set(rec) == fields for rec in records)
    measured = [rec for rec in records if rec["variant"] != "skipped"]
    assert all(rec["median"] > 0 and rec["ratio"] > 0 and rec["baseline"] and rec["unit"] for rec in measured)
    assert all(rec["device"] and rec["torch"] and rec["date"] for rec in records)
    table = (tmp_path / "out" / "results.md").read_text()
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and not line.startswith("| case")]
    assert set(rows) == set(CASES), set(CASES) ^ set(rows)          # every case: measured, or skipped with the reason
    optional = {"ensemble": ("gpurl.infer.ensemble",), "vec_env": ("stable_baselines3",),   # skipped where not installed
                "portfolio_env": ("finrl", "stable_baselines3", "quantstats")}
    skippable = {"amp_crossover"} | {c for c, ms in optional.items() if any(importlib.util.find_spec(m) is None for m in ms)}
    assert {rec["case"] for rec in measured} == set(CASES) - skippable
    assert (tmp_path / "out" / "ratios.png").stat().st_size > 0 and table.strip() in r.stdout

@pytest.mark.parametrize("flags, message", [(["--cases", "env_step,nope"], "--cases 'nope' is not one of"),
                                            (["--variants", "fp16"], "--variants 'fp16' is not one of fp32, tf32, bf16"),
                                            (["--device", "tpu"], "--device 'tpu' is not a device")])
def test_bad_flag_is_one_line_exit_2(tmp_path, flags, message):
    r = _bench("--quick", *flags, "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("gpurl_bench: error: ") and message in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()                          # nothing measured, nothing written
