"""``colls simulate`` and the simulated figures of ``colls synth``, as a user runs them."""

import json

import pytest
from test_cli import run

from colls.simulate import report


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    out = {}
    for method in ("ring", "trees"):
        path = d / f"ag-{method}.xml"
        rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", method,
                              "-o", str(path))
        assert rc == 0, err
        out[method] = (path, stdout)
    return out


def test_synth_reports_simulated_busbw(files, tmp_path):
    _, stdout = files["ring"]
    assert "simulated busbw 1KB" in stdout and "1MB" in stdout and "1GB" in stdout
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "-o",
                          str(tmp_path / "x.xml"), "--json")
    facts = json.loads(stdout)
    assert set(facts["simulated_busbw_gbps"]) == {"1KB", "1MB", "1GB"}
    curve = facts["simulated"]
    assert [t["size_bytes"] for t in curve][:3] == [1024, 4096, 16384] and curve[-1]["size_bytes"] == 4 << 30
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "-o",
                          str(tmp_path / "y.xml"), "--no-simulate")
    assert rc == 0 and "simulated busbw" not in stdout


def test_simulate_prints_a_row_per_size_and_json_has_every_number(files):
    path, _ = files["trees"]
    rc, stdout, err = run("simulate", str(path), "--hardware", "dgx-a100", "--sizes", "1KB:1GB:32")
    assert rc == 0, err
    for size in ("1KB", "32KB", "1MB", "32MB", "1GB"):
        assert f"  {size:>8} " in stdout
    assert "busiest link" in stdout and "model (NCCL on Ampere): " in stdout
    rc, stdout, err = run("simulate", str(path), "--hardware", "dgx-a100", "--sizes", "1MB,1GB", "--json")
    data = json.loads(stdout)
    sizes = data["results"][0]["sizes"]
    assert [s["size_bytes"] for s in sizes] == [1 << 20, 1 << 30]
    big = sizes[1]
    assert big["busbw_gbps"] == pytest.approx(big["algbw_gbps"] * 7 / 8)
    assert 0 < big["bound_pct"] <= 100 and big["time_us"] >= big["bound_time_us"]
    assert big["busiest_link"] and 0 < big["busiest_link_utilisation"] <= 1


def test_sizes_a_file_does_not_serve_are_shown_as_such(files):
    path, _ = files["ring"]
    rc, stdout, err = run("simulate", str(path), "--hardware", "dgx-a100", "--sizes", "4,32,1MB", "--json")
    sizes = json.loads(stdout)["results"][0]["sizes"]
    assert [s["served"] for s in sizes] == [False, False, True]
    assert "whole number of 4-byte elements" in sizes[0]["reason"]
    assert "not a multiple of nchunksperloop" in sizes[1]["reason"]


def test_plot_and_timeline_are_written(files, tmp_path):
    ring, _ = files["ring"]
    trees, _ = files["trees"]
    plot, timeline = tmp_path / "p.png", tmp_path / "t.png"
    rc, stdout, err = run("simulate", str(ring), str(trees), "--hardware", "dgx-a100", "--sizes", "1KB:64MB:8",
                          "--baseline", "nccl-ring", "--plot", str(plot))
    assert rc == 0, err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "NCCL 2.23.4 ring" in stdout and ("best configuration" in stdout or "channels at every size" in stdout)
    rc, stdout, err = run("simulate", str(trees), "--hardware", "dgx-a100", "--timeline", str(timeline),
                          "--size", "16MB")
    assert rc == 0, err
    assert timeline.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "link utilisation over the" in stdout


def test_baseline_alone(tmp_path):
    rc, stdout, err = run("simulate", "--baseline", "nccl-tree", "--collective", "allreduce", "--hardware",
                          "dgx-a100", "--nodes", "2", "--sizes", "1MB", "--json")
    assert rc == 0, err
    res = json.loads(stdout)["results"][0]
    assert res["baseline"] and res["sizes"][0]["protocol"] in ("Simple", "LL", "LL128")


def test_the_table_groups_sizes_not_run():
    from colls.simulate import Timing
    rows = [Timing(1024, False, "the per-rank count 4 is not a multiple of nchunksperloop=8: x"),
            Timing(2048, False, "the per-rank count 8 is not a multiple of nchunksperloop=8: x"),
            Timing(4096, True, None, 10.0, 0.4, 0.35, 1.0, 10.0, "GPU 0 -> sw", 0.1)]
    text = report.table(rows)
    assert "1KB..2KB not run" in text and text.count("not run") == 1 and "10.0%" in text


def test_graph_launch_drops_the_hosts_cost_per_call(files):
    """--launch graph times calls captured in a CUDA graph (nccl-tests -G 1): the same file, 22 us less per
    call on an A100 (the host's launch and proxy start), for the file and for the baseline alike."""
    path, _ = files["trees"]
    times = {}
    for launch in ("stream", "graph"):
        rc, stdout, err = run("simulate", str(path), "--hardware", "dgx-a100", "--sizes", "64KB", "--baseline",
                              "nccl", "--launch", launch, "--json")
        assert rc == 0, err
        data = json.loads(stdout)
        times[launch] = [r["sizes"][0]["time_us"] for r in data["results"]]
        assert f"({launch} launch)" in data["model"]
    assert len(times["stream"]) == 2
    for stream, graph in zip(times["stream"], times["graph"]):
        assert stream - graph == pytest.approx(22.0, abs=0.01)


def test_an_unknown_launch_mode_is_one_line_exit_2():
    from test_cli import assert_bad_input
    rc, out, err = run("simulate", "--baseline", "nccl", "--collective", "allreduce", "--hardware", "dgx-a100",
                       "--sizes", "1KB", "--launch", "cudagraph")
    assert_bad_input(rc, out, err)
    assert "--launch" in err


def test_progress_names_each_size_before_it_is_timed():
    """A long simulation says what it is timing (the command line shows it on a terminal from a second in)."""
    from colls.inputs import hardware
    from colls.simulate import cli_run
    heard = []
    cli_run.run([], hardware.load_topology("dgx-a100"), [1 << 10, 1 << 20], baseline="nccl",
                collective="allgather", progress=heard.append)
    assert len(heard) == 2 and heard[0].endswith("at 1KB (1 of 2 sizes)") and "1MB (2 of 2" in heard[1]
    assert heard[0].startswith("timing NCCL")


def test_processes_give_the_answer_one_process_gives(tmp_path):
    """simulate --jobs N: each (file, size) timed in a forked process, the largest sizes first; the output is
    the one a single process prints, byte for byte, and the progress says how the work is shared."""
    from colls import pipeline
    from colls.collectives import Collective
    from colls.inputs import hardware
    from colls.simulate import cli_run
    topo = hardware.load_topology("dgx-a100", nodes=2)
    text = pipeline.compile_schedule(topo, Collective("allreduce", topo.ngpus), "ring").text
    sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 26]
    outs, heard = [], []
    for jobs in (1, 3):
        out = cli_run.run([("ring.xml", text)], topo, sizes, baseline="nccl", jobs=jobs, progress=heard.append)
        outs.append((out.text, json.dumps(out.data, sort_keys=True)))
    assert outs[0] == outs[1]
    assert heard[-1].startswith("timing ring.xml and NCCL") and heard[-1].endswith(" at 4 sizes in 3 processes")
    assert len(heard) == 2 * len(sizes) + 1      # a line a timing in one process; one line for the processes
