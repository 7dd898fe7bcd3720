"""Tests for colls.inputs.sketch: both sketch forms, the checks against the machine, derive_sketch and the
shipped sketches.

tests/data/taccl/ holds TACCL's own example files, copied unchanged from microsoft/taccl
(taccl/examples/sketch and taccl/examples/topo).
"""

from __future__ import annotations

import functools
import json
import textwrap
from pathlib import Path

import pytest

import shell

from colls.errors import CollsError
from colls.inputs.hardware import load_topology
from colls.inputs.sketch import (Sketch, automorphism_mismatch, derive_sketch, load_sketch, sketch_text,
                          symmetry_permutation)
from colls.inputs.taccl import load_taccl_profile

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data" / "taccl"
SKETCHES = ROOT / "sketches"
PROFILES = ("dgx-a100", "dgx-h100", "dgx2", "ndv2", "mi250")
TACCL_PROFILE = {"ndv2": DATA / "topo-ndv2-1MB.json", "dgx2": DATA / "topo-dgx2-1KB.json"}
# TACCL's example sketch -> (shipped profile, nodes)
EXAMPLES = {"sk1-ndv2-n2": ("ndv2", 2), "sk2-dgx2-n2": ("dgx2", 2), "sk-dgx2-n1": ("dgx2", 1),
            "sk1-ndv2-n1": ("ndv2", 1)}


_load = functools.lru_cache(maxsize=None)(load_topology)  # building a 4-node machine takes a while


@pytest.fixture
def topo():
    """``topo(name, nodes)``: a shipped profile's machine, built once per test run."""
    return _load


def _write(tmp_path: Path, text, name: str = "sk.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(text) if isinstance(text, dict) else textwrap.dedent(text))
    return path


# --- TACCL's examples -----------------------------------------------------------------------------------
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_taccl_examples_load_with_shipped_and_taccl_profiles(topo, example):
    name, nodes = EXAMPLES[example]
    path = DATA / f"{example}.json"
    sketch = load_sketch(path, topo(name, nodes))
    assert sketch.nodes == nodes and sketch.source == str(path)
    assert load_sketch(path, load_taccl_profile(TACCL_PROFILE[name], None, nodes)) == sketch


def test_taccl_examples_read_as_taccl_means_them(topo):
    ndv2 = load_sketch(DATA / "sk1-ndv2-n2.json", topo("ndv2", 2))
    assert ndv2 == Sketch(2, 8, "none", relay=((0, (1,)),), relay_form="map", symmetry=((8, 16),))
    dgx2 = load_sketch(DATA / "sk2-dgx2-n2.json", topo("dgx2", 2))
    assert dgx2.strategy == "switch" and dgx2.switches == (tuple(range(16)),)
    assert dgx2.switch_strategy == ("uc-max",) and dgx2.relay_form == "direct-map"
    assert dgx2.relay == tuple((g, (g,)) for g in range(16))
    assert dgx2.senders_of == tuple((g,) for g in range(16)) and dgx2.symmetry == ((2, 16), (16, 32))
    one = load_sketch(DATA / "sk-dgx2-n1.json", topo("dgx2", 1))
    assert one.chunkup == 2 and one.relay == () and one.relay_form is None and one.symmetry == ((2, 16),)


def test_the_two_forms_give_the_same_sketch(tmp_path, topo):
    yaml_form = _write(tmp_path, """\
        nodes: 2
        intranode: {strategy: switch, switches: [all], switch_strategy: uc-max}
        internode:
          relay: direct-map
          senders_of: {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9, 10: 10, 11: 11,
                       12: 12, 13: 13, 14: 14, 15: [15]}
        symmetry: [[2, 16], [16, 32]]
        """)
    taccl = load_sketch(DATA / "sk2-dgx2-n2.json", topo("dgx2", 2))
    assert load_sketch(yaml_form, topo("dgx2", 2)) == taccl
    # and a sketch written back as TACCL's JSON reads the same
    assert load_sketch(_write(tmp_path, taccl.to_taccl(), "back.json"), topo("dgx2", 2)) == taccl


def test_taccl_sketch_with_pairs_sharing_nics(tmp_path, topo):
    """TACCL's sk1-dgx2-n2 (microsoft/taccl examples): odd GPUs send for their NIC pair, own chunks first."""
    conn = {str(2 * j + 1): [2 * j] for j in range(8)}
    rev = {str(2 * j + 1): [2 * j, 2 * j + 1] for j in range(8)}
    path = _write(tmp_path, {"nnodes": 2, "intranode_sketch": {"strategy": "switch", "switches": [list(range(16))],
                                                               "switch_hyperedge_strategy": ["uc-min"]},
                             "internode_sketch": {"strategy": "relay", "internode_conn": conn,
                                                  "gpus_to_sender_rev_map": rev, "enforce_ordering": True},
                             "symmetry_offsets": [[2, 16], [16, 32]], "hyperparameters": {"input_chunkup": 2}},
                  "sk1.json")
    s = load_sketch(path, topo("dgx2", 2))
    assert s.senders == (1, 3, 5, 7, 9, 11, 13, 15) and s.receivers(3) == (2,) and s.receivers(2) == ()
    assert s.senders_of[4] == (5,) and s.own_chunks_first and s.chunkup == 2


def test_one_node_sketch_without_internode_and_minmax(tmp_path, topo):
    """Both crash TACCL (enforce_ordering is read unconditionally; minmax reads an unset value)."""
    path = _write(tmp_path, {"nnodes": 1, "intranode_sketch": {"strategy": "minmax"}}, "mm.json")
    s = load_sketch(path, topo("ndv2", 1))
    assert s.strategy == "minmax" and s.symmetry == () and s.chunkup == 1


def test_no_internode_part_means_fully_connected(tmp_path, topo):
    s = load_sketch(_write(tmp_path, "nodes: 2\n"), topo("dgx-a100", 2))
    assert s.relay_form == "fully-connected" and s.receivers(5) == tuple(range(8))


# --- symmetry -------------------------------------------------------------------------------------------
def test_symmetry_permutation_is_taccls_rule():
    assert symmetry_permutation(32, 2, 16)[:3] == [2, 3, 4] and symmetry_permutation(32, 2, 16)[15] == 1
    assert symmetry_permutation(32, 2, 16)[16] == 18
    assert symmetry_permutation(32, 16, 32) == list(range(16, 32)) + list(range(16))


@pytest.mark.parametrize("name, nodes, offset, group, ok", [
    ("dgx2", 2, 2, 16, True),
    ("dgx2", 2, 1, 16, False),   # GPUs 2j, 2j+1 share NIC j: a shift of 1 splits the pairs
    ("dgx2", 1, 1, 16, True),    # one node has no NICs
    ("dgx2", 2, 16, 32, True),
    ("ndv2", 1, 4, 8, True),
    ("ndv2", 1, 2, 8, False),    # 1-3 is a double pair, 3-5 has no link
    ("ndv2", 1, 1, 8, False),
    ("ndv2", 2, 8, 16, True),
    ("dgx-a100", 2, 1, 8, True),
    ("mi250", 1, 8, 16, True),
    ("mi250", 1, 2, 16, False),
])
def test_automorphisms(topo, name, nodes, offset, group, ok):
    t = topo(name, nodes)
    assert (automorphism_mismatch(t, symmetry_permutation(t.ngpus, offset, group)) is None) == ok


@pytest.mark.parametrize("name, nodes, offset, group, ok", [
    ("dgx2", 2, 2, 16, True), ("dgx2", 2, 1, 16, False), ("dgx2", 2, 16, 32, True), ("ndv2", 2, 2, 8, False),
    ("ndv2", 2, 8, 16, True), ("mi250", 2, 8, 16, True), ("mi250", 2, 2, 16, False), ("dgx-h100", 2, 1, 8, True),
])
def test_an_explicit_map_proves_what_vf2_proves(topo, name, nodes, offset, group, ok):
    """The map grown from the GPUs is checked edge by edge, so it never proves what is false; on the shipped
    profiles it proves every true symmetry (the fast path), and VF2 agrees with it."""
    import networkx as nx

    from colls.inputs.sketch import _extends, _pinned
    t = topo(name, nodes)
    perm = symmetry_permutation(t.ngpus, offset, group)
    inverse = {p: r for r, p in enumerate(perm)}
    vf2 = nx.algorithms.isomorphism.DiGraphMatcher(
        _pinned(t.graph, lambda r: r), _pinned(t.graph, lambda r: inverse[r]),
        node_match=lambda x, y: x["pin"] == y["pin"],
        edge_match=lambda x, y: (x["bw"], x["latency"]) == (y["bw"], y["latency"])).is_isomorphic()
    assert vf2 == ok and _extends(t.graph, perm) == ok
    assert (automorphism_mismatch(t, perm) is None) == ok      # the GPUs' own links first, VF2 where they pass


def test_wrong_symmetry_offset_is_refused(tmp_path, topo):
    data = json.loads((DATA / "sk2-dgx2-n2.json").read_text())
    data["symmetry_offsets"] = [[1, 16], [16, 32]]
    with pytest.raises(CollsError) as info:
        load_sketch(_write(tmp_path, data, "sym.json"), topo("dgx2", 2))
    assert info.value.key == "symmetry_offsets[0]" and "does not map the machine onto itself" in str(info.value)
    ndv2 = {"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [[2, 8]]}
    with pytest.raises(CollsError, match=r"symmetry_offsets\[0\]: .*GPU 0->2 \(25 GB/s, 0.3 us\) would map to "
                                         r"GPU 2->4 \(no link\)"):
        load_sketch(_write(tmp_path, ndv2, "nd.json"), topo("ndv2", 1))


# --- derive_sketch and the shipped sketches -------------------------------------------------------------
@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("nodes", (1, 2, 4))
def test_derived_sketch_round_trips(tmp_path, topo, name, nodes):
    t = topo(name, nodes)
    derived = derive_sketch(t)
    assert derived.nodes == nodes and derived.gpus_per_node == t.gpus_per_node
    assert load_sketch(_write(tmp_path, sketch_text(derived, "a comment\nand another")), t) == derived
    assert load_sketch(_write(tmp_path, derived.to_taccl(), "sk.json"), t) == derived
    if nodes > 1:
        assert derived.symmetry[-1] == (t.gpus_per_node, t.ngpus)


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("nodes", (1, 2, 4))
def test_shipped_sketches_load(topo, name, nodes):
    path = SKETCHES / f"{name}-n{nodes}.yaml"
    assert path.read_text().startswith("# ")
    assert load_sketch(path, topo(name, nodes)) == derive_sketch(topo(name, nodes))


def test_derived_sketches_follow_the_hardware(topo):
    a100 = derive_sketch(topo("dgx-a100", 2))
    assert a100.strategy == "switch" and a100.relay_form == "direct-map" and a100.symmetry == ((1, 8), (8, 16))
    dgx2 = derive_sketch(topo("dgx2", 2))
    assert dgx2.senders == (0, 2, 4, 6, 8, 10, 12, 14) and dgx2.senders_of[5] == (4,)
    assert dgx2.symmetry == ((2, 16), (16, 32))
    ndv2 = derive_sketch(topo("ndv2", 4))
    assert ndv2.strategy == "none" and ndv2.senders == (0,) and ndv2.symmetry == ((4, 8), (8, 32))
    assert derive_sketch(topo("mi250", 1)).symmetry == ((8, 16),)


# --- mistakes -------------------------------------------------------------------------------------------
SK = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
      "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
      "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}
DG = {"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [list(range(16))],
                                        "switch_hyperedge_strategy": ["uc-min"]}}


def _taccl(base, path: str, value):
    """``base`` with the value at dotted ``path`` replaced (None deletes it)."""
    data = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[p]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return data


BAD = [
    # (id, profile, nodes, file text or JSON data, expected key, words of the message)
    ("empty", "ndv2", 2, "", None, "is empty"),
    ("comment only", "ndv2", 2, "# nothing\n", None, "is empty"),
    ("json syntax", "ndv2", 2, '{"nnodes": 2,', None, "JSON syntax error"),
    ("yaml syntax", "ndv2", 2, "nodes: [2\n", None, "YAML syntax error"),
    ("not a mapping", "ndv2", 2, "- 1\n- 2\n", None, "a sketch is a mapping"),
    ("duplicate json key", "ndv2", 2, '{"nnodes": 2, "nnodes": 2}', None, "given twice"),
    ("NaN", "ndv2", 2, '{"nnodes": NaN}', None, "not a finite number"),
    ("unknown top key", "ndv2", 2, _taccl(SK, "extra", 1), "extra", "unknown key"),
    ("unknown nested key", "ndv2", 2, _taccl(SK, "internode_sketch.order", True), "internode_sketch.order",
     "unknown key"),
    ("unknown colls key", "ndv2", 2, "nodes: 2\nchunks: 2\n", "chunks", "unknown key"),
    ("missing nnodes", "ndv2", 2, _taccl(SK, "nnodes", None), "nnodes", "missing key"),
    ("nnodes differs", "ndv2", 1, SK, "nnodes", "the sketch is for 2 nodes, the machine has 1"),
    ("nnodes text", "ndv2", 2, _taccl(SK, "nnodes", "2"), "nnodes", "expected a whole number"),
    ("unknown strategy", "ndv2", 2, _taccl(SK, "intranode_sketch.strategy", "ring"),
     "intranode_sketch.strategy", "expected one of switch, none"),
    ("switch GPU out of range", "dgx2", 1, _taccl(DG, "intranode_sketch.switches", [list(range(17))]),
     "intranode_sketch.switches[0][16]", "GPU 16 out of range 0..15"),
    ("switch GPU twice", "dgx2", 1, _taccl(DG, "intranode_sketch.switches", [[0, 1, 1]]),
     "intranode_sketch.switches[0][2]", "listed twice"),
    ("switch lists overlap", "dgx2", 1, _taccl(_taccl(DG, "intranode_sketch.switches", [[0, 1, 2], [2, 3]]),
                                               "intranode_sketch.switch_hyperedge_strategy", ["uc-min"] * 2),
     "intranode_sketch.switches[1]", "disjoint or identical"),
    ("switch of one GPU", "dgx2", 1, _taccl(DG, "intranode_sketch.switches", [[3]]),
     "intranode_sketch.switches[0]", "two or more GPUs"),
    ("switch over unequal links", "ndv2", 1,
     {"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [[0, 1, 2]],
                                        "switch_hyperedge_strategy": ["uc-min"]}},
     "intranode_sketch.switches[0]", "need equal links"),
    ("switch over unlinked GPUs", "ndv2", 1,
     {"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [[0, 5]],
                                        "switch_hyperedge_strategy": ["uc-min"]}},
     "intranode_sketch.switches[0]", "no link to GPU 5"),
    ("hyperedge strategies count", "dgx2", 1, _taccl(DG, "intranode_sketch.switch_hyperedge_strategy", []),
     "intranode_sketch.switch_hyperedge_strategy", "0 entries for 1 switch list"),
    ("hyperedge strategy value", "dgx2", 1, _taccl(DG, "intranode_sketch.switch_hyperedge_strategy", ["uc-mid"]),
     "intranode_sketch.switch_hyperedge_strategy[0]", "uc-min, uc-max"),
    ("switches without switch strategy", "ndv2", 2, _taccl(SK, "intranode_sketch.switches", [[0, 1]]),
     "intranode_sketch.switches", "only with strategy switch"),
    ("internode strategy", "ndv2", 2, _taccl(SK, "internode_sketch.strategy", "ring"),
     "internode_sketch.strategy", "expected relay"),
    ("conn unknown form", "ndv2", 2, _taccl(SK, "internode_sketch.internode_conn", "ring"),
     "internode_sketch.internode_conn", "direct-map, fully-connected"),
    ("conn out-degree", "ndv2", 2, _taccl(SK, "internode_sketch.internode_conn", {"0": [1], "3": [1, 2]}),
     "internode_sketch.internode_conn.3", "same number"),
    ("conn receiver range", "ndv2", 2, _taccl(SK, "internode_sketch.internode_conn", {"0": [8]}),
     "internode_sketch.internode_conn.0[0]", "GPU 8 out of range 0..7"),
    ("conn sender not a GPU", "ndv2", 2, _taccl(SK, "internode_sketch.internode_conn", {"a": [1]}),
     "internode_sketch.internode_conn.a", "expected a whole number"),
    ("conn empty", "ndv2", 2, _taccl(SK, "internode_sketch.internode_conn", {}),
     "internode_sketch.internode_conn", "must not be empty"),
    ("rev map sender not in conn", "ndv2", 2,
     _taccl(SK, "internode_sketch.gpus_to_sender_rev_map", {"3": list(range(8))}),
     "internode_sketch.gpus_to_sender_rev_map.3", "not a sender of internode_conn"),
    ("rev map leaves GPUs out", "ndv2", 2, _taccl(SK, "internode_sketch.gpus_to_sender_rev_map", {"0": [0, 1]}),
     "internode_sketch.gpus_to_sender_rev_map", "GPUs 2, 3, 4, 5, 6, 7 have no sender"),
    ("enforce ordering without rev map", "ndv2", 2, _taccl(SK, "internode_sketch.enforce_ordering", True),
     "internode_sketch.enforce_ordering", "needs internode_sketch.gpus_to_sender_rev_map"),
    ("enforce ordering not boolean", "ndv2", 2, _taccl(SK, "internode_sketch.enforce_ordering", "yes"),
     "internode_sketch.enforce_ordering", "expected true or false"),
    ("internode on one node", "ndv2", 1, _taccl(SK, "nnodes", 1), "internode_sketch", "more than one node"),
    ("symmetry not a pair", "ndv2", 2, _taccl(SK, "symmetry_offsets", [[8]]), "symmetry_offsets[0]",
     "expected [offset, group]"),
    ("symmetry group not dividing", "ndv2", 2, _taccl(SK, "symmetry_offsets", [[1, 5]]),
     "symmetry_offsets[0][1]", "does not divide the 16 GPUs"),
    ("symmetry offset too large", "ndv2", 2, _taccl(SK, "symmetry_offsets", [[16, 16]]),
     "symmetry_offsets[0][0]", "must be at most 15"),
    ("symmetry not an automorphism", "ndv2", 2, _taccl(SK, "symmetry_offsets", [[1, 8]]),
     "symmetry_offsets[0]", "does not map the machine onto itself"),
    ("chunkup zero", "ndv2", 2, _taccl(SK, "hyperparameters.input_chunkup", 0),
     "hyperparameters.input_chunkup", "must be >= 1"),
    ("chunkup too large", "ndv2", 2, _taccl(SK, "hyperparameters.input_chunkup", 65),
     "hyperparameters.input_chunkup", "at most 64"),
    ("chunkup fraction", "ndv2", 2, _taccl(SK, "hyperparameters.input_chunkup", 1.5),
     "hyperparameters.input_chunkup", "expected a whole number"),
    ("colls senders_of not a sender", "dgx2", 2,
     "nodes: 2\ninternode: {relay: {0: [0], 2: [2]}, senders_of: {0: 0, 1: 1}}\n",
     "internode.senders_of.1", "not a relay sender"),
    ("colls own chunks first alone", "dgx-a100", 2, "nodes: 2\ninternode: {own_chunks_first: true}\n",
     "internode.own_chunks_first", "needs internode.senders_of"),
    ("colls switch strategy list length", "dgx2", 1,
     "nodes: 1\nintranode: {strategy: switch, switches: [all], switch_strategy: [uc-min, uc-max]}\n",
     "intranode.switch_strategy", "2 entries for 1 switch list"),
    ("colls yaml key twice", "ndv2", 1, "nodes: 1\nnodes: 1\n", None, "given twice"),
]


@pytest.mark.parametrize("profile, nodes, text, key, message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_sketches(tmp_path, topo, profile, nodes, text, key, message):
    path = _write(tmp_path, text, "sk.json" if isinstance(text, dict) else "sk.txt")
    with pytest.raises(CollsError) as info:
        load_sketch(path, topo(profile, nodes))
    line = str(info.value)
    assert "\n" not in line and line.startswith(str(path)) and message in line, line
    assert info.value.key == key and info.value.source == str(path)


def test_bad_files(tmp_path, topo):
    t = topo("ndv2", 1)
    with pytest.raises(CollsError, match="is a directory"):
        load_sketch(tmp_path, t)
    with pytest.raises(CollsError, match="no such file"):
        load_sketch(tmp_path / "missing.yaml", t)
    big = tmp_path / "big.yaml"
    big.write_text("nodes: 1\n" + "#" * (1 << 20))
    with pytest.raises(CollsError, match="at most 1 MB"):
        load_sketch(big, t)
    deep = tmp_path / "deep.json"
    deep.write_text('{"nnodes": ' + "[" * 100 + "]" * 100 + "}")
    with pytest.raises(CollsError, match="nested deeper"):
        load_sketch(deep, t)


def test_relay_needs_a_nic_path(tmp_path):
    """A GPU with no NIC cannot be a sender or a receiver between nodes."""
    box = {"name": "box", "gpu": {"model": "X", "sms": 10, "count": 2},
           "link_classes": {"nv": {"bandwidth": 100, "latency": 0.5}, "ib": {"bandwidth": 10, "latency": 1}},
           "switches": [{"name": "sw", "class": "nv", "links": 1, "gpus": "all"}],
           "nics": [{"class": "ib", "gpus": [0]}]}   # GPU 1 of each node has no NIC
    profile = _write(tmp_path, box, "box.yaml")   # JSON is YAML
    t = load_topology(str(profile), 2)
    assert load_sketch(_write(tmp_path, "nodes: 2\ninternode: {relay: {0: [0]}}\n"), t).senders == (0,)
    with pytest.raises(CollsError) as info:
        load_sketch(_write(tmp_path, "nodes: 2\ninternode: {relay: direct-map}\n"), t)
    assert info.value.key == "internode.relay" and "local GPU 1 cannot send" in str(info.value)
    with pytest.raises(CollsError) as info:
        load_sketch(_write(tmp_path, "nodes: 2\ninternode: {relay: {0: [1]}}\n"), t)
    assert info.value.key == "internode.relay.0"
    derived = derive_sketch(t)   # GPU 1 has no NIC: one sender, GPU 0, for both GPUs
    assert derived.senders == (0,) and derived.senders_of == ((0,), (0,))


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100", "dgx2", "ndv2", "mi250"])
def test_sketch_derive_prints_a_sketch_that_checks(profile, tmp_path):
    """`colls sketch derive` prints (or writes) the default sketch; `colls sketch check` accepts it for the same
    machine and refuses it, one line, exit 2, for another node count."""
    import subprocess

    def run(*args):
        return subprocess.CompletedProcess(args, *shell.run(args, timeout=600))
    printed = run("sketch", "derive", "--hardware", profile, "--nodes", "2")
    assert printed.returncode == 0, printed.stderr
    path = tmp_path / "s.yaml"
    assert run("sketch", "derive", "--hardware", profile, "--nodes", "2", "-o", str(path)).returncode == 0
    assert path.read_text() == printed.stdout
    ok = run("sketch", "check", str(path), "--hardware", profile, "--nodes", "2")
    assert ok.returncode == 0 and "valid sketch" in ok.stdout
    bad = run("sketch", "check", str(path), "--hardware", profile, "--nodes", "1")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nodes" in bad.stderr
