"""One vocabulary: each closed set of words is one StrEnum, written as its plain words everywhere,
offered as the CLI's choices, and the rate rule and run seed live in the library."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.fileio import dump_yaml
from pdplan.planner.target import target_rate
from pdplan.vocabulary import (
    Affinity,
    Arrivals,
    Connector,
    Mode,
    Objective,
    Phase,
    Policy,
    PoolShapes,
    Redundancy,
    Rule,
)
from pdplan.workload import load_trace

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "traces" / "smoke_uniform_200.csv"


def test_a_word_is_its_string_in_json_yaml_and_text():
    words = {Mode.AUTO: [Phase.PREFILL, Policy.PREFILL_FIRST]}
    assert Mode.AUTO == "auto" and f"{Policy.PREFILL_FIRST}" == "prefill-first"
    assert json.dumps(words) == '{"auto": ["prefill", "prefill-first"]}'
    assert dump_yaml(words) == "auto:\n- prefill\n- prefill-first\n"
    assert yaml.safe_load(dump_yaml(words)) == {"auto": ["prefill", "prefill-first"]}


def test_the_module_sets_keep_their_words_and_order():
    from pdplan.placement.problem import OBJECTIVES, POOL_SHAPES, REDUNDANCY
    from pdplan.placement.problem import PHASES as PLACED_PHASES
    from pdplan.sensitivity.spec import AFFINITIES, FAILURE_POLICIES
    from pdplan.sim.plan import FAILURE_POLICIES as SIM_FAILURE_POLICIES
    from pdplan.sim.plan import PHASES, POLICIES, SCHEDULES
    from pdplan.sim.results import MODES
    from pdplan.verify import RULES

    assert PHASES == ("colocated", "decode", "mixed", "prefill")
    assert PLACED_PHASES == ("prefill", "decode", "colocated", "mixed")
    assert POLICIES == ("chunked", "prefill-first") and SCHEDULES == ("layer", "request")
    assert SIM_FAILURE_POLICIES == FAILURE_POLICIES == ("recompute", "retry")
    assert MODES == ("colocated", "decode", "disaggregated", "prefill")
    assert OBJECTIVES == ("cost", "gpus", "power", "goodput") and POOL_SHAPES == ("one", "mixed")
    assert REDUNDANCY == ("none", "instance", "node") and RULES == ("lower", "mean")
    assert AFFINITIES == ("auto", "high", "low")


@pytest.mark.parametrize("args,message", [
    (("optimize", str(SMOKE), "--mode", "both"),
     "Error: --mode must be one of auto, colocated, disaggregated, got 'both'"),
    (("optimize", str(SMOKE), "--connector", "ucx"),
     "Error: --connector must be one of nixl, mooncake, lmcache, got 'ucx'"),
    (("optimize", str(SMOKE), "--arrivals", "gamma"), "Error: --arrivals must be one of poisson, trace, got 'gamma'"),
    (("sensitivity", "grid", "--trace", str(SMOKE), "--affinity", "near"),
     "Error: --affinity must be one of auto, high, low, got 'near'"),
    (("sensitivity", "grid", "--trace", str(SMOKE), "--executor", "slurm"),
     "Error: --executor must be one of local, ray, got 'slurm'"),
])
def test_a_word_outside_a_choice_is_refused_in_one_line_naming_the_flag_and_its_words(run_cli, args, message):
    code, out, err = run_cli(*args)
    assert code == 2 and err.strip() == message


@pytest.mark.parametrize("flag,words", [("--objective", Objective), ("--mode", Mode), ("--affinity", Affinity),
                                        ("--pool-shapes", PoolShapes), ("--redundancy", Redundancy),
                                        ("--verify-rule", Rule), ("--arrivals", Arrivals), ("--connector", Connector)])
def test_the_help_of_a_choice_flag_names_every_word_it_takes(flag, words):
    import typer

    from pdplan.cli import app

    command = typer.main.get_command(app).commands["optimize"]
    option = next(p for p in command.params if flag in p.opts)
    assert all(word in option.help for word in words)


def test_the_help_shows_the_default_its_owner_holds(run_cli):
    code, out, _ = run_cli("optimize", "--help")
    assert code == 0
    assert "[default: cost]" in out and "[default: lower]" in out


def test_the_target_rate_is_given_else_the_busiest_minute_else_the_mean_and_none_for_goodput():
    workload = load_trace(SMOKE)
    mean = len(workload) / float(workload.arrival_s[-1] - workload.arrival_s[0])
    assert target_rate(workload, SMOKE) == pytest.approx(mean)
    assert target_rate(workload, SMOKE, given=3.5) == 3.5
    assert target_rate(workload, SMOKE, objective=Objective.GOODPUT, given=3.5) is None
    assert target_rate(workload, SMOKE, peak=True) >= mean
    assert target_rate(workload, SMOKE, peak=True, windowed=True) == pytest.approx(mean)  # each window its own peak
    with pytest.raises(PdplanError, match="--target-rate must be > 0"):
        target_rate(workload, SMOKE, given=0.0)


def test_a_trace_with_no_arrival_times_needs_a_target_rate(tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n100,10\n200,20\n")
    workload = load_trace(lengths)
    assert not workload.has_arrivals
    assert target_rate(workload, lengths, given=2.0) == 2.0
    with pytest.raises(PdplanError, match="trace has no arrival times; give --target-rate"):
        target_rate(workload, lengths)
