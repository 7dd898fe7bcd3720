"""``colls explain``: which file of a folder the runtime runs for one call, and the first reason for every other."""

import json
import os
import shutil

import pytest

from colls import explain as ex
from colls import pipeline
from colls.inputs import hardware
from colls.cli import main
from colls.collectives import Collective
from colls.errors import CollsError

DATA = os.path.join(os.path.dirname(__file__), "data")
GB, MB, KB = 1 << 30, 1 << 20, 1 << 10


@pytest.fixture(scope="module")
def synth_files(tmp_path_factory):
    """Two allreduce files for 2 x DGX A100 as `colls synth` writes them: a ring up to 1 MB, trees above."""
    topo = hardware.load_topology("dgx-a100", nodes=2)
    coll = Collective("allreduce", topo.ngpus)
    ring = pipeline.compile_schedule(topo, coll, "ring", max_bytes=MB)
    trees = pipeline.compile_schedule(topo, coll, "trees", min_bytes=MB + 1)
    return {"ring": ring, "trees": trees}


@pytest.fixture
def folder(tmp_path, synth_files):
    d = tmp_path / "algos"
    d.mkdir()
    (d / "10-ring.xml").write_text(synth_files["ring"].text)
    (d / "20-trees.xml").write_text(synth_files["trees"].text)
    return d


def explain(paths, **kw):
    kw.setdefault("ranks", 16)
    return ex.explain([str(p) for p in paths], **kw)


def by_name(result):
    return {os.path.basename(f.path): f for f in result.files}


def cli(capsys, *args):
    """The real entry point in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as stop:
        main(["explain", *map(str, args)])
    out, err = capsys.readouterr()
    return stop.value.code, out, err


def test_small_calls_run_the_ring_and_large_calls_the_trees(folder, synth_files):
    small = explain([folder], size="1KB")
    assert small.verdict == "runs" and small.runs == str(folder / "10-ring.xml")
    assert small.headline == f"1KB allreduce on 16 ranks (float, out-of-place): runs {folder / '10-ring.xml'}"
    files = by_name(small)
    assert files["10-ring.xml"].status == ex.RUNS
    assert files["20-trees.xml"].reason == "1KB (1024 bytes) is below minBytes=1048577"
    big = explain([folder], size=GB)
    assert big.runs == str(folder / "20-trees.xml")
    assert by_name(big)["10-ring.xml"].reason == "1GB (1073741824 bytes) is above maxBytes=1048576"
    assert explain([folder], size=MB).runs == str(folder / "10-ring.xml")      # maxBytes is inclusive
    assert synth_files["trees"].program.nchunksperloop == 16


def test_a_size_that_does_not_divide_names_the_count_and_nchunksperloop(folder, synth_files):
    r = explain([folder], size=1000)
    assert r.verdict == "none" and r.runs is None
    assert r.headline.endswith("no file matches, NCCL's own algorithm runs")
    ncpl = synth_files["ring"].program.nchunksperloop
    files = by_name(r)
    assert files["10-ring.xml"].match_check == "count"
    assert files["10-ring.xml"].reason == f"250 elements is not a multiple of nchunksperloop {ncpl}"
    assert files["20-trees.xml"].reason == "250 elements is not a multiple of nchunksperloop 16"
    # half: twice the elements for the same bytes
    assert by_name(explain([folder], size=1000, dtype="half"))["20-trees.xml"].reason.startswith("500 elements")


def test_ranks_collective_and_channels(folder, synth_files):
    r = explain([folder], size=GB, ranks=8)
    assert {f.reason for f in r.files} == {"ngpus=16, the communicator has 8 ranks"}
    r = explain([folder], size=GB, collective="allgather")
    assert {f.reason for f in r.files} == {'coll="allreduce", the call is an allgather'}
    used = synth_files["trees"].program.nchannels          # more than the ring's, at most the runtime's 32
    assert synth_files["ring"].program.nchannels < used <= 32
    r = explain([folder], size=GB, channels=used - 1)
    trees = by_name(r)["20-trees.xml"]
    assert r.verdict == "none" and trees.match_check == "channels"
    assert f"uses {used} channels, more than the communicator's {used - 1} (--channels)" in trees.reason
    assert explain([folder], size=GB, channels=used).verdict == "runs"
    default = by_name(explain([folder], size=GB, target="rccl", channels=None))["20-trees.xml"]
    assert default.status == ex.RUNS and f"{used} of 32 channels" in default.reason


def test_in_place_and_out_of_place(tmp_path):
    path = os.path.join(DATA, "mscclang_allreduce_inplace.xml")          # inplace="1" outofplace="0"
    r = explain([path], ranks=4, size=KB, inplace=True)
    assert r.verdict == "runs" and "(float, in-place)" in r.headline
    r = explain([path], ranks=4, size=KB)
    assert r.files[0].reason == 'the call is out-of-place and the file has outofplace="0"'
    # OLD reads inplace only: inplace="1" serves in-place calls, and only them
    tools = os.path.join(DATA, "msccl_tools_allgather_ring8.xml")     # inplace="1", for OLD
    r = explain([tools], ranks=8, size=KB, target="old")
    assert r.files[0].match_check == "inplace" and "OLD runs an inplace=\"1\" file for in-place calls only" in \
        r.files[0].reason


def test_old_selects_min_to_max_exclusive_and_defaults_max_to_128_mib(folder):
    ring = folder / "10-ring.xml"                                   # maxBytes="1048576", inplace="1"
    r = explain([ring], size=MB, inplace=True, target="old")
    assert r.verdict == "none"
    assert r.files[0].reason == ("1MB (1048576 bytes) is not below maxBytes=1048576: OLD selects sizes in "
                                 "[minBytes, maxBytes)")
    assert explain([ring], size=MB - 1024, inplace=True, target="old").verdict == "runs"
    assert explain([ring], size=MB, inplace=True, target="exe").verdict == "runs"
    tools = os.path.join(DATA, "msccl_tools_allgather_ring8.xml")    # no maxBytes at all
    assert explain([tools], ranks=8, size=64 * MB, inplace=True, target="old").verdict == "runs"
    r = explain([tools], ranks=8, size=128 * MB, inplace=True, target="old")
    assert "maxBytes absent: OLD's default, 128 MiB" in r.files[0].reason
    # OLD's maxBytes="0" is an empty range, not "no limit"
    zero = os.path.join(DATA, "mscclang_allgather_inplace.xml")
    r = explain([zero], ranks=4, size=KB, inplace=True, target="old")
    assert r.files[0].match_check == "bytes" and r.files[0].reason.startswith("maxBytes=0: OLD selects")


def test_old_keeps_four_algorithms_and_skips_failing_files():
    tools = os.path.join(DATA, "msccl_tools_allgather_ring8.xml")
    other = os.path.join(DATA, "mscclang_reducescatter_inplace.xml")    # coll="reducescatter": OLD refuses it
    r = explain([other] + [tools] * 5, ranks=8, size=MB, inplace=True, target="old", collective="allgather")
    assert [f.status for f in r.files] == [ex.FAILS, ex.RUNS, ex.SHADOWED, ex.SHADOWED, ex.SHADOWED,
                                           ex.NOT_LOADED]
    assert "OLD ignores it and reads the next file" in r.files[0].reason
    assert "at most 4 algorithms" in r.files[-1].reason


def test_a_broken_file_stops_the_later_ones_under_exe(folder, synth_files):
    (folder / "15-bad.xml").write_text('<?xml version="1.0"?>\n' + synth_files["trees"].text)
    (folder / "notes.txt").write_text("not an algorithm\n")
    (folder / "sub").mkdir()
    r = explain([folder], size=GB)
    files = by_name(r)
    assert [os.path.basename(f.path) for f in r.files] == ["10-ring.xml", "15-bad.xml", "20-trees.xml", "notes.txt"]
    assert files["15-bad.xml"].status == ex.FAILS and "[xml-declaration]" in files["15-bad.xml"].reason
    assert files["20-trees.xml"].status == ex.NOT_LOADED
    assert files["20-trees.xml"].blocked_by == str(folder / "15-bad.xml")
    assert "it would otherwise run this call" in files["20-trees.xml"].reason
    assert "fails to load itself: not an MSCCL file" in files["notes.txt"].reason
    assert r.verdict == "none" and "20-trees.xml would match, but is not loaded" in r.headline
    assert any("would run this call, but is never loaded" in w for w in r.warnings)
    assert r.ignored == [(str(folder / "sub"), "a folder: the runtime reads only regular files and symbolic links "
                                               "in the folder")]
    # files before the broken one are loaded
    assert explain([folder], size=KB).runs == str(folder / "10-ring.xml")


def test_a_broken_file_makes_rccl_order_dependent(folder, synth_files):
    (folder / "15-bad.xml").write_bytes(b"\xff\xfe binary")     # not even text: fails like a broken file
    r = explain([folder], size=GB, target="rccl")
    assert r.verdict == "order-dependent" and r.runs is None and r.candidates == [str(folder / "20-trees.xml")]
    assert "runs if RCCL reads it before" in r.headline and "otherwise RCCL's own algorithm" in r.headline
    files = by_name(r)
    assert files["15-bad.xml"].load_check == "read"
    assert files["20-trees.xml"].status == ex.MATCHES
    assert any("depends on the order RCCL reads the folder in" in w for w in r.warnings)
    # named explicitly, a file that cannot be read is an argument error
    with pytest.raises(CollsError, match="is not UTF-8 text"):
        explain([folder / "15-bad.xml"], size=GB)
    # no matching file at all: the order does not matter for this call
    r = explain([folder], size=GB, ranks=8, target="rccl")
    assert r.verdict == "none"


def test_two_matching_files_shadow_under_exe_and_are_ambiguous_under_rccl(folder, synth_files):
    (folder / "11-ring-copy.xml").write_text(synth_files["ring"].text)
    r = explain([folder], size=KB)
    copy = by_name(r)["11-ring-copy.xml"]
    assert r.runs == str(folder / "10-ring.xml") and copy.status == ex.SHADOWED
    assert copy.line().endswith(f"11-ring-copy.xml: also matches, shadowed by {folder / '10-ring.xml'}, "
                                "which comes first")
    r = explain([folder], size=KB, target="rccl")
    assert r.verdict == "ambiguous" and len(r.candidates) == 2
    assert any(w.startswith("ambiguous:") for w in r.warnings)
    # files named on the command line are taken in the order given
    r = explain([folder / "11-ring-copy.xml", folder / "10-ring.xml"], size=KB)
    assert r.runs == str(folder / "11-ring-copy.xml")


def test_a_file_that_loads_but_is_wrong_is_said_loudly(tmp_path):
    text = open(os.path.join(DATA, "mscclang_allreduce_inplace.xml")).read()
    path = tmp_path / "claims-both.xml"               # an in-place schedule that also claims out-of-place calls
    path.write_text(text.replace('inplace="1" outofplace="0"', 'inplace="1" outofplace="1"'))
    r = explain([path], ranks=4, size=KB)
    assert r.verdict == "runs" and "DANGER" in r.headline and "computes a wrong result" in r.headline
    assert r.files[0].danger and any("computes a wrong result" in w for w in r.warnings)
    r = explain([path], ranks=4, size=KB, inplace=True)
    assert r.files[0].danger is None and "its errors concern other calls" in r.files[0].notes[0]


@pytest.mark.parametrize("name, ranks, size, inplace, target", [
    ("mscclang_allgather_inplace.xml", 4, 4 * KB, True, "exe"),          # i_chunks="0"
    ("mscclang_allreduce_inplace.xml", 4, 4 * KB, True, "rccl"),
    ("mscclang_reducescatter_inplace.xml", 4, 4 * KB, True, "exe"),      # o_chunks="0"
    ("forestcoll_allreduce_tree3.xml", 3, 12, True, "exe"),               # comments in every tb
    ("teccl_allgather_inplace.xml", 4, 4 * KB, True, "exe"),             # <copy> elements
    ("msccl_tools_allgather_ring8.xml", 8, 4 * KB, True, "old"),
    ("taccl_reduce_scatter_ring4.xml", 4, 4 * KB, False, "old"),
    ("size_dependent_hang.xml", 2, 8 * MB, False, "exe"),                # hangs only above its maxBytes
])
def test_other_generators_files(name, ranks, size, inplace, target):
    r = explain([os.path.join(DATA, name)], ranks=ranks, size=size, inplace=inplace, target=target)
    assert r.verdict == "runs", r.format()
    assert r.files[0].danger is None


def test_text_and_json_say_the_same(capsys, folder):
    rc, out, err = cli(capsys, folder, "--ranks", "16", "--bytes", "1GB")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"1GB allreduce on 16 ranks (float, out-of-place): runs {folder / '20-trees.xml'}"
    assert lines[1] == f"  {folder / '10-ring.xml'}: skipped: 1GB (1073741824 bytes) is above maxBytes=1048576"
    rc, out, err = cli(capsys, folder, "--ranks", "16", "--bytes", "1GB", "--json")
    data = json.loads(out)
    assert rc == 0 and data == json.loads(json.dumps(explain([folder], size=GB).to_dict()))
    assert data["summary"] == lines[0] and data["verdict"] == "runs"
    assert [f["reason"] for f in data["files"]][0] == "1GB (1073741824 bytes) is above maxBytes=1048576"
    assert data["call"]["channels"] == 32 and data["call"]["channels_given"] is False
    # no match is not an error: explaining it is the job
    rc, out, err = cli(capsys, folder, "--ranks", "8", "--bytes", "1GB")
    assert rc == 0 and "no file matches" in out


def test_warnings_go_to_stderr(capsys, folder, synth_files):
    (folder / "15-bad.xml").write_text("<algo>\n")
    rc, out, err = cli(capsys, folder, "--ranks", "16", "--bytes", "1GB", "--json")
    assert rc == 0 and json.loads(out)["warnings"]
    assert err.startswith("colls: warning: ") and "fails to load" in err


@pytest.mark.parametrize("args, key", [
    (["{missing}", "--ranks", "2", "--bytes", "1KB"], "no such file or folder"),
    (["{empty}", "--ranks", "2", "--bytes", "1KB"], "holds no file the runtime would read"),
    (["{folder}", "--ranks", "16", "--bytes", "1XB"], "--bytes: '1XB' is not a size"),
    (["{folder}", "--ranks", "16", "--bytes", "0"], "--bytes: '0' is out of range"),
    (["{folder}", "--ranks", "16", "--bytes", "1001"], "--bytes: 1001 bytes is not a whole number of float"),
    (["{folder}", "--ranks", "16", "--bytes", "1KB:4KB"], "--bytes: '1KB:4KB': give one size"),
    (["{folder}", "--ranks", "16", "--bytes", "1KB", "--dtype", "float8"], "--dtype: expected one of"),
    (["{folder}", "--ranks", "0", "--bytes", "1KB"], "--ranks: must be >= 1"),
    (["{folder}", "--ranks", "16", "--bytes", "1KB", "--channels", "65"], "--channels: must be at most 64"),
    (["{folder}", "{folder}", "--ranks", "16", "--bytes", "1KB"], "give one folder"),
    (["{folder}", "--ranks", "16", "--bytes", "1KB", "--target", "old"], "reads the files MSCCL_XML_FILES names"),
    (["{mixed}", "--ranks", "4", "--bytes", "1KB"], "--collective: the files are for allgather, allreduce"),
    (["{data}/mscclang_allgather_inplace.xml", "--ranks", "3", "--bytes", "1KB"], "is not 3 equal parts"),
    (["{binary}", "--ranks", "2", "--bytes", "1KB"], "is not UTF-8 text"),
    (["--ranks", "2", "--bytes", "1KB"], "Missing argument"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, folder, args, key):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "sub").mkdir()
    (tmp_path / "binary.xml").write_bytes(b"\xff\xfe\x00")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("mscclang_allgather_inplace.xml", "mscclang_allreduce_inplace.xml"):
        shutil.copy(os.path.join(DATA, name), mixed / name)
    names = {"missing": tmp_path / "nope", "empty": tmp_path / "empty", "folder": folder, "mixed": mixed,
             "data": DATA, "binary": tmp_path / "binary.xml"}
    rc, out, err = cli(capsys, *[a.format(**names) for a in args])
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("colls: error: ") and key in lines[0], err
