"""Bad input of every kind, through the real entry point: one line naming the file or option, exit 2.

Each case is one line: the arguments, then a text the error line must contain (the file or option at
fault). ``@name`` in an argument is replaced by the path of input file ``name`` from FILES (written
for the case only), ``@@`` by the case's input folder. Every case runs with its own empty output folder
as the working directory, and must leave it exactly as it was: no output file, no temporary file.
"""

import os
import stat
import subprocess
import sys

import pytest
import shell

from colls import cli
from colls.inputs import hardware

TINY = """\
name: tiny
gpu: {model: X, sms: 4, count: 2}
link_classes:
  nv: {bandwidth: 25, latency: 0.5}
  ib: {bandwidth: 12.5, latency: 1}
direct: {class: nv, matrix: [[0, 1], [1, 0]]}
nics: [{class: ib, gpus: all}]
"""


# what `colls synth --hardware tiny.yaml --collective allgather` writes
AG2 = """\
<algo name="colls-ring-allgather-tiny" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" outofplace="1" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="-1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
    </tb>
    <tb id="2" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="1" deps="0" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="-1" recv="0" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="0" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
    </tb>
    <tb id="2" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="1" deps="0" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


def tiny(old, new):
    text = TINY.replace(old, new, 1)
    assert text != TINY
    return text


FILES = {
    "tiny.yaml": TINY,
    "bw-huge.yaml": tiny("bandwidth: 25", "bandwidth: 1e308"),
    "bw-inf.yaml": tiny("bandwidth: 25", "bandwidth: .inf"),
    "bw-nan.yaml": tiny("bandwidth: 25", "bandwidth: .nan"),
    "gpus-1e6.yaml": tiny("count: 2}", "count: 1000000}"),
    "model-escape.yaml": tiny("model: X,", 'model: "X\\e]0;t\\a",'),
    "big.yaml": TINY + "# " + "c" * 98 + "\n" + ("# " + "c" * 98 + "\n") * 11000,
    "bw-neg.yaml": tiny("bandwidth: 25", "bandwidth: -5"),
    "bw-zero.yaml": tiny("bandwidth: 25", "bandwidth: 0"),
    "bw-text.yaml": tiny("bandwidth: 25", "bandwidth: fast"),
    "lat-neg.yaml": tiny("latency: 0.5", "latency: -1"),
    "lat-huge.yaml": tiny("latency: 0.5", "latency: 1.0e+9"),
    "sms-text.yaml": tiny("sms: 4", "sms: many"),
    "sms-huge.yaml": tiny("sms: 4", "sms: 10000000"),
    "count-float.yaml": tiny("count: 2", "count: 2.5"),
    "count-neg.yaml": tiny("count: 2", "count: -2"),
    "digits.yaml": tiny("sms: 4", "sms: " + "7" * 5000),
    "unknown-key.yaml": tiny("count: 2}", "count: 2, colour: red}"),
    "unknown-top.yaml": TINY + "colour: red\n",
    "twice.yaml": TINY + "name: again\n",
    "class-missing.yaml": tiny("direct: {class: nv", "direct: {class: nvl"),
    "matrix.yaml": tiny("[[0, 1], [1, 0]]", "[[0, 1], [1]]"),
    "syntax.yaml": tiny("count: 2}", "count: 2"),
    "deep.yaml": "a: " + "[" * 20000 + "]" * 20000 + "\n",
    "scalar.yaml": "x" * (5 * 2**20) + "\n",
    "long-name.yaml": tiny("name: tiny", "name: " + "n" * (5 * 2**20)),
    "control.yaml": "\x1b[31mred\x1b[0m\n",
    "list.yaml": "- 1\n- 2\n",
    "eff-high.yaml": tiny("latency: 0.5}", "latency: 0.5, efficiency: 1.5}"),
    "eff-zero.yaml": tiny("latency: 0.5}", "latency: 0.5, efficiency: 0}"),
    "eff-text.yaml": tiny("latency: 0.5}", "latency: 0.5, efficiency: high}"),
    "empty.yaml": "",
    "binary.yaml": b"\x00\xff\xfe\x00binary",
    "x.xml": "<algo/>\n",
    "topo-dump.xml": '<?xml version="1.0"?>\n<system version="1">\n  <cpu numaid="0"/>\n</system>\n',
    "ag2.xml": AG2,
    # communication sketches for the tiny machine (2 GPUs, one node), each wrong in one key
    'sk1.json': '{"nnodes": 2, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": 1}}\n',
    'sk2.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "weird"}}\n',
    'sk3.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [[0, 5]]}}\n',
    'sk4.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": 1}, "colour": 1}\n',
    'sk5.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": 0}}\n',
    'sk6.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": "x"}}\n',
    'sk7.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": 1}, "symmetry_offsets": [[1, 3]]}\n',
    'sk8.json': '{"nnodes": 1, \n',
    'sk9.json': '\n',
    'sk10.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": 1}, "internode_sketch": {"strategy": "relay", "internode_conn": "direct-map"}}\n',
    'sk11.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [[0, 1]], "switch_hyperedge_strategy": ["uc-mid"]}}\n',
    'sk12.yaml': 'nodes: 3\n',
    'sk13.yaml': 'nodes: 1\nchunkup: 100\n',
    'sk14.yaml': 'nodes: 1\nintranode: {strategy: switch, switches: [[0, 7]]}\n',
    'sk15.yaml': '[1, 2]\n',
    'sk16.json': '{"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "hyperparameters": {"input_chunkup": 1}, "symmetry_offsets": "x"}\n',
    "taccl.json": '{"name": "X_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3}\n',  # no betas
    "binary.xml": b"\x89PNG\r\n\x1a\n\x00\xff",
}


def materialize(name, folder):
    """Create input ``name`` in ``folder`` and return its path."""
    path = folder / name
    if name == "fifo":
        os.mkfifo(path)
    elif name == "dir":
        path.mkdir()
    elif name == "huge.xml":  # sparse: one byte over the cap, instantly
        with open(path, "wb") as fh:
            fh.truncate(256 * 2**20 + 1)
    elif name == "locked.yaml":
        path.write_text(TINY)
        path.chmod(0)
    else:
        content = FILES[name]
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def expand(args, inputs):
    out = []
    for a in args:
        if a.startswith("@@"):
            a = str(inputs) + a[2:]
        elif a.startswith("@"):
            name, _, rest = a[1:].partition("/")
            a = str(materialize(name, inputs) if not (inputs / name).exists() else inputs / name)
            a += "/" + rest if rest else ""
        out.append(a)
    return out


SYNTH = ["synth", "--hardware", "@tiny.yaml", "--collective", "allgather", "-o", "x.xml"]
SIM = ["simulate", "@ag2.xml", "--hardware", "@tiny.yaml"]
MILP = SYNTH[:-2] + ["--method", "milp", "--no-simulate", "-o", "x.xml"]
BIG = str(10**30)

CASES = [
    # compile: a margin that is not a finite percentage (nan passes click's FloatRange: every comparison is false)
    *[(["compile", "--hardware", "@tiny.yaml", "--collective", "allgather", "-o", "out", "--margin", v], "--margin")
      for v in ("nan", "inf", "-1", "100", "x")],
    # synth: options
    (SYNTH + ["--chunks", "0"], "--chunks"),
    (SYNTH + ["--chunks", "-1"], "--chunks"),
    (SYNTH + ["--chunks", "1.5"], "--chunks"),
    (SYNTH + ["--root", "-1"], "--root"),
    (SYNTH[:4] + ["broadcast", "-o", "x.xml", "--root", "2"], "--root"),
    (SYNTH[:4] + ["broadcast", "-o", "x.xml"], "--root"),            # a rooted file must name its root
    (SYNTH[:4] + ["reduce", "-o", "x.xml"], "--root"),
    (SYNTH + ["--root", "1"], "--root"),                               # allgather has no root
    (SYNTH + ["--rings", "0"], "--rings"),
    (SYNTH + ["--method", "trees", "--trees-per-gpu", "0"], "--trees-per-gpu"),
    (SYNTH + ["--method", "trees", "--leaves", "paired"], "--leaves"),           # an allgather adds nothing
    (SYNTH[:4] + ["reducescatter", "-o", "x.xml", "--method", "ring", "--leaves", "packed"], "--leaves"),
    (SYNTH[:4] + ["reducescatter", "-o", "x.xml", "--method", "trees", "--leaves", "both"], "--leaves"),
    (SYNTH + ["--method", "direct", "--rings", "2"], "--rings"),
    (SYNTH + ["--max-threadblocks", "0"], "--max-threadblocks"),
    (SYNTH + ["--max-threadblocks", "many"], "--max-threadblocks"),
    (SYNTH + ["--method", "direct", "--max-threadblocks", "1"], "--max-threadblocks"),   # its peer and its copy: 2
    (SYNTH + ["--instances", "0"], "--instances"),
    (SYNTH + ["--instances", "1e3"], "--instances"),
    (SYNTH + ["--instances", BIG], "--instances"),
    (SYNTH + ["--min-bytes", "-1"], "--min-bytes"),
    (SYNTH + ["--min-bytes", BIG], "--min-bytes"),
    (SYNTH + ["--max-bytes", str(2**63)], "--max-bytes"),
    (SYNTH + ["--min-bytes", "10", "--max-bytes", "5"], "--max-bytes"),
    (SYNTH + ["--nodes", BIG], "--nodes"),
    (SYNTH + ["--nodes", "0"], "--nodes"),
    (SYNTH + ["--nodes", str(cli.MAX_NODES + 1)], "--nodes"),
    (SYNTH + ["--nodes", "two"], "--nodes"),
    # more ranks than the loader's 4096 elements per rank hold: refused before the machine is built
    (["synth", "--hardware", "dgx-a100", "--nodes", "10000", "--collective", "allreduce", "-o", "x.xml"],
     "MSCCL_MAX_NODES"),
    (["synth", "--hardware", "dgx-a100", "--nodes", "10000", "--collective", "allreduce", "-o", "x.xml",
      "--target", "old"], "steps hold"),
    (SYNTH[:-1] + [""], "-o"),
    (SYNTH[:-1] + ["/dev/null"], "-o"),
    (SYNTH[:-1] + ["/dev/full"], "-o"),
    (SYNTH[:-1] + ["x.xml/"], "-o"),
    (SYNTH[:-1] + ["."], "-o"),
    (SYNTH[:-1] + ["no/such/x.xml"], "-o"),
    (SYNTH[:-1] + ["@fifo"], "-o"),
    (SYNTH[:-1] + ["@dir"], "-o"),
    (["synth", "--hardware", "", "--collective", "allgather", "-o", "x.xml"], "--hardware"),
    (["synth", "--hardware", "no-such-machine", "--collective", "allgather", "-o", "x.xml"], "--hardware"),
    (SYNTH[:3] + ["--collective", "allsum", "-o", "x.xml"], "--collective"),
    (SYNTH[:3] + ["--collective", "y" * 5000, "-o", "x.xml"], "--collective"),
    (SYNTH + ["--method", "magic"], "--method"),
    (SYNTH + ["--method", "m" * 5000], "--method"),
    (SYNTH + ["--proto", "LLX"], "--proto"),
    (SYNTH + ["--target", "nccl"], "--target"),
    (SYNTH + ["--inplace-only", "--outofplace-only"], "--inplace-only"),
    (SYNTH + ["--outofplace-only", "--inplace-and-outofplace"], "--outofplace-only"),
    (["synth", "--hardware", "dgx-a100", "--nodes", "16", "--collective", "allgather", "--method", "ring",
      "--rings", "256", "-o", "x.xml"], "--rings"),
    (SYNTH + ["--bogus"], "--bogus"),
    (SYNTH[:-2], "-o"),
    # profiles (through synth, hardware show and bound)
    (["synth", "--hardware", "@bw-huge.yaml", "--collective", "allgather", "-o", "x.xml"],
     "link_classes.nv.bandwidth"),
    (["hardware", "show", "@bw-inf.yaml"], "link_classes.nv.bandwidth"),
    (["hardware", "show", "@bw-nan.yaml"], "link_classes.nv.bandwidth"),
    (["hardware", "show", "@gpus-1e6.yaml"], "gpu.count: must be at most 1024"),
    (["hardware", "show", "@model-escape.yaml"], "gpu.model: must be printable"),
    (["hardware", "show", "@big.yaml"], "colls reads files of at most 1 MB"),
    (["hardware", "show", "@bw-neg.yaml"], "link_classes.nv.bandwidth"),
    (["hardware", "show", "@bw-zero.yaml"], "link_classes.nv.bandwidth"),
    (["hardware", "show", "@bw-text.yaml"], "link_classes.nv.bandwidth"),
    (["hardware", "show", "@lat-neg.yaml"], "link_classes.nv.latency"),
    (["hardware", "show", "@lat-huge.yaml"], "link_classes.nv.latency"),
    (["hardware", "show", "@sms-text.yaml"], "gpu.sms"),
    (["hardware", "show", "@sms-huge.yaml"], "gpu.sms"),
    (["hardware", "show", "@count-float.yaml"], "gpu.count"),
    (["hardware", "show", "@count-neg.yaml"], "gpu.count"),
    (["hardware", "show", "@digits.yaml"], "digits.yaml"),
    (["hardware", "show", "@unknown-key.yaml"], "gpu.colour"),
    (["hardware", "show", "@unknown-top.yaml"], "colour"),
    (["hardware", "show", "@twice.yaml"], "twice.yaml"),
    (["hardware", "show", "@class-missing.yaml"], "direct.class"),
    (["hardware", "show", "@matrix.yaml"], "direct.matrix[1]"),
    (["hardware", "show", "@syntax.yaml"], "syntax.yaml"),
    (["hardware", "show", "@deep.yaml"], "deep.yaml"),
    (["hardware", "show", "@scalar.yaml"], "scalar.yaml"),
    (["hardware", "show", "@long-name.yaml"], "name"),
    (["hardware", "show", "@control.yaml"], "control.yaml"),
    (["hardware", "show", "@list.yaml"], "list.yaml"),
    (["hardware", "show", "@empty.yaml"], "empty.yaml"),
    (["hardware", "show", "@binary.yaml"], "binary.yaml"),
    (["hardware", "show", "@dir"], "dir"),
    (["hardware", "show", "@fifo"], "fifo"),
    (["hardware", "show", "@@/missing.yaml"], "missing.yaml"),
    (["hardware", "show", "@tiny.yaml/x.yaml"], "tiny.yaml/x.yaml"),
    (["hardware", "show", "/etc/passwd"], "/etc/passwd"),
    (["hardware", "show", "/dev/zero"], "/dev/zero"),
    (["hardware", "show", ""], "NAME"),
    (["hardware", "show", "dgx-z9"], "NAME"),
    (["hardware", "show", "@tiny.yaml", "--nodes", BIG], "--nodes"),
    (["hardware", "show", "@tiny.yaml", "--nodes", "-2"], "--nodes"),
    (["hardware", "show", "@tiny.yaml", "--format", "json"], "--format"),
    (["hardware", "list", "--nodes", "2"], "--nodes"),
    (["hardware", "list", "extra"], "extra"),
    (["hardware", "nope"], "nope"),
    # simulate
    (["simulate", "--hardware", "@tiny.yaml"], "FILE"),
    (SIM + ["--sizes", "1XB"], "--sizes"),
    (SIM + ["--sizes", "1KB,,2KB"], "an empty item"),
    (SIM + ["--sizes", "1KB,2KB,"], "an empty item"),
    (["bound", "--hardware", "@topo-dump.xml", "--collective", "allgather"], "colls hardware import"),
    (["hardware", "show", "@x.xml"], "an MSCCL algorithm file, not a hardware profile"),
    (SIM + ["--sizes", "4KB:1KB"], "--sizes"),
    (SIM + ["--sizes", "1KB:8TB"], "--sizes"),
    (SIM + ["--sizes", ",".join(str(4 * i) for i in range(1, 70))], "--sizes"),   # more than a sweep takes
    (SIM + ["--timeline", "t.png"], "--timeline/--size"),
    (SIM + ["--size", "1KB"], "--timeline/--size"),
    (SIM + ["--timeline", "t.png", "--size", "1KB,2KB"], "--size"),
    (SIM + ["--timeline", "t.png", "--size", "3"], "--size"),   # a size the file is not used for
    (SIM + ["--plot", "no/such/p.png"], "--plot"),
    (SIM + ["--plot", "p.png", "--timeline", "p.png", "--size", "1KB"], "--timeline"),
    (SIM + ["--baseline", "nccl-tree"], "--baseline"),
    (["simulate", "@x.xml", "--hardware", "@tiny.yaml"], "x.xml"),            # an invalid file is not timed
    (["simulate", "@ag2.xml", "--hardware", "dgx-a100"], "ag2.xml"),          # 2 ranks, 8 GPUs
    (["simulate", "--baseline", "nccl-ring", "--hardware", "@tiny.yaml"], "--collective"),
    (["simulate", "--baseline", "nccl-ring", "--collective", "broadcast", "--hardware", "@tiny.yaml"], "--root"),
    (["simulate", "--baseline", "nccl-ring", "--collective", "allgather", "--hardware", "@tiny.yaml",
      "--root", "5"], "--root"),
    (SIM[:-1] + ["@eff-high.yaml"], "efficiency"),
    (SIM[:-1] + ["@eff-zero.yaml"], "efficiency"),
    (SIM[:-1] + ["@eff-text.yaml"], "efficiency"),
    # sketches (colls synth --method milp --sketch)
    (MILP + ["--sketch", "@sk1.json"], 'nnodes'),
    (MILP + ["--sketch", "@sk2.json"], 'intranode_sketch.strategy'),
    (MILP + ["--sketch", "@sk3.json"], 'intranode_sketch.switches[0][1]'),
    (MILP + ["--sketch", "@sk4.json"], 'colour'),
    (MILP + ["--sketch", "@sk5.json"], 'hyperparameters.input_chunkup'),
    (MILP + ["--sketch", "@sk6.json"], 'hyperparameters.input_chunkup'),
    (MILP + ["--sketch", "@sk7.json"], 'symmetry_offsets[0][1]'),
    (MILP + ["--sketch", "@sk8.json"], 'sk8.json'),
    (MILP + ["--sketch", "@sk9.json"], 'sk9.json'),
    (MILP + ["--sketch", "@sk10.json"], 'internode_sketch'),
    (MILP + ["--sketch", "@sk11.json"], 'switch_hyperedge_strategy[0]'),
    (MILP + ["--sketch", "@sk12.yaml"], 'nodes'),
    (MILP + ["--sketch", "@sk13.yaml"], 'chunkup'),
    (MILP + ["--sketch", "@sk14.yaml"], 'intranode.switches[0][1]'),
    (MILP + ["--sketch", "@sk15.yaml"], 'sk15.yaml'),
    (MILP + ["--sketch", "@sk16.json"], 'symmetry_offsets'),
    # TACCL profiles
    (SYNTH + ["--taccl-shape", "NDv2"], "--taccl-shape"),             # a YAML profile is not TACCL's
    (SYNTH + ["--taccl-chunk", "1MB"], "--taccl-chunk"),
    (["synth", "--hardware", "@taccl.json", "--collective", "allgather", "-o", "x.xml"], "taccl.json"),
    (["synth", "--hardware", "@taccl.json", "--taccl-shape", "Torus", "--collective", "allgather", "-o", "x.xml"],
     "--taccl-shape"),
    # verify
    (["verify", "/dev/zero"], "/dev/zero"),
    (["verify", "@fifo"], "fifo"),
    (["verify", "@dir"], "dir"),
    (["verify", "@@/missing.xml"], "missing.xml"),
    (["verify", "@huge.xml"], "256 MB"),
    (["verify", "@binary.xml"], "binary.xml"),
    (["verify", "@x.xml/y.xml"], "x.xml/y.xml"),
    (["verify", ""], "FILE"),
    (["verify", "@x.xml", "--sms", "0"], "--sms"),
    (["verify", "@x.xml", "--sms", BIG], "--sms"),
    (["verify", "@x.xml", "--buffsize", "0"], "--buffsize"),
    (["verify", "@x.xml", "--buffsize", "4KB"], "--buffsize"),
    (["verify", "@x.xml", "--nodes", "0"], "--nodes"),
    (["verify", "@x.xml", "--hardware", ""], "--hardware"),
    (["verify", "@x.xml", "--hardware", "@deep.yaml"], "deep.yaml"),
    (["verify", "@x.xml", "--hardware", "@fifo"], "fifo"),
    (["verify", "@x.xml", "--target", "nope"], "--target"),
    # bound
    (["bound", "--hardware", "@tiny.yaml", "--collective", "allgather", "--size", "0"], "--size"),
    (["bound", "--hardware", "@tiny.yaml", "--collective", "allgather", "--size", str(2**63)], "--size"),
    (["bound", "--hardware", "@tiny.yaml", "--collective", "allgather", "--size", "1.5GB"], "--size"),
    (["bound", "--hardware", "@tiny.yaml", "--collective", "broadcast", "--root", "5"], "--root"),
    (["bound", "--hardware", "@tiny.yaml", "--collective", "allgather", "--nodes", BIG], "--nodes"),
    (["bound", "--hardware", "@lat-huge.yaml", "--collective", "allgather"], "link_classes.nv.latency"),
    (["bound", "--hardware", "@tiny.yaml", "--collective", "nope"], "--collective"),
    (["bound", "--hardware", "@tiny.yaml"], "--collective"),
    (["--bogus", "hardware", "list"], "--bogus"),
]


def run(args, cwd):
    """The real entry point as a shell runs it (tests/shell.py; a hang fails the case, not the suite)."""
    return shell.run(args, cwd, timeout=60)


def assert_one_line_error(tmp_path, args, names):
    """Exit 2, one short ``colls: error:`` line naming ``names``, no traceback, nothing written."""
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    args = expand(args, inputs)
    before = sorted(os.listdir(outputs)), sorted(os.listdir(inputs))
    rc, out, err = run(args, outputs)
    assert rc == 2, (rc, out, err[-2000:])
    lines = err.splitlines()
    assert len(lines) == 1, err[-2000:]
    line = lines[0]
    assert line.startswith("colls: error: "), line
    assert names in line, line
    assert len(line) < 300, line
    assert line.isprintable(), line
    assert "Traceback" not in err and out == ""
    assert (sorted(os.listdir(outputs)), sorted(os.listdir(inputs))) == before


@pytest.mark.parametrize("args, names", CASES, ids=[f"{i}-{n[:30]}" for i, (_, n) in enumerate(CASES)])
def test_bad_input(tmp_path, args, names):
    assert_one_line_error(tmp_path, args, names)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_profile(tmp_path):
    assert_one_line_error(tmp_path, ["hardware", "show", "@locked.yaml"], "locked.yaml")


def test_error_quotes_only_an_excerpt(tmp_path):
    """A profile that is some other text file: its content is not shown beyond a short excerpt."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    secret = "user:" + "s3cr3t" * 20 + "\n"
    (inputs / "passwd").write_text(secret * 50)
    rc, _, err = run(["hardware", "show", str(inputs / "passwd")], tmp_path)
    assert rc == 2
    assert err.count("s3cr3t") <= 7 and "..." in err


def test_cases_cover_every_command():
    commands = {tuple(a for a in args[:2] if not a.startswith("-")) for args, _ in CASES}
    firsts = {c[0] for c in commands if c}
    assert {"synth", "verify", "bound", "hardware"} <= firsts
    assert {("hardware", "show"), ("hardware", "list")} <= commands
    assert len(CASES) >= 45


RING = ["synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", "ring", "-o", "x.xml"]
DIRECT = ["synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allgather", "--method", "direct",
          "-o", "x.xml"]


@pytest.mark.parametrize("args, key, present, absent", [
    (RING + ["--chunks", "1024"], "--chunks", "1 node of", "fewer --nodes"),     # one node: none fewer to try
    (RING + ["--chunks", "1024", "--nodes", "2"], "--chunks", "fewer --nodes", None),
    (RING + ["--nodes", "512"], "--nodes", "fewer --nodes", "fewer --chunks"),
    (DIRECT + ["--instances", "64"], "--instances", "fewer --instances", None),  # refused once laid out
], ids=["chunks-one-node", "chunks-two-nodes", "nodes", "instances"])
def test_a_limit_names_the_option_that_binds(tmp_path, args, key, present, absent):
    assert_one_line_error(tmp_path, args, key)
    _, _, err = run(args, tmp_path)
    assert err.startswith(f"colls: error: {key}: ") and present in err, err
    assert absent is None or absent not in err, err


@pytest.mark.parametrize("command, root", [("verify", "algo"), ("hardware import", "system")])
def test_xml_nested_too_deep_is_said_without_the_parsers_advice(tmp_path, command, root):
    """libxml2 refuses elements nested thousands deep and tells the programmer to use XML_PARSE_HUGE: the user
    reads the limit instead, with the file named (exit 2, as any text that is not a file of the kind)."""
    path = tmp_path / "deep.xml"
    path.write_text(f"<{root}>" + "<a>" * 3000 + "</a>" * 3000 + f"</{root}>\n")
    rc, out, err = run([*command.split(), str(path), *(["-o", "x.yaml"] if root == "system" else [])], tmp_path)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, (rc, out, err)
    assert str(path) in err and "nested more than" in err and "XML_PARSE" not in err, err
    assert not (tmp_path / "x.yaml").exists()


def test_node_limit_is_the_same_in_the_cli_and_the_loader():
    assert cli.MAX_NODES == hardware.MAX_NODES


def test_output_symlink_to_a_regular_file_writes_the_file(tmp_path):
    real = tmp_path / "real.xml"
    real.write_text("old\n")
    (tmp_path / "link.xml").symlink_to(real)
    rc, out, err = run(["synth", "--hardware", "ndv2", "--collective", "allgather", "-o", "link.xml"],
                       tmp_path)
    assert rc == 0, err
    assert (tmp_path / "link.xml").is_symlink()
    assert real.read_text().startswith("<algo")
    assert sorted(os.listdir(tmp_path)) == ["link.xml", "real.xml"]
    assert stat.S_ISREG(os.stat(real).st_mode)


def test_a_write_protected_output_is_refused_not_replaced(tmp_path, monkeypatch):
    """The atomic rename would replace a file its owner made read-only (the folder being writable) and leave it
    0644: refused instead, as cp or a shell redirect would. Whether the user may write it is the system's
    answer (os.access; root may write anything, so the answer is given here)."""
    from colls import files
    from colls.errors import CollsError
    target = tmp_path / "ro.xml"
    target.write_text("precious\n")
    real_access = os.access
    monkeypatch.setattr(files.os, "access", lambda p, mode: False if os.fspath(p) == str(target) and mode == os.W_OK
                        else real_access(p, mode))
    with pytest.raises(CollsError, match="write-protected"):
        files.check_output(str(target))
    assert files.check_output(str(tmp_path / "new.xml")) == str(tmp_path / "new.xml")
    assert target.read_text() == "precious\n"


INTERNAL = ("import colls.inputs.hardware as hw\n"
            "def broken():\n"
            "    raise KeyError('bug in the code')\n"
            "hw.list_profiles = broken\n"
            "from colls.cli import main; main()\n")


@pytest.mark.parametrize("debug", [False, True])
def test_internal_error_is_one_line_unless_debug(tmp_path, debug):
    """A bug (here a KeyError put into list_profiles) is one line and exit 1; --debug adds the traceback."""
    args = ["--debug"] if debug else []
    proc = subprocess.run([sys.executable, "-c", INTERNAL, *args, "hardware", "list"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("colls: internal error: KeyError: 'bug in the code'; please report it")
    assert ("Traceback" in proc.stderr) == debug
    if not debug:
        assert len(proc.stderr.splitlines()) == 1
