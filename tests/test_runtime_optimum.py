"""The runtime optimum (colls.bound.runtime_optimum): a lower bound on the time of any file on the runtime,
so no file the methods write ever simulates faster, at any protocol and size; and its floors mean what they
say."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from colls import bound as bounds
from colls import pipeline
from colls.cli import cli
from colls.collectives import Collective
from colls.errors import CollsError
from colls.inputs.hardware import load_topology
from colls.runtimes.costs import model_for
from colls.simulate import simulate
from colls.simulate.engine import Machine

SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 26)
MACHINES = [("dgx-a100", 1, "exe"), ("dgx-a100", 2, "exe"), ("mi250", 1, "rccl"), ("ndv2", 1, "exe"),
            ("dgx-h100", 1, "exe")]


@pytest.mark.parametrize("hw,nodes,target", MACHINES, ids=[f"{h}x{n}" for h, n, _ in MACHINES])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_no_file_simulates_faster_than_the_runtime_optimum(hw, nodes, target, kind):
    topo = load_topology(hw, nodes)
    best = bounds.runtime_optimum(topo, kind, target)
    checked = 0
    for method in ("ring", "direct", "trees"):
        try:
            c = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), method, target=target)
        except CollsError:
            continue                    # a method that makes no file here (e.g. trees for alltoall)
        machine = Machine(c.program, topo, kind)
        for proto in ("LL", "LL128", "Simple"):
            program = replace(c.program, proto=proto)
            model = model_for(proto, topo.gpu_model())
            for size in SIZES:
                size = -(-size // c.program.nchunksperloop) * c.program.nchunksperloop   # a size the file runs
                t, _ = simulate(program, topo, kind, size, machine=machine, model=model, target=target)
                if not t.served:
                    continue
                assert best.time_us(size) <= t.time_us * (1 + 1e-9), (method, proto, size)
                checked += 1
    assert checked >= 12


def test_the_floors_are_the_runtime_costs_and_the_links_as_the_runtime_reaches_them():
    topo = load_topology("dgx-a100", 1)
    best = bounds.runtime_optimum(topo, "allgather", "exe")
    # NVLink at 80 % efficiency (NCCL's SM80_NVLINK_BW): the link optimum scales with it
    assert float(best.links.algbw) == pytest.approx(0.8 * float(bounds.bound(topo, "allgather").algbw))
    big = best.terms(1 << 30, "Simple")
    model = model_for("Simple", topo.gpu_model())
    assert big["binds"] == "links"
    assert big["time_us"] == pytest.approx(model.launch_us + model.step_us
                                           + (1 << 30) / (float(best.links.algbw) * 1000))
    small = best.row(8)
    assert small["binds"] == "latency" and small["protocol"] == "LL"
    # 7/8 of a GPU's output at the links' rate takes 240 GB/s of sends: ten threadblocks of 24 GB/s
    assert best.threadblocks_for_links() == 10


def test_a_network_crossing_pays_the_network_step():
    one, two = load_topology("dgx-a100", 1), load_topology("dgx-a100", 2)
    a = bounds.runtime_optimum(one, "allreduce", "exe")
    b = bounds.runtime_optimum(two, "allreduce", "exe")
    net = model_for("LL", two.gpu_model()).net_step_us
    assert b.latency_us >= net + bounds._crossing_latency_us(two, "allreduce") - 1e-9
    assert b.latency_us > a.latency_us + net - 1e-9


def _run(*args) -> str:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_bound_prints_both_optima():
    out = _run("bound", "--hardware", "dgx-a100", "--collective", "allgather")
    assert "link optimum: algbw 342.86 GB/s" in out
    assert "runtime optimum on exe" in out and "1GB:" in out and "links bind" in out
    assert "at least 10 threadblocks" in out


def test_bound_json_has_the_runtime_optimum_at_the_size_asked():
    data = json.loads(_run("bound", "--hardware", "mi250", "--collective", "allreduce", "--target", "rccl",
                           "--size", "4096", "--json"))
    rows = data["runtime_optimum"]["sizes"]
    assert [r["size_bytes"] for r in rows] == [4096]
    assert data["runtime_optimum"]["target"] == "rccl" and rows[0]["time_us"] > 0
    # the size in the words every other command takes
    same = json.loads(_run("bound", "--hardware", "mi250", "--collective", "allreduce", "--target", "rccl",
                           "--size", "4KB", "--json"))
    assert same == data


def test_synth_summary_gives_the_share_of_the_runtime_optimum(tmp_path):
    line = _run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", "ring",
                "--instances", "1", "-o", str(tmp_path / "ag.xml"))
    # the one-ring file: the link model's 100 % is said as such, the runtime's share at 1 GB is small
    assert "of the runtime optimum" in line and "link model algbw 342.9 GB/s (100.0% of the 342.9 GB/s link" in line
    shares = line.split("GB/s: ")[1].split(" of the runtime optimum")[0].split(", ")
    assert len(shares) == 3 and float(shares[-1].rstrip("%")) < 15
    # the default file takes the copies that fill the links, and says so
    line = _run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", "ring",
                "-o", str(tmp_path / "ag2.xml"))
    shares = line.split("GB/s: ")[1].split(" of the runtime optimum")[0].split(", ")
    assert float(shares[-1].rstrip("%")) > 85 and "copies of the schedule on channels of their own" in line


def test_a_summary_says_why_a_file_falls_short_at_1gb(tmp_path):
    """Below 85 % of the runtime optimum at 1 GB the summary says what holds the file back: its own use of the
    links when its link model is that far from the link optimum, else the runtime's costs; above, nothing."""
    one = _run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", "ring",
               "--instances", "1", "-o", str(tmp_path / "one.xml"))
    assert "% of the runtime optimum at 1GB: not the links" in one and "the runtime's costs" in one
    bcast = _run("synth", "--hardware", "dgx-a100", "--collective", "broadcast", "--root", "0", "--method",
                 "direct", "-o", str(tmp_path / "b.xml"))
    assert "% of the runtime optimum at 1GB: the schedule's own use of the links" in bcast
    full = _run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", "ring",
                "-o", str(tmp_path / "full.xml"))
    assert "of the runtime optimum at 1GB:" not in full
