"""bench/store: the bench's upstream kept in the repository — restored into an empty root and reused
at its key, world models kept compact and rebuilt exactly, keys and store held in step."""

import shutil
import tarfile

import pytest
import yaml

from adwm_core import pipeline
from adwm_core.data import TRAJECTORIES, read_table
from bench import compact, store, versions
from bench.common import bench_cells, cell_config
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


def test_a_world_model_is_kept_without_its_seeded_rows_and_comes_back_byte_for_byte(tiny_world_model, tmp_path):
    result, _ = tiny_world_model
    artifact = tmp_path / "0123456789abcdef"  # as the world-model stage writes it: the model in ``members``
    shutil.copytree(result.path, artifact / "members")
    model = artifact / "members"
    original = (model / compact.WEIGHTS).read_bytes()
    assert compact.compact(artifact)
    assert not (model / compact.WEIGHTS).exists()
    assert (model / compact.COMPACT).stat().st_size < len(original) / 2  # the table's untouched rows are left out
    compact.expand(artifact)
    assert (model / compact.WEIGHTS).read_bytes() == original and not (model / compact.COMPACT).exists()

    compact.compact(artifact)  # kept with another seed's rows, it cannot come back: refused, naming the fix
    packed = (model / compact.COMPACT).read_bytes()
    (model / compact.COMPACT).write_bytes(packed.replace(b'"seed":"0"', b'"seed":"7"'))
    with pytest.raises(RuntimeError, match="not the one kept.*bench.store build"):
        compact.expand(artifact)


def test_a_world_model_not_built_from_its_seed_alone_is_kept_whole(tiny_world_model, tmp_path):
    result, _ = tiny_world_model
    model = tmp_path / "model"
    shutil.copytree(result.path, model)
    history = (model / "history.json").read_text()
    (model / "history.json").write_text(history.replace('"seed": 0', '"seed": 3', 1))
    assert not compact.compact(model) and (model / compact.WEIGHTS).exists()


def test_every_kept_stage_is_named_by_todays_keys():
    """A change that re-keys a kept upstream stage (a bumped version, a changed config) leaves its
    kept artifact named by no key: it fails here, naming the cells and stages to rebuild, so it
    cannot land with a silently stale store. (What the bench still lacks: `python -m bench.store
    missing`.)"""
    found = store.stale()
    assert not found, store.rebuild_message(found)


def test_a_re_keyed_stage_is_named_with_the_command_that_rebuilds_it(monkeypatch):
    """A bumped version moves the keys of the stage and of what reads it: the kept ones turn stale,
    each named, with the cells to rebuild."""
    import dataclasses

    monkeypatch.setitem(pipeline.STAGES, "behaviour", dataclasses.replace(pipeline.STAGES["behaviour"], version=99))
    found = {str(p.relative_to(store.STORE).parent) for p in store.stale()}
    assert {"local-simonsays/behaviour", "test-b2-twx-sorting-cross/behaviour",
            "test-b2-twx-sorting-cross/logprobs"} <= found
    assert "local-simonsays/policies" not in found  # what behaviour reads keeps its key
    arguments = store.build_arguments(store.stale())  # the command the message prints runs as printed
    assert "bench/reference-cell.yaml" in arguments and all(cell_config(a) for a in arguments)
    with pytest.raises(AssertionError, match="rebuild them with `python -m bench.store build .*local-simonsays"):
        test_every_kept_stage_is_named_by_todays_keys()


def test_the_store_stays_small_enough_to_clone():
    size = sum(path.stat().st_size for path in store.STORE.rglob("*") if path.is_file())
    assert size <= store.MAX_STORE_BYTES, f"bench/store holds {size / 2**20:.1f} MB"


def test_upstream_code_is_the_code_confirmed_at_its_stages_version():
    """An upstream stage's key reads its version, not its code: code that moved must be confirmed
    (its outputs recomputed unchanged) or its version bumped."""
    moved = versions.unconfirmed(bench_cells(list(store.BENCH)))
    assert not moved, ("upstream code moved since it was confirmed at its version: " + ", ".join(moved) + ". If its "
                       "outputs move, bump the stage's version in adwm_core/pipeline.py and rebuild the store; if "
                       "not, run `python -m bench.versions confirm` (it recomputes the reference cell) and commit "
                       "bench/store/confirmed.json")


def test_the_reference_cells_upstream_recomputed_from_the_store_equals_the_store():
    """Every upstream stage of the reference cell, recomputed from its kept inputs by today's code,
    gives its kept outputs: a change that moves values without bumping a version fails here."""
    found = versions.recompute_reference(store.STORE)
    assert set(found) == {"policies", "behaviour", "ground-truth@tiny-late@p0", "logprobs@tiny-late@p0", "world-model"}
    assert not {stage: problem for stage, problem in found.items() if problem}


def test_the_reference_recompute_tells_a_learning_rate_0_1_percent_higher_from_another_cpus_rounding(tmp_path,
                                                                                                  monkeypatch):
    """The trained weights' tolerance (``versions.WEIGHTS_TOLERANCE``) still flags a value that moved:
    the reference family retrained with its learning rate 0.1 % higher is not the kept one."""
    from adwm_core.policies import trainer

    config = cell_config(store.REFERENCE)
    (kept,) = store.STORE.glob(f"{config.name}/policies/*.tar.gz")
    with tarfile.open(kept) as tar:
        tar.extractall(tmp_path / "kept", filter="data")
    finetune = trainer.finetune
    monkeypatch.setattr(trainer, "finetune", lambda *a, **k: finetune(*a, **{**k, "lr": k["lr"] * 1.001}))
    family = config.local_policies
    trainer.train_tiny_policies(config.env.name, config.env.options, config.env.task, str(tmp_path / "moved"),
                                {"late": family.checkpoints["late"]}, n_variations=family.n_variations,
                                context=family.context)
    (kept_late,) = (tmp_path / "kept").rglob("late")
    assert "weights differ by up to" in versions.differences(kept_late, tmp_path / "moved" / "late")


def test_prune_drops_what_no_bench_key_names_and_keeps_the_rest(tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store.STORE, copy)
    stale = copy / "local-simonsays" / "behaviour" / "0000000000000000.tar.gz"
    gone = copy / "no-such-cell" / "policies" / "1111111111111111.tar.gz"
    for path in (stale, gone):
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz"):
            pass
    kept_before = sorted(p for p in copy.rglob("*.tar.gz") if p not in (stale, gone))
    assert sorted(store.prune(copy)) == sorted([stale, gone])
    assert sorted(copy.rglob("*.tar.gz")) == kept_before and not (copy / "no-such-cell").exists()
