"""colls compile: ranges that partition the sizes, files that verify and that the runtime would pick for
the sizes they were chosen for, a folder replaced whole or not at all, byte-identical reruns, and
one-line refusals."""

import hashlib
import json
import os
import shutil
import subprocess

import pytest

import shell

from colls import compile as comp
from colls import explain, files, msccl, verify
from colls.runtimes import get_target
from colls.runtimes.calibration import margin


def run(*args):
    """The real entry point as a shell runs it (tests/shell.py)."""
    return subprocess.CompletedProcess(args, *shell.run(args, timeout=600))

SMALL = """name: small
description: 4 GPUs on a switch, a NIC each
gpu: {model: A100-SXM4, sms: 108, count: 4}
link_classes:
  nvlink: {bandwidth: 25, latency: 0.15, efficiency: 0.8}
  ib: {bandwidth: 25, latency: 0.65}
switches:
  - {name: nvswitch, class: nvlink, links: 12, gpus: all}
nics:
  - {class: ib, gpus: [0]}
  - {class: ib, gpus: [1]}
  - {class: ib, gpus: [2]}
  - {class: ib, gpus: [3]}
network: {layout: rails}
"""
SIZES = "1KB,64KB,4MB"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "small.yaml"
    path.write_text(SMALL)
    return str(path)


def _compile(profile, out, *extra, collective="allreduce", methods="ring,trees", sizes=SIZES):
    return run("compile", "--hardware", profile, "--nodes", "2", "--collective", collective, "--methods", methods,
               "--sizes", sizes, "-o", str(out), *extra)


def _digest(folder) -> dict:
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def compiled(small, tmp_path_factory):
    out = tmp_path_factory.mktemp("c") / "algos"
    proc = _compile(small, out, "--json", "--quiet", "--margin", "0")   # any faster file takes its sizes
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return out, json.loads(proc.stdout)


def test_ranges_partition_the_sizes_and_files_verify(compiled):
    out, data = compiled
    (coll,) = data["collectives"]
    ranges = coll["ranges"]
    assert ranges[0]["min_bytes"] == 0 and ranges[-1]["max_bytes"] == 0
    for a, b in zip(ranges, ranges[1:]):
        assert b["min_bytes"] == a["max_bytes"] + 1           # contiguous, no overlap (exe: inclusive ends)
    simulated = [s["size_bytes"] for r in ranges for s in r["sizes"]]
    assert simulated == coll["sizes"]
    assert data["files"] and len(data["files"]) == sum(1 for r in ranges if r["file"])
    assert sorted(os.listdir(out / "algorithms")) == sorted(f.split("/", 1)[1] for f in data["files"])
    for r in ranges:
        for s in r["sizes"]:
            if r["file"]:   # a file claims a size only where it beats the runtime's own algorithm
                need = 1 / (1 - s["margin"])                      # faster by more than the margin
                assert s["busbw_gbps"] >= s["nccl_busbw_gbps"] * need * 0.999
            else:
                assert s["busbw_gbps"] == s["nccl_busbw_gbps"]
        if r["file"]:
            text = files.read_text(str(out / r["file"]), files.MAX_XML_BYTES)
            program, found = msccl.parse(text, r["file"])
            report = verify.verify(program, get_target("exe"), findings=found)
            assert report.ok, report.format()
            assert (program.min_bytes, program.max_bytes) == (r["min_bytes"], r["max_bytes"])
            assert program.proto == r["protocol"]


def test_explain_picks_each_range_file_at_its_sizes(compiled):
    out, data = compiled
    (coll,) = data["collectives"]
    for r in coll["ranges"]:
        for s in r["sizes"]:
            e = explain.explain([str(out / "algorithms")], ranks=8, size=s["size_bytes"])
            chosen = e.to_dict()["runs"]
            if r["file"]:
                assert chosen is not None and chosen.endswith(os.path.basename(r["file"]))
            else:
                assert chosen is None


def test_readme_env_and_plot(compiled):
    out, data = compiled
    readme = (out / "README.md").read_text()
    assert readme.splitlines()[0] == comp.MARKER
    for f in data["files"]:
        assert f in readme
    env = (out / "env.sh").read_text()
    assert 'export MSCCL_ALGO_DIR="$_colls_dir/algorithms"' in env and "NCCL_MSCCL_ENABLE=1" in env
    assert (out / "allreduce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for path in (out, out / "algorithms"):          # readable by the job's other users, like the files
        assert os.stat(path).st_mode & 0o755 == 0o755
    assert set(os.listdir(out / "algorithms")) == {os.path.basename(f) for f in data["files"]}


def test_rerun_is_byte_identical_and_replaces_the_folder(small, compiled, tmp_path):
    out, _ = compiled
    again = tmp_path / "algos"
    shutil.copytree(out, again)
    (again / "algorithms" / "stale.xml").write_text("<algo/>")     # a leftover of an earlier run goes
    assert _compile(small, again, "--quiet", "--margin", "0").returncode == 0
    assert _digest(again) == _digest(out)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def test_a_failed_run_leaves_the_folder_as_it_was(small, compiled, tmp_path, monkeypatch):
    from colls.inputs import hardware as hw
    out, _ = compiled
    target = tmp_path / "algos"
    shutil.copytree(out, target)
    before = _digest(target)
    topo = hw.load_topology(small, nodes=2)
    plans = comp.plan(topo, ["allreduce"], sizes=[1024], methods=["ring"])
    comp.lower_files(plans, "exe")
    real = files.write_atomic
    calls = []

    def failing(path, text, option=None):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real(path, text, option=option)
    monkeypatch.setattr(comp, "write_atomic", failing)
    with pytest.raises(OSError):
        comp.write(plans, str(target), topo, "exe")
    assert _digest(target) == before
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


@pytest.mark.parametrize("target", ["rccl", "old"])
def test_other_targets(small, tmp_path, target):
    out = tmp_path / "algos"
    proc = _compile(small, out, "--quiet", "--json", "--target", target, sizes="1KB,1MB")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    env = (out / "env.sh").read_text()
    if target == "rccl":
        assert "RCCL_MSCCL_ENABLE=1" in env and "MSCCL_ALGO_DIR" in env
        # the runtime that keeps a call no file takes is RCCL, in every word the folder says about it
        readme = (out / "README.md").read_text()
        assert "RCCL's own algorithm" in env and "RCCL's modelled busbw" in readme and "NCCL" not in readme
    else:
        assert "MSCCL_XML_FILES" in env and "NCCL_ALGO=MSCCL,RING,TREE" in env
        assert len(data["files"]) <= comp.OLD_MAX_FILES
        ranges = data["collectives"][0]["ranges"]
        for a, b in zip(ranges, ranges[1:]):
            assert b["min_bytes"] == a["max_bytes"]             # [min, max): the next starts at the end
    for f in data["files"]:
        text = (out / f).read_text()
        program, found = msccl.parse(text, f)
        assert verify.verify(program, get_target(target), findings=found).ok


def test_old_keeps_at_most_four_files():
    class T:
        def __init__(self, us):
            self.time_us, self.served, self.busbw_gbps = us, True, 1.0
    plans = []
    for kind in ("allreduce", "allgather"):
        nccl = [T(10.0)] * 6
        method = comp.Method("ring", timings=[T(9.0 - i) for i in range(6)])
        ranges = [comp.Range(i, i, ("ring", 1, p)) for i, p in enumerate(["LL", "LL128", "Simple"] * 2)]
        plans.append(comp.Plan(kind, None, list(range(6)), [method], nccl, None, ranges))
    comp._keep_old_files(plans)
    kept = [(p.kind, r.first) for p in plans for r in p.ranges if r.winner is not None]
    assert len(kept) == comp.OLD_MAX_FILES
    assert all(r.note for p in plans for r in p.ranges if r.winner is None)
    assert ("allreduce", 5) in kept and ("allreduce", 0) not in kept     # the largest savings stay


@pytest.mark.parametrize("args, key", [
    (["--methods", "ring,bogus"], "--methods"),
    (["--methods", "ring,ring"], "--methods"),
    (["--methods", ""], "--methods"),
    (["--sizes", "0"], "--sizes"),
    (["--collective", "broadcast"], "--root"),
    (["--root", "1"], "--root"),
    (["--sketch", "x.yaml"], "--sketch"),
    (["--time-limit", "5"], "--time-limit"),
    (["--without", "nic:9:0"], "--without"),
])
def test_bad_options_one_line_exit_2(small, tmp_path, args, key):
    out = tmp_path / "algos"
    base = ["compile", "--hardware", small, "--nodes", "2", "--methods", "ring", "-o", str(out)]
    if "--collective" not in args:
        base += ["--collective", "allreduce"]
    proc = run(*base, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], proc.stderr
    assert not out.exists()


def test_a_folder_it_wrote_is_replaced_only_while_it_holds_nothing_else(tmp_path):
    """compile replaces its own folder whole: one that holds a file of the user's beside compile's own (notes, a
    subfolder, a file in algorithms/ that is not an algorithm) is not its own any more."""
    folder = tmp_path / "out"
    (folder / comp.ALGORITHMS).mkdir(parents=True)
    (folder / "README.md").write_text(comp.MARKER + "\n")
    for name in ("env.sh", "allgather.png", "broadcast-root3.png", comp.REGISTER):
        (folder / name).write_text("x")
    (folder / comp.ALGORITHMS / "allgather-01-ring-LL-x1.xml").write_text("x")
    assert comp.written_here(str(folder))
    for extra in ("data.csv", "sub/f", f"{comp.ALGORITHMS}/notes.txt", f"{comp.ALGORITHMS}/deeper/a.xml"):
        path = folder / extra
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("keep me")
        assert not comp.written_here(str(folder)), extra
        path.unlink()
        if path.parent != folder and path.parent.name != comp.ALGORITHMS:
            path.parent.rmdir()
    assert comp.written_here(str(folder))


def test_refuses_a_folder_it_did_not_write(small, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    proc = _compile(small, out, "--quiet", sizes="1KB")
    assert proc.returncode == 2 and "did not write" in proc.stderr
    assert os.listdir(out) == ["notes.txt"]
    plain = tmp_path / "file"
    plain.write_text("x")
    proc = _compile(small, plain, "--quiet", sizes="1KB")
    assert proc.returncode == 2 and "not a folder" in proc.stderr


def test_dgx_a100_two_nodes_files_take_only_what_they_win_and_explain(tmp_path):
    """A file takes a size only when it beats the runtime's own algorithm by more than the model's measured
    error there (allgather on 2 x DGX A100: the trees files against NCCL's ring), every file is proved,
    explain picks the 1 GB file and names the divisibility rule for a size the file's range holds but its
    chunks do not divide."""
    out = tmp_path / "algos"
    proc = run("compile", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather", "--methods",
               "trees", "--sizes", "1KB,64MB,1GB", "-o", str(out), "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    ranges = data["collectives"][0]["ranges"]
    assert data["files"]
    for r in ranges:
        for s in r["sizes"]:
            assert s["margin"] == margin(s["size_bytes"])[0]
            if r["file"]:
                assert s["busbw_gbps"] > s["nccl_busbw_gbps"] * (1 + s["margin"])
            else:
                assert s["busbw_gbps"] == s["nccl_busbw_gbps"]
    large_file = ranges[-1]["file"]
    assert large_file
    proc = run("explain", str(out / "algorithms"), "--ranks", "16", "--bytes", str(1 << 30), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"].endswith(os.path.basename(large_file))
    proc = run("explain", str(out / "algorithms"), "--ranks", "16", "--bytes", str((1 << 30) + 16 * 4))
    assert proc.returncode == 0 and "not a multiple of nchunksperloop" in proc.stdout, proc.stderr
    readme = (out / "README.md").read_text()
    assert "measured error" in readme and "16 MB and above" in readme


def test_the_runtime_keeps_what_no_file_wins(tmp_path):
    """Allreduce on 2 x DGX H100: NCCL's tree (small calls) and NVLS-tree (large ones) are modelled faster
    than the trees files by more than the margin, so no file is written and explain says NCCL's own
    algorithm runs."""
    out = tmp_path / "algos"
    proc = run("compile", "--hardware", "dgx-h100", "--nodes", "2", "--collective", "allreduce", "--methods",
               "trees", "--sizes", "1KB,1GB", "-o", str(out), "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    ranges = json.loads(proc.stdout)["collectives"][0]["ranges"]
    assert [r["file"] for r in ranges] == [None]
    proc = run("explain", str(out / "algorithms"), "--ranks", "16", "--bytes", "1KB", "--collective", "allreduce")
    assert proc.returncode == 0 and "NCCL's own algorithm runs" in proc.stdout


def test_margin_option_is_said(small, tmp_path):
    out = tmp_path / "algos"
    proc = _compile(small, out, "--quiet", "--margin", "0", sizes="1KB,1MB")
    assert proc.returncode == 0, proc.stderr
    assert "0% (--margin)" in (out / "README.md").read_text()
    proc = _compile(small, tmp_path / "bad", "--margin", "-3")
    assert proc.returncode == 2 and "--margin" in proc.stderr


def test_without_reaches_compile(small, tmp_path):
    """A degraded machine: the folder is compiled for it and says so."""
    out = tmp_path / "algos"
    proc = _compile(small, out, "--quiet", "--without", "nic:0:0", sizes="1KB,1MB")
    assert proc.returncode == 0, proc.stderr
    assert "without nic:0:0" in proc.stdout and "without nic:0:0" in (out / "README.md").read_text()


def test_ranges_without_a_modelled_nccl_go_to_the_fastest_file():
    class T:
        def __init__(self, us):
            self.time_us, self.served, self.extra = us, True, {"index": 0, "protocol": "LL"}
    ring = comp.Method("ring", timings=[T(5.0), None, T(9.0)])
    trees = comp.Method("trees", timings=[T(6.0), T(7.0), None])
    ranges = comp._ranges([ring, trees], [None, None, None], [1024, 2048, 4096], "exe", [0.1, 0.1, 0.1])
    assert [(r.first, r.last, r.winner[0]) for r in ranges] == [(0, 0, "ring"), (1, 1, "trees"), (2, 2, "ring")]
    assert [(r.min_bytes, r.max_bytes) for r in ranges] == [(0, 1024), (1025, 2048), (2049, 0)]


def test_methods_out_of_reach_of_the_runtime_are_not_simulated_and_change_nothing(small):
    """compile times each method only against the runtime's time less the margin: the ranges are those the
    full timings give, and a cell left out is one whose proven lower bound is above that time."""
    from colls.inputs import hardware
    topology = hardware.load_topology(small, nodes=2)
    sizes = [1 << 10, 1 << 16, 1 << 22, 1 << 26]
    plans = comp.plan(topology, ["allreduce", "allgather"], sizes=sizes, methods=("ring", "direct", "trees"))
    pruned = 0
    for p in plans:
        made = [m for m in p.methods if m.variants]
        full = [comp.Method(m.name, timings=[comp.fastest(topology, p.kind, m.variants, "exe").time(s) for s in sizes])
                for m in made]
        assert comp._ranges(full, p.nccl, sizes, "exe", p.margins) == p.ranges
        for m, f in zip(made, full):
            for t, whole, n, mg in zip(m.timings, f.timings, p.nccl, p.margins):
                if t is not None and not t.served:
                    pruned += 1
                    assert n.time_us * (1 - mg) < t.extra["lower_bound_us"] <= whole.time_us * (1 + 1e-9)
                elif t is not None:
                    assert t.time_us == whole.time_us
    assert pruned


def test_max_threadblocks_bounds_every_file(tmp_path):
    """--max-threadblocks 16 on 2 x DGX A100 allgather: the trees file takes 30 threadblocks per GPU by
    itself; within the budget every written file holds at most 16, and the README says how many each holds."""
    out = tmp_path / "algos"
    proc = run("compile", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather", "--methods",
               "trees", "--sizes", "1KB,64MB,1GB", "--max-threadblocks", "16", "-o", str(out), "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)["files"]
    assert written
    for path in written:
        program = msccl.parse((out / path).read_text() if not os.path.isabs(path) else open(path).read())[0]
        assert program.max_tbs() <= 16
    assert "threadblocks/GPU" in (out / "README.md").read_text()


def test_a_collective_no_method_makes_says_the_runtime_keeps_every_size():
    from colls.inputs import hardware as hw
    plans = comp.plan(hw.load_topology("dgx-a100"), ["alltoall"], sizes=[1 << 20], methods=("trees",))
    assert not any(m.variants for m in plans[0].methods)
    assert plans[0].ranges[0].winner is None
    assert "no method made a file: the runtime keeps every size" in plans[0].notes


def test_hier_is_among_the_default_methods_on_more_than_one_node(small, tmp_path):
    from colls.inputs import hardware as hw
    assert comp.default_methods(hw.load_topology(small, nodes=1)) == comp.METHODS
    assert comp.default_methods(hw.load_topology(small, nodes=2)) == comp.METHODS + ("hier",)
    r = run("compile", "--hardware", small, "--nodes", "2", "--collective", "allgather", "--sizes", "64KB",
            "--time-limit", "0.2", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "synthesizing with ring, direct, trees, milp, hier for allgather" in r.stderr


def test_variants_are_checked_for_deadlocks_and_the_written_files_proved(small, monkeypatch):
    """The methods' variants are only simulated: checked for the target's rules, limits and deadlocks, not
    proved (the proof runs once, on each file as written, with its byte range). A file the proof finds wrong
    for in-place calls then serves out-of-place calls only, as synth's --outofplace-only makes it."""
    from colls import pipeline
    from colls.errors import CollsError
    from colls.inputs import hardware
    topo = hardware.load_topology(small, nodes=2)
    plans = comp.plan(topo, ["allreduce"], methods=("ring", "trees"), sizes=[1024, 4 << 20], margin=0.0)
    variants = [c for m in plans[0].methods for c in m.variants]
    assert variants and not any(c.report.facts["semantics_checked"] for c in variants)
    real = pipeline.relower

    def no_in_place(compiled, **changes):
        if changes.get("mode", compiled.mode) == "both":
            raise CollsError("ring allreduce on small: the generated program does not verify for exe: in-place: "
                             "rank 0 reads a chunk already overwritten; this schedule does not support in-place calls")
        return real(compiled, **changes)

    monkeypatch.setattr(pipeline, "relower", no_in_place)
    comp.lower_files(plans, "exe")
    files = [r.compiled for r in plans[0].ranges if r.winner is not None]
    assert files and all(c.mode == "outofplace" and c.report.ok for c in files)
    assert all(c.report.facts["semantics_checked"] for c in files)
    # the folder's README says where an in-place call of those sizes goes
    assert "out-of-place calls only; an in-place call of those sizes runs NCCL's own algorithm" in \
        comp.readme(plans, topo, "exe")


def _trees_reducescatter_ranges(out, *sizes) -> list:
    """compile's ranges for the trees reduce-scatter on 2 x DGX A100 at ``sizes`` (bytes), one per size."""
    proc = run("compile", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "reducescatter", "--methods",
               "trees", "--sizes", ",".join(f"{s}B" for s in sizes), "-o", str(out), "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    ranges = json.loads(proc.stdout)["collectives"][0]["ranges"]
    return [[r for r in ranges if r["sizes"][0]["size_bytes"] == size][0] for size in sizes]


def test_deeper_trees_take_the_middle_sizes_and_one_chunk_a_tree_the_small_ones(tmp_path):
    """compile keeps the trees' copies at one chunk a tree and adds the deepest file that simulates faster
    (colls.tune.deepest): on 2 x DGX A100 the reduce-scatter's 256 MB call goes to a trees file carrying 64 chunks
    a tree (222 GB/s busbw against NCCL's ring's 190; 64 MB went to 8 chunks a tree at 173 GB/s, 59 at one chunk a
    tree, until NCCL's ring's relays forwarded the kernel's slices and reached 173 too), and the 4 KB call keeps a
    file of one chunk a tree (fewer, larger messages)."""
    out = tmp_path / "rs"
    small, large = _trees_reducescatter_ranges(out, 4 << 10, 256 << 20)
    assert small["method"] == large["method"] == "trees" and small["instances"] == large["instances"]
    assert large["chunks_per_loop"] > small["chunks_per_loop"]
    assert large["sizes"][0]["busbw_gbps"] > 1.05 * large["sizes"][0]["nccl_busbw_gbps"]
    readme = (out / "README.md").read_text()
    assert f"{large['chunks_per_loop'] // small['chunks_per_loop']} chunks a tree" in readme


def test_the_largest_calls_get_a_file_deeper_than_the_middle_ones(tmp_path):
    """The depth compile's trees take is chosen at 16 and 256 MB; at 1 GB a chunk of that file is larger than the
    runtime's 2 MB slice, so its messages and its pipeline's fill are as at one chunk a tree. compile makes the
    file deeper again at its largest size (colls.compile._deeper): on 2 x DGX A100 the reduce-scatter's 1 GB
    call went to the trees at one chunk a tree (234 GB/s busbw, 1.24x NCCL's ring as then modelled, 189) and now
    to a file of many more chunks a loop than the one the 16 and 256 MB search made, which takes the 1 MB call
    (8 chunks a tree, LL): 244 GB/s, 1.24x NCCL's ring (197), and 1.09x that file timed at 1 GB with Simple (224)."""
    from dataclasses import replace
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    out = tmp_path / "rs"
    middle, large = _trees_reducescatter_ranges(out, 1 << 20, 1 << 30)
    assert large["file"] and large["file"] != middle["file"]
    assert large["chunks_per_loop"] > 2 * middle["chunks_per_loop"]
    assert large["sizes"][0]["busbw_gbps"] > 1.2 * large["sizes"][0]["nccl_busbw_gbps"]
    shallower, _ = msccl.parse((out / middle["file"]).read_text(), middle["file"])
    shallower.max_bytes = 0                      # timed at 1 GB as if it served it, as the large file runs
    timing, _ = simulate(replace(shallower, proto="Simple"), load_topology("dgx-a100", nodes=2), "reducescatter",
                         1 << 30)
    assert large["sizes"][0]["busbw_gbps"] > 1.05 * timing.busbw_gbps


def test_milp_solves_the_problems_its_collectives_share_once(small, monkeypatch):
    """milp's allreduce solves the reduce-scatter's problem and the allgather's: compile makes the three in one task,
    each problem solved once, and the files are those each collective makes alone."""
    from colls.inputs import hardware
    from colls.synth import milp
    topo = hardware.load_topology(small, nodes=2)
    kinds = ["allgather", "alltoall", "allreduce", "reducescatter"]
    assert comp._together("milp", kinds) == [(2, 3, 0), (1,)]
    assert comp._together("ring", kinds) == [(0,), (1,), (2,), (3,)]
    solves = []
    real = milp.solve

    def counted(problem, settings):
        solves.append(problem)
        return real(problem, settings)

    monkeypatch.setattr(milp, "solve", counted)
    sizes = [1 << 20]
    colls = [comp.Collective(k, topo.ngpus) for k in ("allreduce", "reducescatter", "allgather")]
    together = comp._each(comp._variants, [(topo, c, "milp", "exe", comp.milp_settings(), sizes) for c in colls])
    assert len(solves) == 2
    alone = [comp._variants(topo, c, "milp", "exe", comp.milp_settings(), sizes) for c in colls]
    assert len(solves) == 2 + 4
    assert milp._SHARED is None
    for a, b in zip(together, alone):
        assert [v.program for v in a.variants] == [v.program for v in b.variants] and a.variants


def test_methods_given_that_make_no_file_are_refused_as_synth_refuses_them(tmp_path, capsys):
    """--methods hier on one node: hier has no hierarchy to follow there; compile wrote a folder of the
    runtime's own algorithms instead, in silence. Refused, naming --methods and why, nothing written."""
    from colls.cli import main
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["compile", "--hardware", "dgx-a100", "--collective", "allgather", "--methods", "hier", "--sizes", "1MB",
              "--quiet", "-o", str(out)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "--methods: no method given made a file (hier for allgather:" in err
    assert not out.exists()


def test_the_runtimes_sizes_are_shared_among_spare_processes_with_the_same_answer():
    """Where the methods' tasks leave processes over, each collective's sizes for the runtime's own algorithms
    are split among them (the largest dealt round); the runtime's times, its notes and the folder's choices are
    the ones a single task makes."""
    from colls.inputs import hardware
    topo = hardware.load_topology("dgx-a100", nodes=2)
    sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28]
    assert comp._runtime_parts(sizes, 0, 1) == [(0, 1, 2, 3, 4)]          # no process over: one task, all sizes
    assert comp._runtime_parts(sizes, 6, 2) == [(1, 4), (0, 3), (2,)]      # 28, 24 and 20 bits first
    got = []
    for jobs in (1, 8):
        plans = comp.plan(topo, ["allreduce", "allgather"], sizes=sizes, methods=["ring"], jobs=jobs)
        got.append([([None if t is None else (t.time_us, t.extra) for t in p.nccl], p.notes, repr(p.ranges))
                    for p in plans])
    assert got[0] == got[1]
