import pyarrow.compute as pc
from adwm_core.cli import main
from adwm_core.data import TRAJECTORIES, read_table


def test_collect_writes_a_valid_file_with_a_falling_success_curve(tmp_path, capsys):
    out = str(tmp_path / "traj.parquet")
    args = ["collect", "--episodes", "8", "--epsilons", "0,1", "--workers", "1", "--out", out]
    assert main(args) == 0
    table = read_table(out, TRAJECTORIES)
    success = {}
    for eps in (0.0, 1.0):
        rows = table.filter(pc.equal(table["epsilon"], eps))
        success[eps] = len(set(rows.filter(rows["success"])["episode"].to_pylist())) / 8
    assert success[0.0] == 1.0 and success[1.0] < 1.0
    assert "success" in capsys.readouterr().out
    assert main(args) == 2  # the file exists: kept, and said so
    assert "already exists; pass --overwrite" in capsys.readouterr().err


def test_collect_refuses_bad_input_before_running_anything(tmp_path, capsys):
    out = tmp_path / "never.parquet"
    assert main(["collect", "--task", "chess", "--workers", "1", "--out", str(out)]) == 2
    assert "unknown TextWorld-Express game 'chess'" in capsys.readouterr().err and not out.exists()
    assert main(["collect", "--env", "webshopp", "--out", str(out)]) == 2
    assert "known environments:" in capsys.readouterr().err
