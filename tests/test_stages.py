"""The stage registry (adwm_core/pipeline.py): every stage declared once, keys that say what
computed an artifact — settings, inputs, code — and never where it lay."""

import dataclasses
import hashlib
import json
import os
import shutil

import pytest

from adwm_core import pipeline
from adwm_core.cell import CellConfig
from adwm_core.fingerprints import code_closure, code_fingerprint, content_fingerprint
from flows.cells import cell_config_path


@pytest.fixture(scope="module")
def cell():
    return CellConfig.load(cell_config_path("local-simonsays"))


def keys(cell: CellConfig) -> dict[tuple[str, str | None], str]:
    return {(s.name, s.policy and s.policy.label): pipeline.locate(cell, s.name, s.policy).key
            for s in pipeline.plan(cell)}


def planned(cell: CellConfig) -> set[str]:
    return {step.name for step in pipeline.plan(cell)}


def test_a_stage_not_yet_run_is_named_with_the_command_that_runs_it(cell):
    with pytest.raises(FileNotFoundError, match="no finished behaviour stage.*python -m flows.ope_cell local-simonsays"):
        pipeline.finished(cell, "behaviour")


def test_per_policy_stages_need_their_policy_and_the_others_refuse_one(cell):
    policy = cell.evaluation.policies[0]
    with pytest.raises(TypeError, match="'adwm' is per π_e: pass a policy"):
        pipeline.locate(cell, "adwm")
    with pytest.raises(TypeError, match="'world-model' is not per π_e"):
        pipeline.locate(cell, "world-model", policy)
    with pytest.raises(KeyError, match="no stage 'imagination'"):
        pipeline.stage("imagination")
    assert pipeline.stage("ground-truth").run_name(policy.label) == f"ground-truth [{policy.label}]"
    assert pipeline.stage("report").run_name() == "report"


def test_keys_do_not_depend_on_the_artifact_root(cell, monkeypatch, tmp_path):
    before = keys(cell)
    monkeypatch.setenv("ADWM_HOME", str(tmp_path / "elsewhere"))
    assert keys(cell) == before
    assert pipeline.locate(cell, "behaviour").path.startswith(str(tmp_path / "elsewhere"))


def test_a_local_model_is_keyed_by_its_family_and_a_change_reaches_every_stage_that_reads_it(cell):
    """``local:<checkpoint>`` stands for the policies artifact's key: training the family longer
    changes every stage that reads one of its models, and no other."""
    before = keys(cell)
    name = next(iter(cell.local_policies.checkpoints))
    longer = cell.replace(local_policies=cell.local_policies.replace(
        checkpoints={**cell.local_policies.checkpoints, name: cell.local_policies.checkpoints[name] + 1}))
    changed = {k for k, v in keys(longer).items() if before[k] != v}
    assert ("policies", None) in changed and ("behaviour", None) in changed  # the pool reads the family
    assert ("world-model", None) in changed  # through the behaviour data it trains on
    assert changed == set(before)  # every stage of this cell reads the family, directly or through its inputs


def test_what_says_where_a_stage_runs_is_not_keyed(cell):
    before = keys(cell)
    elsewhere = cell.replace(world_model=cell.world_model.replace(device="cpu"), psi=cell.psi.replace(device="cpu"))
    shared = elsewhere.with_policies(lambda spec: spec.replace(options={**spec.options, "concurrency": 3,
                                                                        "gpu_memory_utilization": 0.2}))
    assert keys(shared) == before
    assert keys(cell.replace(world_model=cell.world_model.replace(seed=1)))[("world-model", None)] != \
        before[("world-model", None)]


def test_a_model_folder_is_keyed_by_its_content_not_its_place(cell, tmp_path):
    folder = tmp_path / "a" / "sft"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"layers": 2}')
    (folder / "model.safetensors").write_bytes(os.urandom(3 << 20))  # sampled at both ends
    moved = tmp_path / "b" / "sft"
    shutil.copytree(folder, moved)
    at = {place: cell.with_policies(lambda spec: spec.replace(model=str(place))) for place in (folder, moved)}
    assert keys(at[folder]) == keys(at[moved])
    with open(moved / "model.safetensors", "r+b") as f:  # other weights: another model
        f.seek(-4, os.SEEK_END)
        f.write(b"\0\1\2\3")
    assert content_fingerprint(str(moved)) != content_fingerprint(str(folder))
    assert keys(at[moved])[("world-model", None)] != keys(at[folder])[("world-model", None)]


def test_the_code_of_a_stage_is_what_its_module_imports():
    """An estimator's code belongs to the baselines stage alone — FQE's also to the ADWM stage,
    which can hand off-log pairs to it; the world model's training to its own stage (and through
    their artifacts to what reads them)."""
    baselines = code_closure("adwm_core.stages.baselines")
    assert {"adwm_core.ope.classical.estimators", "adwm_core.ope.classical.fqe", "adwm_core.stages.baselines"} <= set(baselines)
    assert "adwm_core.ope.classical.fqe" in code_closure("adwm_core.stages.adwm")
    for name in ("adwm", "world_model", "behaviour", "ground_truth", "logprobs", "greedy", "psi", "report", "policies"):
        closure = code_closure(f"adwm_core.stages.{name}")
        assert "adwm_core.ope.classical.estimators" not in closure, name
        assert name == "adwm" or "adwm_core.ope.classical.fqe" not in closure, name
        assert "adwm_core.pipeline" not in closure, name  # the registry's own changes do not recompute stages
    assert "adwm_core.training.world_model" in code_closure("adwm_core.stages.world_model")
    assert code_fingerprint("adwm_core.stages.adwm") != code_fingerprint("adwm_core.stages.baselines")
    with pytest.raises(ValueError, match="no module"):
        code_fingerprint("adwm_core.stages.nowhere")


def test_kept_code_digests_give_the_fingerprints_a_fresh_parse_gives_and_go_stale_with_their_source(tmp_path,
                                                                                                     monkeypatch):
    """A process reads each module's digest and imports from ``__pycache__/code-digests`` where
    they were kept for the same source bytes, and parses it again where the source differs."""
    from adwm_core import fingerprints

    monkeypatch.setattr(fingerprints, "_DIGESTS", str(tmp_path))
    module = "adwm_core.stages.baselines"
    try:
        fingerprints._parsed.cache_clear()
        parsed = code_fingerprint(module)
        kept_file = tmp_path / "adwm_core.stages.baselines.json"
        kept = json.loads(kept_file.read_text())
        with open(fingerprints.module_file(module), "rb") as source:
            assert kept["source"] == hashlib.sha256(source.read()).hexdigest()
        fingerprints._parsed.cache_clear()
        assert code_fingerprint(module) == parsed  # read back from what was kept
        kept_file.write_text(json.dumps({**kept, "digest": "0" * 64}))
        fingerprints._parsed.cache_clear()
        assert code_fingerprint(module) != parsed  # the kept digest is what is used…
        kept_file.write_text(json.dumps({**kept, "digest": "0" * 64, "source": "another source"}))
        fingerprints._parsed.cache_clear()
        assert code_fingerprint(module) == parsed  # …only for the source it was read from
    finally:
        fingerprints._parsed.cache_clear()


def test_an_estimator_only_change_retrains_no_world_model():
    """The estimators' settings and rollout code sit outside the training stages' code, so a
    change to how π_e is scored reruns the estimator stages (and the report) alone; ADWM's
    settings and sampler sit outside the baselines stage's too, so tuning ADWM refits no FQE."""
    scoring = {"adwm_core.ope.settings", "adwm_core.ope.imagination.rollouts", "adwm_core.ope.imagination.transitions", "adwm_core.ope.imagination.diffusion_transition"}
    for name in ("world_model", "psi", "behaviour", "ground_truth", "logprobs", "policies"):
        assert not scoring & set(code_closure(f"adwm_core.stages.{name}")), name
    assert scoring <= set(code_closure("adwm_core.stages.adwm"))
    adwm_only = {"adwm_core.ope.settings", "adwm_core.ope.imagination.rollouts", "adwm_core.ope.imagination.diffusion_transition", "adwm_core.diffusion.respaced"}
    assert adwm_only <= set(code_closure("adwm_core.stages.adwm"))
    assert not adwm_only & set(code_closure("adwm_core.stages.baselines"))
    assert "adwm_core.ope.classical.settings" in code_closure("adwm_core.stages.baselines")


def test_a_stage_that_runs_the_environment_is_keyed_by_its_environment_code(cell, monkeypatch):
    """The environment's module (loaded by name through the registry, so no import reaches it)
    is part of the code of the stages that run it or prompt an LLM in it, not of the others: an
    estimator stage's key reads it, an upstream stage's version is confirmed against it."""
    from adwm_core.envs.registry import env_module

    real, calls = pipeline.code_fingerprint, []
    monkeypatch.setattr(pipeline, "code_fingerprint", lambda *modules: calls.append(modules) or real(*modules))
    for name in pipeline.STAGES:
        pipeline.stage_code(cell, name)
        assert calls[-1][0] == pipeline.stage(name).module
        expected = name in ("policies", "behaviour", "ground-truth", "logprobs", "greedy", "psi", "adwm")
        assert (env_module(cell.env.name) in calls[-1]) == expected, name


def test_an_upstream_stage_is_keyed_by_its_declared_version_and_an_estimator_stage_by_its_code(cell, monkeypatch):
    """A refactor of upstream code keeps every upstream key (the bench's store stays valid); the
    estimator stages, minutes to recompute, follow their code; a bumped version re-keys the stage
    and every stage that reads it."""
    upstream = {name for name, stage in pipeline.STAGES.items() if stage.version is not None}
    assert upstream == {"policies", "behaviour", "ground-truth", "logprobs", "greedy", "world-model", "psi"}
    before = keys(cell)
    real = pipeline.code_fingerprint
    monkeypatch.setattr(pipeline, "code_fingerprint", lambda *modules: "refactored" + real(*modules))
    after = keys(cell)
    assert {k for k in before if before[k] != after[k]} == {k for k in before if k[0] not in upstream}
    monkeypatch.setitem(pipeline.STAGES, "world-model", dataclasses.replace(pipeline.STAGES["world-model"], version=2))
    bumped = keys(cell)
    moved = {k[0] for k in after if after[k] != bumped[k]}
    assert moved == {"world-model", "adwm", "baselines", "report"}


def test_cells_are_changed_in_code_only_through_validation(cell):
    from adwm_core.cell import CellConfigError

    with pytest.raises(CellConfigError, match="world_model.steps"):
        cell.replace(world_model={"steps": -1})
    with pytest.raises(CellConfigError, match="names no checkpoint of local_policies"):
        cell.with_evaluated(cell.evaluation.policies[0].replace(model="local:never-trained"))
    assert cell.with_evaluated(cell.behaviour.pool[0]).evaluation.policies == (cell.behaviour.pool[0],)


def test_an_environment_registered_from_outside_adwm_core_is_keyed_without_its_code(cell, monkeypatch):
    from adwm_core.envs import registry

    monkeypatch.setitem(registry._REGISTRY, cell.env.name, "mypackage.envs:MyEnv")  # a user's own adapter
    assert pipeline.locate(cell, "behaviour").key  # keyed (by settings and the stage's own code), not refused


def test_a_model_folder_named_without_a_slash_is_keyed_by_content(cell, tmp_path, monkeypatch):
    """``--model my_finetune`` from the folder holding it: loaded from disk, so keyed by content."""
    (tmp_path / "my_finetune").mkdir()
    (tmp_path / "my_finetune" / "config.json").write_text('{"layers": 2}')
    monkeypatch.chdir(tmp_path)
    agent = cell.evaluation.policies[0].replace(model="my_finetune")
    before = pipeline.locate(cell.with_evaluated(agent), "adwm", agent).key
    (tmp_path / "my_finetune" / "config.json").write_text('{"layers": 3}')
    assert pipeline.locate(cell.with_evaluated(agent), "adwm", agent).key != before


def test_the_fqe_hand_over_makes_adwm_read_the_log_probs_and_fqe_settings(cell):
    """The default hands off-log pairs to FQE (carry_over_fqe), as ``fqe`` does, with its own FQE
    settings (``adwm.handover_fqe``); the ``carry_over_fqe`` preset with the baselines'. ``carry_over``
    leaves them to the diffusion model and reads neither the log-probs nor FQE's settings."""
    policy = cell.evaluation.policies[0]
    carried = cell.replace(adwm=cell.adwm.replace(off_log="carry_over"))
    as_baseline = cell.replace(adwm={"preset": "carry_over_fqe"})
    for handing in (as_baseline, as_baseline.replace(adwm=as_baseline.adwm.replace(off_log="fqe"))):
        assert "logprobs" in pipeline.stage_key(handing, "adwm", policy)[1]
        slower = handing.replace(baselines=handing.baselines.replace(fqe=handing.baselines.fqe.replace(epochs=5)))
        assert keys(slower)[("adwm", policy.label)] != keys(handing)[("adwm", policy.label)]
    assert "logprobs" not in pipeline.stage_key(carried, "adwm", policy)[1]
    assert "greedy" not in planned(cell)  # a cell's flow hands over on the log-prob stage's actions
    greedy = cell.replace(adwm=cell.adwm.replace(handover_actions="greedy"))  # evaluate-policy: nothing scored
    inputs = pipeline.stage_key(greedy, "adwm", policy)[1]
    assert "greedy" in inputs and "logprobs" not in inputs and "greedy" in planned(greedy)
    slower = carried.replace(baselines=slower.baselines)
    assert keys(slower)[("adwm", policy.label)] == keys(carried)[("adwm", policy.label)]
    # the default's own FQE settings: ADWM's key follows them, not the baselines', and the baselines' stays
    assert cell.handover_fqe == cell.adwm.handover_fqe != cell.baselines.fqe == as_baseline.handover_fqe
    longer = cell.replace(adwm=cell.adwm.replace(handover_fqe={"epochs": 80}))
    assert longer.handover_fqe.target_every == cell.handover_fqe.target_every  # the preset's other fields kept
    assert keys(longer)[("adwm", policy.label)] != keys(cell)[("adwm", policy.label)]
    assert keys(longer)[("baselines", policy.label)] == keys(cell)[("baselines", policy.label)]
    slower = cell.replace(baselines=cell.baselines.replace(fqe=cell.baselines.fqe.replace(epochs=5)))
    assert keys(slower)[("adwm", policy.label)] == keys(cell)[("adwm", policy.label)]


def test_every_shipped_deployment_plans_each_stage_after_exactly_what_its_key_reads():
    """pipeline.plan is the one DAG: each step runs after the steps of the inputs its key reads
    (and nothing else), inputs first, ending on the report; ψ only under the soft-token reading,
    ground truth only where the cell is graded, the greedy-action stage only where the hand-over
    reads it — and the flow's wiring submits exactly the plan."""
    from flows.cells import cell_names
    from tasks.stages import submit_plan

    class Unset(dict):  # the seed cells' model and data paths, as on a machine that has none of them
        def __contains__(self, variable: object) -> bool:
            return True

        def __missing__(self, variable: str) -> str:
            return f"/nowhere/{variable}"

    for name in cell_names():
        cell = CellConfig.load(cell_config_path(name), environ=Unset(os.environ))
        steps = pipeline.plan(cell)
        assert steps[-1].index == ("report", None), name
        seen: set = set()
        for step in steps:
            assert set(step.after) <= seen, (name, step.index)  # inputs first
            reads = pipeline.stage_key(cell, step.name, step.policy)[1]
            assert {upstream for upstream, _ in step.after} == set(reads), (name, step.index)
            seen.add(step.index)
        names = {step.name for step in steps}
        assert ("psi" in names) == (cell.adwm.reading == "soft_tokens"), name
        assert ("ground-truth" in names) == (cell.ground_truth is not None), name
        assert ("greedy" in names) == (cell.adwm.hands_over_to_fqe and cell.adwm.handover_actions == "greedy"), name
        submitted = []
        submit_plan(cell, None, lambda stage, config, parent, policy, after: submitted.append(
            (stage, policy and policy.name, len(after))) or (stage, policy and policy.name))
        assert submitted == [(s.name, s.policy and s.policy.name, len(s.after)) for s in steps], name


def test_a_greedy_hand_over_plans_the_greedy_action_stage_and_evaluate_policy_plans_only_what_it_scores(cell):
    """A cell whose ADWM stage hands over on π_e's greedy actions gets the stage that makes them
    (the flow once wired the log-prob stage by hand); evaluate-policy's plan (target ``adwm``,
    behaviour and world model given) trains nothing of the cell."""
    greedy = cell.replace(adwm=cell.adwm.replace(handover_actions="greedy"))
    policy = greedy.evaluation.policies[0]
    adwm = next(s for s in pipeline.plan(greedy) if s.index == ("adwm", policy.name))
    assert ("greedy", policy.name) in adwm.after and ("logprobs", policy.name) not in adwm.after
    agent = policy.replace(model="/nowhere/my-agent")  # a new agent, not of the cell's family
    given = ("behaviour", "world-model")
    assert [s.name for s in pipeline.plan(greedy.with_evaluated(agent), ["adwm"], given)] == ["greedy", "adwm"]
    soft = greedy.replace(adwm=greedy.adwm.replace(reading="soft_tokens"))
    assert [s.name for s in pipeline.plan(soft.with_evaluated(agent), ["adwm"], given)] == ["greedy", "psi", "adwm"]
    assert [s.name for s in pipeline.plan(greedy, ["adwm"], given)][0] == "policies"  # a family agent: its family



TWO_STAGES_AT_ONCE = """
import sys, threading
from adwm_core import pipeline
errors = []
def load(name):
    try:
        pipeline.stage(name).load()
    except Exception as error:
        errors.append(f"{name}: {type(error).__name__}: {error}")
threads = [threading.Thread(target=load, args=(name,)) for name in ("policies", "ground-truth")]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
sys.exit("; ".join(errors) or None)
"""


def test_two_stage_modules_imported_at_once_from_two_threads_both_load():
    """A flow starts ``policies`` and a pretrained π_e's ground truth at once; both modules import
    transformers, whose lazy module fails a second thread's first import while it initialises
    (issue 89). In a fresh interpreter, three times: imported without the stages' import lock,
    each try failed (5 of 5 here), so this test failed on that code with probability ≥ 0.99."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", TWO_STAGES_AT_ONCE], cwd=repo, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]


def test_imported_logs_are_keyed_by_the_code_that_reads_them(cell, monkeypatch):
    """Upstream keys read versions, not code, but a reader that reads a user's logs otherwise makes
    other behaviour data: an imported log's behaviour stage (and what reads it) follows the log
    readers' code; a collected one does not."""
    from adwm_core.specs import LogSource

    logs = os.path.join(os.path.dirname(__file__), "data", "public_logs", "knowagent_alfworld_first10.jsonl")
    imported = cell.replace(behaviour={"logs": LogSource(path=logs), "pool": cell.behaviour.pool})
    before = [pipeline.locate(c, "behaviour").key for c in (cell, imported)]
    real = pipeline.code_fingerprint
    monkeypatch.setattr(pipeline, "code_fingerprint",
                        lambda *modules: real(*modules) + ("changed" if "adwm_core.data.logs" in modules else ""))
    after = [pipeline.locate(c, "behaviour").key for c in (cell, imported)]
    assert after[0] == before[0] and after[1] != before[1]
