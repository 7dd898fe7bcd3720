"""The command line as a user meets it: one-line errors, exit code 2, nothing written on failure."""

import json
import os
from pathlib import Path

import pytest

import shell
from click.testing import CliRunner

from colls import msccl
from colls.cli import cli


def run(*args, cwd=None):
    """The real entry point (exit codes and stderr exactly as a shell sees them: tests/shell.py)."""
    return shell.run(args, cwd, timeout=600)


def assert_bad_input(rc, out, err):
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("colls: error: ")
    assert "Traceback" not in err


def test_synth_writes_a_verified_file_and_verify_accepts_it(tmp_path):
    out = tmp_path / "ag.xml"
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather",
                          "--method", "ring", "-o", str(out))
    assert rc == 0, err
    assert "16 gpus" in stdout and "verified for exe" in stdout
    rc, stdout, err = run("verify", str(out), "--hardware", "dgx-a100", "--nodes", "2")
    assert rc == 0, stdout + err
    rc, stdout, err = run("verify", str(out), "--target", "rccl", "--json")
    assert rc == 0 and json.loads(stdout)["ok"] is True


def test_synth_json_reports_the_facts(tmp_path):
    out = tmp_path / "ar.xml"
    rc, stdout, err = run("synth", "--hardware", "ndv2", "--collective", "allreduce", "-o", str(out),
                          "--json")
    assert rc == 0, err
    facts = json.loads(stdout)
    assert facts["gpus"] == 8 and facts["inplace"] and facts["outofplace"]
    assert facts["steps"] <= 64


@pytest.mark.parametrize("args", [
    ["--hardware", "no-such-machine"],
    ["--hardware", "dgx-a100", "--nodes", "0"],
    ["--hardware", "dgx-a100", "--collective", "allsum"],
    ["--hardware", "dgx-a100", "--method", "magic"],
    ["--hardware", "dgx-a100", "--instances", "0"],
    ["--hardware", "dgx-a100", "--min-bytes", "10", "--max-bytes", "5"],
    ["--hardware", "dgx-a100", "--inplace-only", "--outofplace-only"],
    ["--hardware", "dgx-a100", "--outofplace-only", "--inplace-and-outofplace"],
])
def test_synth_bad_input(tmp_path, args):
    out = tmp_path / "x.xml"
    base = {"--collective": "allgather"}
    full = ["synth", *args]
    for k, v in base.items():
        if k not in args:
            full += [k, v]
    rc, stdout, err = run(*full, "-o", str(out))
    assert_bad_input(rc, stdout, err)
    assert not out.exists()
    assert os.listdir(tmp_path) == []


def test_malformed_profile(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngpu: {model: X, sms: 80, count: 2\n")
    out = tmp_path / "x.xml"
    rc, stdout, err = run("synth", "--hardware", str(bad), "--collective", "allgather", "-o", str(out))
    assert_bad_input(rc, stdout, err)
    assert str(bad) in err
    assert not out.exists()


def test_unknown_key_in_profile_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndescription: y\ngpu: {model: X, sms: 80, count: 2, colour: red}\n"
                   "link_classes: {nv: {bandwidth: 25, latency: 0.5}}\n"
                   "direct: {class: nv, matrix: [[0, 1], [1, 0]]}\n")
    rc, stdout, err = run("hardware", "show", str(bad))
    assert_bad_input(rc, stdout, err)
    assert "colour" in err


def test_unwritable_output(tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "x.xml"
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "-o", str(out))
    assert_bad_input(rc, stdout, err)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather",
                          "-o", str(blocker / "x.xml"))
    assert_bad_input(rc, stdout, err)
    assert blocker.read_text() == "not a folder"


def test_output_path_that_is_a_directory(tmp_path):
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather",
                          "-o", str(tmp_path))
    assert_bad_input(rc, stdout, err)


@pytest.mark.parametrize("content", ["this is not xml", "<html><body/></html>", ""])
def test_verify_rejects_non_msccl_files(tmp_path, content):
    f = tmp_path / "f.xml"
    f.write_text(content)
    rc, stdout, err = run("verify", str(f))
    assert_bad_input(rc, stdout, err)


def test_verify_missing_file(tmp_path):
    rc, stdout, err = run("verify", str(tmp_path / "missing.xml"))
    assert_bad_input(rc, stdout, err)


def test_verify_invalid_file_exits_1(tmp_path):
    out = tmp_path / "ag.xml"
    rc, _, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "-o", str(out))
    assert rc == 0, err
    out.write_text(out.read_text().replace('minBytes="0" ', ""))
    rc, stdout, err = run("verify", str(out))
    assert rc == 1
    assert "minBytes" in stdout


def test_verify_every_invalid_file_exits_1_even_a_value_that_is_not_a_number(tmp_path):
    """ngpus="four" is an invalid file like any other (exit 1, the finding and what the loader reads), not
    unreadable input; a minBytes beyond any call loads, is never used, and says so (a warning, exit 0), as does
    a file checked against a machine of another GPU count."""
    out = tmp_path / "ag.xml"
    rc, _, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "-o", str(out))
    assert rc == 0, err
    text = out.read_text()
    four = tmp_path / "four.xml"
    four.write_text(text.replace('ngpus="8"', 'ngpus="four"', 1))
    rc, stdout, err = run("verify", str(four))
    assert rc == 1 and err == "", err
    assert "ngpus='four' is not an integer; the loader reads 0" in stdout and "INVALID" in stdout
    big = tmp_path / "big.xml"
    big.write_text(text.replace('minBytes="0"', 'minBytes="100000000000000000000000"', 1))
    rc, stdout, err = run("verify", str(big))
    assert rc == 0, stdout + err
    assert "warning [bytes-unreachable]: minBytes=9223372036854775807" in stdout and "never used" in stdout
    # a file of 8 GPUs checked against a machine of 16: valid, and never used there (a warning, exit 0)
    rc, stdout, err = run("verify", str(out), "--hardware", "dgx-a100", "--nodes", "2")
    assert rc == 0 and "VALID" in stdout, stdout + err
    assert "warning [machine-ranks]: ngpus=8 but the machine has 16 GPUs" in stdout
    rc, stdout, err = run("verify", str(out), "--hardware", "dgx-a100")
    assert rc == 0 and "machine-ranks" not in stdout, stdout + err


def test_hardware_list_and_show():
    runner = CliRunner()
    res = runner.invoke(cli, ["hardware", "list"])
    assert res.exit_code == 0
    for name in ("dgx2", "ndv2", "dgx-a100", "mi250", "dgx-h100"):
        assert name in res.output
    res = runner.invoke(cli, ["hardware", "show", "dgx-a100", "--nodes", "2", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert json.dumps(data)


def test_a_rooted_file_names_its_root_and_says_where_it_may_be_installed(tmp_path):
    out = tmp_path / "bc.xml"
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "broadcast", "--root", "3",
                          "-o", str(out))
    assert rc == 0, err
    assert "for root 3 only" in stdout and "every broadcast call uses root 3" in stdout
    assert 'name="colls-ring-broadcast-root3-' in out.read_text().splitlines()[0]
    rc, stdout, err = run("verify", str(out))
    assert rc == 0 and "[root-fixed]" in stdout and "root 3" in stdout, stdout + err


def test_verify_buffsize_moves_the_size_at_which_a_hang_starts(tmp_path):
    data = Path(__file__).parent / "data" / "size_dependent_hang.xml"
    path = tmp_path / "h.xml"
    path.write_text(data.read_text().replace('maxBytes="8388608"', 'maxBytes="0"'))
    rc, stdout, _ = run("verify", str(path))
    assert rc == 1 and "hangs for calls of 8388609 bytes or more" in stdout
    rc, stdout, _ = run("verify", str(path), "--buffsize", str(1 << 24))
    assert rc == 1 and "hangs for calls of 33554433 bytes or more" in stdout and "NCCL_BUFFSIZE=16777216" in stdout


def test_synth_chooses_the_depth_unless_chunks_is_given(tmp_path):
    """Without --chunks a trees file carries as many chunks a tree as simulate fastest, and the summary says so;
    --chunks given is the chunk factor asked for, nothing searched."""
    deep = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "reducescatter", "--method",
               "trees", "-o", str(tmp_path / "deep.xml"), "--json")
    asked = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "reducescatter", "--method",
                "trees", "--chunks", "1", "-o", str(tmp_path / "one.xml"), "--json")
    assert deep[0] == 0 and asked[0] == 0, (deep[2], asked[2])
    deep, asked = json.loads(deep[1]), json.loads(asked[1])
    assert deep["method_info"]["depth"] > 1 and "chunks a tree" in deep["depth_note"]
    assert asked["method_info"]["depth"] == 1 and "depth_tuned" not in asked
    assert deep["chunks_per_loop"] == asked["chunks_per_loop"] * deep["method_info"]["depth"]


def test_leaves_pins_the_trees_pairing(tmp_path):
    """--leaves packed / paired: the trees as packed or with their leaves paired, whatever the tuner would take."""
    facts = {}
    for leaves in ("packed", "paired"):
        rc, out, err = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "reducescatter",
                           "--method", "trees", "--leaves", leaves, "--instances", "1", "--chunks", "1",
                           "--no-simulate", "--json", "-o", str(tmp_path / f"{leaves}.xml"))
        assert rc == 0, err
        facts[leaves] = json.loads(out)
    assert facts["packed"]["method_info"]["leaves_paired"] == 0 < facts["paired"]["method_info"]["leaves_paired"]
    assert (tmp_path / "packed.xml").read_text() != (tmp_path / "paired.xml").read_text()


@pytest.mark.parametrize("kind, calls, words", [("alltoall", ["--inplace-and-outofplace"], "out-of-place calls only"),
                                               ("allreduce", [], "--method hier")])
def test_a_request_beyond_the_threadblocks_a_step_can_wait_on_is_one_line_and_no_file(tmp_path, kind, calls, words):
    """32 x MI300X (256 GPUs): a direct alltoall in place too and a direct allreduce need more threadblocks waited
    on than a step can name (int8_t dependentBid): exit 2, one line naming the option and what to try, no file."""
    out = tmp_path / "x.xml"
    rc, stdout, err = run("synth", "--hardware", "mi300x", "--nodes", "32", "--collective", kind, "--method",
                          "direct", *calls, "-o", str(out))
    assert_bad_input(rc, stdout, err)
    assert "--method:" in err and "dependentBid" in err and words in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("hardware, nodes, method, words", [
    ("mi250", "8", "ring", "253 of them relays"), ("mi250", "64", "hier", "a rank talks to 5 peers")])
def test_a_plan_beyond_its_threadblocks_is_refused_in_one_line_before_synthesis(tmp_path, hardware, nodes, method,
                                                                                words):
    """An MSCCL++ plan of 128 GPUs holds 24 threadblocks a GPU, of 1,024 GPUs 3 (colls proves 3,072 in all): a ring
    allreduce's relays and a hierarchical file's peers are counted before any schedule is made; exit 2, one line
    naming the bound and what to try, no file."""
    out = tmp_path / "x.json"
    rc, stdout, err = run("synth", "--hardware", hardware, "--nodes", nodes, "--collective", "reducescatter"
                          if method == "hier" else "allreduce", "--method", method, "--target", "mscclpp",
                          "--no-simulate", "-o", str(out))
    assert_bad_input(rc, stdout, err)
    assert words in err and "a plan of" in err and "try " in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_alltoall_claims_out_of_place_calls_unless_both_are_asked_for(tmp_path):
    """In place, an alltoall stages blocks in scratch, which a file of both calls pays in every call (1 x dgx-a100
    direct: 0.98x NCCL's grouped sends at 1 GB, 1.00x out-of-place only): synth's alltoall claims out-of-place calls
    by default and says where in-place ones go; --inplace-and-outofplace asks for both. Other collectives keep both."""
    files = {}
    for name, kind, calls in (("a2a", "alltoall", []), ("both", "alltoall", ["--inplace-and-outofplace"]),
                              ("ag", "allgather", [])):
        path = tmp_path / f"{name}.xml"
        rc, out, err = run("synth", "--hardware", "dgx-a100", "--collective", kind, "--method", "direct", *calls,
                           "--no-simulate", "-o", str(path))
        assert rc == 0, err
        files[name] = (msccl.read(path.read_text()), out)
    a2a, words = files["a2a"]
    assert (a2a.inplace, a2a.outofplace) == (0, 1) and "in-place calls run the runtime's own alltoall" in words
    for name in ("both", "ag"):
        program, words = files[name]
        assert (program.inplace, program.outofplace) == (1, 1) and "in-place and out-of-place" in words
