import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adwm_core.data import (
    ESTIMATES,
    GROUND_TRUTH,
    LOGPROBS,
    TRAJECTORIES,
    SchemaError,
    read_table,
    table_from_rows,
    write_table,
)

ROWS = {
    TRAJECTORIES.name: {
        "cell": "c", "source": "behavior", "policy": "pi_b@p0", "epsilon": None, "seed": 0, "episode": 3,
        "task": "coin", "variation": 11, "t": 0, "task_description": "find the coin", "observation": "a room",
        "next_observation": "a corridor",
        "response": "Thought: go.\nAction: move east", "action": "move east", "action_valid": True,
        "admissible": ["move east", "look around"], "reward": 0.0, "done": False, "score": 0.0, "success": False,
        "behavior_logprob": -1.5,
    },
    LOGPROBS.name: {"episode": 3, "t": 0, "policy": "eval", "epsilon": 0.25, "logprob": -712.5, "n_tokens": 3,
               "n_admissible": 2, "greedy_action": "look around"},
    ESTIMATES.name: {"cell": "c", "estimator": "WIS", "policy": "pi_e", "epsilon": 0.5, "seed": 1, "value": 0.4,
                "ci_low": 0.3, "ci_high": 0.5, "log_abs_value": -0.916290731874155, "sign": 1,
                "log_share": None, "off_log_distance": None, "ess": 31.5, "top_weight_share": 0.08},
    GROUND_TRUTH.name: {"cell": "c", "policy": "pi_e", "epsilon": 0.5, "n_episodes": 64, "mean_return": 0.4,
                   "success_rate": 0.375, "stderr": 0.06, "success_stderr": 0.06},
}


@pytest.mark.parametrize("contract", [TRAJECTORIES, LOGPROBS, ESTIMATES, GROUND_TRUTH], ids=lambda c: c.name)
def test_round_trip_preserves_every_value(contract, tmp_path):
    row = ROWS[contract.name]
    path = str(tmp_path / f"{contract.name}.parquet")
    write_table(table_from_rows([row, row], contract), path, contract)
    back = read_table(path, contract)
    assert back.schema == contract.schema
    assert back.to_pylist() == [row, row]


def test_an_optional_column_may_be_absent_and_reads_as_null(tmp_path):
    """Trajectories written before ``behavior_logprob`` existed still read; other columns stay required."""
    row = {k: v for k, v in ROWS[TRAJECTORIES.name].items() if k != "behavior_logprob"}
    path = str(tmp_path / "old.parquet")
    pq.write_table(pa.Table.from_pylist([row]), path)
    assert read_table(path, TRAJECTORIES).to_pylist() == [{**row, "behavior_logprob": None}]
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in row.items() if k != "reward"}]), path)
    with pytest.raises(SchemaError, match="missing column 'reward'"):
        read_table(path, TRAJECTORIES)


def test_any_fsspec_url_works():
    table = table_from_rows([ROWS[ESTIMATES.name]], ESTIMATES)
    write_table(table, "memory://adwm-test/estimates.parquet", ESTIMATES)
    assert read_table("memory://adwm-test/estimates.parquet", ESTIMATES).equals(table)


def _write_raw(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_missing_column_names_the_column_and_the_file(tmp_path):
    row = dict(ROWS[ESTIMATES.name])
    del row["ci_high"]
    path = _write_raw(tmp_path / "bad.parquet", [row])
    with pytest.raises(SchemaError, match=r"bad\.parquet: missing column 'ci_high'"):
        read_table(path, ESTIMATES)


def test_wrong_type_names_the_column(tmp_path):
    row = dict(ROWS[GROUND_TRUTH.name], n_episodes="sixty-four")
    path = _write_raw(tmp_path / "gt.parquet", [row])
    with pytest.raises(SchemaError, match=r"gt\.parquet: column 'n_episodes' has type string.*int64"):
        read_table(path, GROUND_TRUTH)


def test_null_in_required_column_and_unknown_category(tmp_path):
    path = _write_raw(tmp_path / "lp.parquet", [dict(ROWS[LOGPROBS.name], logprob=None)])
    with pytest.raises(SchemaError, match="column 'logprob' has 1 null"):
        read_table(path, LOGPROBS)
    with pytest.raises(SchemaError, match=r"column 'source' has value\(s\) \['replay'\]"):
        table_from_rows([dict(ROWS[TRAJECTORIES.name], source="replay")], TRAJECTORIES)


def test_a_file_that_is_not_parquet(tmp_path):
    path = tmp_path / "junk.parquet"
    path.write_text("cell,estimator\nc,IS\n")
    with pytest.raises(SchemaError, match="junk.parquet: not a readable Parquet file"):
        read_table(str(path), ESTIMATES)
    with pytest.raises(FileNotFoundError, match="no estimates file here"):
        read_table(str(tmp_path / "absent.parquet"), ESTIMATES)


def test_interrupted_write_leaves_no_file_and_existing_files_are_kept(tmp_path, monkeypatch):
    path = str(tmp_path / "est.parquet")
    table = table_from_rows([ROWS[ESTIMATES.name]], ESTIMATES)

    def crash(table, where, **kwargs):
        where.write(b"PAR1 half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(KeyboardInterrupt):
        write_table(table, path, ESTIMATES)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()

    write_table(table, path, ESTIMATES)
    with pytest.raises(FileExistsError, match="already exists"):
        write_table(table, path, ESTIMATES)
    write_table(table_from_rows([ROWS[ESTIMATES.name]] * 2, ESTIMATES), path, ESTIMATES, overwrite=True)
    assert read_table(path, ESTIMATES).num_rows == 2
