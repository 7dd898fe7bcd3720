"""--without: bounds and schedules for a machine with a failed NIC or link, and every way to get it wrong."""

import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest
from click.testing import CliRunner

from colls import bound, pipeline, tune, verify
from colls.cli import cli
from colls.collectives import Collective
from colls.inputs.degrade import degrade
from colls.errors import CollsError
from colls.inputs.hardware import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH = """\
name: my-box
link_classes: {nv: {bandwidth: 50, latency: 0.5}}
graph:
  gpus: [{id: 0, model: X, sms: 80}, {id: 1, model: X, sms: 80}, {id: 2, model: X, sms: 80}]
  switches: [{id: sw}]
  nics: [{id: nicA}]
  links:
    - {from: 0, to: sw, class: nv, count: 2}
    - {from: 1, to: sw, class: nv}
    - {from: 2, to: sw, class: nv}
    - {from: 0, to: 1, bandwidth: 5, latency: 2, both: false}
    - {from: 2, to: nicA, bandwidth: 5, latency: 2}
"""


def run(*args, cwd=None):
    """The real entry point of this checkout in a subprocess, as a shell runs it (from any folder)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", "from colls.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120, env=env)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def a100x2():
    return load_topology("dgx-a100", nodes=2)


def remote_routes(schedule):
    return [op.route for op in schedule.ops if not op.local]


# --- the bound ------------------------------------------------------------------------------------------
def test_a_missing_nic_lowers_the_bound_and_moves_the_binding_cut():
    args = ("bound", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather")
    rc, healthy, err = run(*args, "--json")
    assert rc == 0, err
    rc, degraded, err = run(*args, "--json", "--without", "nic:0:3")
    assert rc == 0, err
    healthy, degraded = json.loads(healthy), json.loads(degraded)
    assert Fraction(degraded["algbw_exact"]) < Fraction(healthy["algbw_exact"])
    assert (Fraction(healthy["algbw_exact"]), Fraction(degraded["algbw_exact"])) == (Fraction(1040, 3), 320)
    assert healthy["without"] == [] and degraded["without"] == ["nic:0:3"]
    # GPU 3 of node 0 now takes in over NVLink only: it binds, not GPU 0 with its NIC
    assert "GPU 0" in healthy["binding_cut"] and "hdr-ib" in healthy["binding_cut"]
    assert degraded["binding_cut"] == "the links entering GPU 3 (nvlink3 300 GB/s)"
    rc, text, err = run(*args, "--without", "nic:0:3")
    assert rc == 0, err
    assert text.splitlines()[0] == "machine: dgx-a100 x2 without nic:0:3"
    assert "binding cut: the links entering GPU 3 (nvlink3 300 GB/s)" in text


def test_one_nvlink_of_twelve_lowers_the_single_node_bound_and_still_synthesizes():
    topo = load_topology("dgx-a100")
    less = degrade(topo, "link:0-n0.nvswitch")
    for u, v in ((0, "n0.nvswitch"), ("n0.nvswitch", 0)):
        assert (less.graph.edges[u, v]["count"], less.graph.edges[u, v]["bw"]) == (11, 275)
        assert (topo.graph.edges[u, v]["count"], topo.graph.edges[u, v]["bw"]) == (12, 300)
    assert bound.bound(less, "allgather").algbw == Fraction(275 * 8, 7) < bound.bound(topo, "allgather").algbw
    result = pipeline.compile_schedule(less, Collective("allgather", 8), "trees")
    assert result.report.ok and result.facts["hardware"] == "dgx-a100 without link:0-n0.nvswitch"
    assert result.facts["fraction_of_bound"] == 1.0


def test_a_direct_nvlink_of_ndv2_goes_one_link_at_a_time():
    topo = load_topology("ndv2")
    one = degrade(topo, "link:0-1")
    for e in ((0, 1), (1, 0)):
        assert (one.graph.edges[e]["count"], one.graph.edges[e]["bw"]) == (1, 25)
    both = degrade(topo, "link:1-0:2")
    assert not both.graph.has_edge(0, 1) and not both.graph.has_edge(1, 0)
    assert both.meta["without"] == ["link:0-1:2"] and degrade(topo, "link:0-1:all").graph.edges == both.graph.edges
    assert bound.bound(one, "allgather").algbw < bound.bound(topo, "allgather").algbw
    result = pipeline.compile_schedule(both, Collective("allgather", 8), "ring")
    assert result.report.ok
    assert all(r[:2] != (0, 1) and r[:2] != (1, 0) for r in remote_routes(result.schedule))


# --- schedules around a missing NIC ---------------------------------------------------------------------
@pytest.mark.parametrize("method", ["trees", "ring"])
def test_schedules_around_a_missing_nic_relay_over_nvlink(tmp_path, method):
    out = tmp_path / f"{method}.xml"
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather",
                          "--method", method, "--without", "nic:0:3", "--no-simulate", "--json", "-o", str(out))
    assert rc == 0, err
    facts = json.loads(stdout)
    assert facts["without"] == ["nic:0:3"] and facts["hardware"] == "dgx-a100 x2 without nic:0:3"
    report = verify.verify_text(out.read_text(), str(out), "exe")
    assert report.ok, report.format()
    # the schedule behind that file: every transfer on a route of the machine as it is now
    topo = degrade(load_topology("dgx-a100", nodes=2), "nic:0:3")
    result = tune.compile_fastest(topo, Collective("allgather", 16), method)     # synth's default file
    assert result.text == out.read_text()
    routes = remote_routes(result.schedule)
    assert routes and all(routes)
    for route in routes:
        assert not any(str(v).startswith("n0.nic3") for v in route), route
        assert all(topo.graph.has_edge(u, v) for u, v in zip(route, route[1:])), route
    # GPU 3 of node 0 reaches node 1 only through another GPU of its node
    assert all(topo.node_of(r[-1]) == 0 for r in routes if r[0] == 3)
    assert any(r[0] == 3 for r in routes) and any(r[-1] == 3 for r in routes)


def test_direct_needs_a_route_between_every_pair_and_says_which_is_missing(tmp_path):
    out = tmp_path / "d.xml"
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather",
                          "--method", "direct", "--without", "nic:0:3", "-o", str(out))
    assert rc == 2 and not stdout and not out.exists()
    assert err == ("colls: error: direct: no link between GPU 3 and GPU 8 on dgx-a100 x2 without nic:0:3 "
                   "(the fabric does not allow a direct schedule)\n")


# --- the degraded machine ---------------------------------------------------------------------------------
def test_the_degraded_machine_is_a_fresh_copy(a100x2):
    assert a100x2.route(3, 11) == (3, "n0.nic3.tx", "rail3", "n1.nic3.rx", 11)  # fills the route cache
    edges = dict(a100x2.graph.edges)
    less = degrade(a100x2, ["nic:0:3", "link:0-n0.nvswitch:2,link:n0.nic5-rail5"])
    assert less.route(3, 11) is None and less.route(5, 13) is None and less.route(4, 12) is not None
    assert a100x2.route(3, 11) is not None and a100x2.name == "dgx-a100 x2" and "without" not in a100x2.meta
    assert dict(a100x2.graph.edges) == edges and a100x2.graph.edges[0, "n0.nvswitch"]["count"] == 12
    assert less.name == "dgx-a100 x2 without nic:0:3, link:0-n0.nvswitch:2, link:n0.nic5-rail5"
    assert less.meta["without"] == ["nic:0:3", "link:0-n0.nvswitch:2", "link:n0.nic5-rail5"]
    # a NIC whose cable is gone carries nothing: both its halves leave with it
    assert not any(str(v).startswith(("n0.nic3", "n0.nic5")) for v in less.graph)
    assert less.graph.edges[0, "n0.nvswitch"]["bw"] == 250 and less.graph.edges[0, "n0.nvswitch"]["efficiency"] == 0.8
    assert degrade(a100x2, []) is a100x2


def test_a_graph_file_names_its_own_vertices(tmp_path):
    path = tmp_path / "box.yaml"
    path.write_text(GRAPH)
    topo = load_topology(str(path))
    less = degrade(topo, "link:1-0")  # the one-way 0 -> 1 link: every direction the file has
    assert not less.graph.has_edge(0, 1) and less.graph.edges[0, "sw"]["count"] == 2
    assert degrade(topo, "link:0-sw").graph.edges["sw", 0]["bw"] == 50
    with pytest.raises(CollsError, match=r"my-box has no NIC to remove \(its NICs \(nicA\) are not numbered"):
        degrade(topo, "nic:0:0")
    assert not any(v == "nicA" for v in degrade(topo, "link:nicA-2").graph)  # nothing left to carry
    with pytest.raises(CollsError, match="'link:0-sw:2': leaves GPU 0 with no path to GPU 1 after link:0-1, even"):
        degrade(topo, "link:1-0,link:sw-0:2")
    with pytest.raises(CollsError, match="'link:0-sw:all': leaves GPU 1 with no path to GPU 0, even"):
        degrade(topo, "link:0-sw:all")  # 0 -> 1 is left: GPU 0 still sends, but nothing reaches it


def test_many_items_shorten_the_name_but_not_the_list(a100x2):
    items = [f"link:{r}-n{r // 8}.nvswitch" for r in range(16)]
    less = degrade(a100x2, items)
    assert less.meta["without"] == items
    assert less.name.startswith("dgx-a100 x2 without 16 parts (link:0-n0.nvswitch, ") and less.name.endswith(", ...)")
    assert len(less.name) < 160


def test_a_command_without_the_option_never_inherits_it():
    runner = CliRunner()
    res = runner.invoke(cli, ["bound", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather",
                              "--without", "nic:0:3"])
    assert res.exit_code == 0 and "without nic:0:3" in res.output
    res = runner.invoke(cli, ["hardware", "show", "dgx-a100", "--nodes", "2", "--json"])
    assert res.exit_code == 0
    assert "n0.nic3.tx" in {n["id"] for n in json.loads(res.output)["nics"]}


# --- bad items ------------------------------------------------------------------------------------------
BAD = [
    ("", "'': an empty item"),
    ("nic:0:3,,nic:1:2", "'': an empty item"),
    ("port:0:3", "'port:0:3': unknown kind 'port' (expected nic:NODE:INDEX, link:A-B[:K|:all] or gpu:RANK)"),
    ("nic:0:three", "'nic:0:three': expected nic:NODE:INDEX with whole numbers"),
    ("nic:0", "'nic:0': expected nic:NODE:INDEX"),
    ("nic:2:3", "'nic:2:3': node 2 is not a node of dgx-a100 x2 (nodes 0..1)"),
    ("nic:0:8", "'nic:0:8': node 0 has no NIC 8 (its NICs are 0..7)"),
    ("link:0-5", "'link:0-5': no link joins GPU 0 and GPU 5 on dgx-a100 x2 (GPU 0 has links to n0.nic0, n0.nvswitch)"),
    ("link:0-n0.nvswich", "'link:0-n0.nvswich': 'n0.nvswich' is not a vertex of dgx-a100 x2 (GPU ranks 0..15, "
                          "n0.nvswitch, n1.nvswitch, rail0"),
    ("link:0-n1.nvswitch", "'link:0-n1.nvswitch': no link joins GPU 0 and n1.nvswitch"),
    ("link:0-16", "'link:0-16': GPU 16 is not a rank of dgx-a100 x2 (ranks 0..15)"),
    ("link:0-n0.nvswitch:13", "'link:0-n0.nvswitch:13': 12 links join GPU 0 and n0.nvswitch; cannot remove 13"),
    ("link:0-n0.nvswitch:0", "removes no link"),
    ("link:0-n0.nvswitch:x", "with K a whole number of links or all, got 'x'"),
    ("link:3-3", "'link:3-3': a link joins two different vertices"),
    ("link:3-n0.nic3.tx", "'n0.nic3.tx' is one direction of NIC n0.nic3: name the NIC (n0.nic3)"),
    ("nic:0:3,nic:0:3", "'nic:0:3': names the same part as 'nic:0:3'"),
    ("link:0-n0.nvswitch,link:n0.nvswitch-0", "'link:n0.nvswitch-0': names the same part as 'link:0-n0.nvswitch' "
                                              "(write link:0-n0.nvswitch:2 to remove two links)"),
    ("nic:0:3,link:3-n0.nic3", "'link:3-n0.nic3': 'n0.nic3' was removed by nic:0:3"),
    ("link:3-n0.nvswitch:all,nic:0:3", "'nic:0:3': leaves GPU 0 with no path to GPU 3 after "
                                       "link:3-n0.nvswitch:all, even through other GPUs"),
    ("gpu:3", "'gpu:3': a GPU that is down changes the job"),
    ("gpu:16", "'gpu:16': GPU 16 is not a rank of dgx-a100 x2 (ranks 0..15)"),
    ("gpu:-1", "'gpu:-1': expected gpu:RANK with a whole number"),
]


@pytest.mark.parametrize("items,message", BAD, ids=[b[0] or "empty" for b in BAD])
def test_bad_items_are_refused_in_one_line(a100x2, items, message):
    with pytest.raises(CollsError) as caught:
        degrade(a100x2, items)
    assert str(caught.value).startswith("--without: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("command,items,message", [
    ("synth", "nic:0:8", "--without: 'nic:0:8': node 0 has no NIC 8"),
    ("synth", "link:3-n0.nvswitch:all,nic:0:3", "'nic:0:3': leaves GPU 0 with no path to GPU 3"),
    ("bound", "gpu:3", "--without: 'gpu:3': a GPU that is down changes the job"),
    ("bound", "nic:0:0", "--without: 'nic:0:0': dgx-a100 has no NIC to remove (with one node"),
])
def test_the_cli_refuses_bad_items_and_writes_nothing(tmp_path, command, items, message):
    nodes = "1" if items == "nic:0:0" else "2"
    args = [command, "--hardware", "dgx-a100", "--nodes", nodes, "--collective", "allgather", "--without", items]
    rc, stdout, err = run(*args, *(["-o", "out.xml"] if command == "synth" else []), cwd=tmp_path)
    assert rc == 2 and not stdout, err
    assert err.startswith("colls: error: ") and message in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []


def test_summary_never_claims_more_than_the_optimum(tmp_path):
    """On an uneven machine a trees allreduce can pass the best reduce-scatter-then-allgather bound: the
    summary then says the bound is no limit, instead of a share above 100% of an 'optimum'."""
    import re
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", "from colls.cli import main; main()", "synth", "--hardware",
                           "dgx-a100", "--collective", "allreduce", "--method", "trees", "--without",
                           "link:0-n0.nvswitch", "-o", str(tmp_path / "x.xml"), "--no-simulate"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shares = [float(x) for x in re.findall(r"([0-9.]+)% of the", proc.stdout)]
    assert all(x <= 100.0 for x in shares)
    assert shares or "which is no limit for this schedule" in proc.stdout
