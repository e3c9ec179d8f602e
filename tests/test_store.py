import os

import yaml

from adwm_core import pipeline
from adwm_core.data import TRAJECTORIES, read_table
from bench import store
from bench.common import cell_config
from conftest import tiny_cell


def test_a_kept_stage_is_restored_into_an_empty_root_and_reused_at_its_key(tiny_policies, tmp_path, monkeypatch):
    raw = yaml.safe_load(open(tiny_cell(tmp_path / "cell.yaml", tiny_policies)))
    raw["name"] = "tiny-store"
    (tmp_path / "store.yaml").write_text(yaml.safe_dump(raw))
    config = cell_config(str(tmp_path / "store.yaml"))
    kept_in = tmp_path / "kept"
    built = pipeline.run(config, "behaviour")
    kept = store.keep(built, kept_in)
    assert kept == kept_in / "tiny-store" / "behaviour" / f"{built.key[:16]}.tar.gz" and kept.exists()
    written = kept.stat().st_mtime_ns
    assert store.keep(built, kept_in) == kept and kept.stat().st_mtime_ns == written  # never rewritten

    monkeypatch.setenv("ADWM_HOME", str(tmp_path / "fresh-root"))
    assert not pipeline.is_finished(pipeline.locate(config, "behaviour"))
    assert store.restore(kept_in) == [f"tiny-store/behaviour/{built.key[:16]}"]
    restored = pipeline.locate(config, "behaviour")
    assert pipeline.is_finished(restored) and restored.key == built.key
    assert read_table(restored.file("trajectories"), TRAJECTORIES).equals(read_table(built.file("trajectories"), TRAJECTORIES))
    reused = []
    pipeline.run(config, "behaviour", on_start=lambda artifact, was_reused: reused.append(was_reused))
    assert reused == [True]
    assert store.restore(kept_in) == []  # a folder the root holds is left as it is

    monkeypatch.setattr(store, "MAX_BYTES", 1)
    assert store.keep(built, tmp_path / "small") is None and not os.path.exists(tmp_path / "small")
