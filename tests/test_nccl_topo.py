"""``colls hardware import``: NCCL/RCCL topology dumps -> node profiles.

The dumps in tests/data/nccl-topo/ model the machines of the shipped profiles; importing one must give the
same machine, checked by its exact bounds (every collective, 1 and 2 nodes). Bad dumps of every kind give
exit code 2 and one line naming the file and element, and write nothing.
"""

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from colls import bound, cli
from colls.inputs import hardware, nccl_topo
from colls.collectives import KINDS
from colls.errors import CollsError

DATA = Path(__file__).parent / "data" / "nccl-topo"
SHIPPED = {"dgx-a100": (1, 2), "dgx-h100": (1, 2), "ndv2": (1, 2), "mi250": (1,)}


def text_of(name: str) -> str:
    return (DATA / f"{name}.xml").read_text()


def run(capsys, *args):
    """The real entry point, in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as e:
        cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def import_text(tmp_path, text: str, name: str = "topo", **options) -> nccl_topo.Imported:
    path = tmp_path / f"{name}.xml"
    path.write_text(text)
    return nccl_topo.import_dump(str(path), **options)


def load(tmp_path, result: nccl_topo.Imported, nodes: int = 1):
    path = tmp_path / "imported.yaml"
    path.write_text(result.text)
    return hardware.load_topology(str(path), nodes)


def same_bound(a, b) -> bool:
    """Equal optima, cuts and latency floors (the cut's words name link classes, which differ)."""
    fields = ("collective", "ngpus", "algbw", "x", "cut", "complement", "latency_us", "exact", "achievable", "root")
    return (all(getattr(a, f) == getattr(b, f) for f in fields) and len(a.parts) == len(b.parts)
            and all(same_bound(p, q) for p, q in zip(a.parts, b.parts)))


def edit(text: str, old: str, new: str, count: int = 1) -> str:
    out = text.replace(old, new, count)
    assert out != text, old
    return out


# --- the shipped machines, from their dumps -------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_import_gives_the_shipped_machine(tmp_path, name):
    result = nccl_topo.import_dump(str(DATA / f"{name}.xml"))
    assert result.notes == []
    for nodes in SHIPPED[name]:
        mine, shipped = load(tmp_path, result, nodes), hardware.load_topology(name, nodes)
        assert mine.ngpus == shipped.ngpus
        for kind in KINDS:
            assert same_bound(bound.bound(mine, kind), bound.bound(shipped, kind)), (name, nodes, kind)


def test_profiles_say_what_they_are_made_of():
    a100 = nccl_topo.import_dump(str(DATA / "dgx-a100.xml")).profile
    assert a100["gpu"] == {"model": "A100-SXM4", "sms": 108, "count": 8}
    assert a100["switches"] == [{"name": "nvswitch", "class": "nvlink3", "links": 12, "gpus": "all"}]
    assert a100["link_classes"]["nvlink3"]["efficiency"] == nccl_topo.Fraction(4, 5)
    assert [n["gpus"] for n in a100["nics"]] == [[g] for g in range(8)]   # two per switch, one each
    assert a100["network"] == {"layout": "rails"}
    h100 = nccl_topo.import_dump(str(DATA / "dgx-h100.xml")).profile
    assert h100["switches"][0]["links"] == 18 and h100["link_classes"]["ib-400g"]["bandwidth"] == 50
    ndv2 = nccl_topo.import_dump(str(DATA / "ndv2.xml")).profile
    assert ndv2["direct"]["matrix"] == yaml.safe_load((Path(__file__).parent.parent / "hardware" /
                                                       "ndv2.yaml").read_text())["direct"]["matrix"]
    # one NIC on CPU 0: GPUs 0-3 by their CPU, GPUs 4-7 (no NIC on CPU 1) across the CPUs
    assert ndv2["nics"] == [{"class": "ib-100g", "gpus": list(range(8))}] and ndv2["network"]["layout"] == "single"
    mi250 = nccl_topo.import_dump(str(DATA / "mi250.xml"))
    # each GCD hangs off a PCIe Gen4 x8 bridge: 16 GT/s x 8 lanes x 128/130 / 8 = 15.75 GB/s < the 25 GB/s NIC
    assert mi250.profile["link_classes"]["pcie-15p753"]["bandwidth"] == nccl_topo.Fraction("15.753")
    assert all(n["pcie"] == "pcie-15p753" and len(n["gpus"]) == 2 for n in mi250.profile["nics"])
    assert mi250.profile["gpu"] == {"model": "MI250-GCD", "sms": 104, "count": 16}


def test_every_figure_has_a_comment():
    text = nccl_topo.import_dump(str(DATA / "dgx-h100.xml")).text
    for line in text.splitlines():
        if re.match(r"\s+(model|sms|count|bandwidth|latency|efficiency):", line) or line.startswith("network"):
            assert "#" in line, line
    assert "SM90_NVLINK_BW 20.6" in text and "<net speed=400000>" in text and "5 + 4 + 4 + 5 = 18" in text
    assert "TACCL" in text and "inferred" in text


def test_cli_writes_a_profile_that_bound_reads(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "hardware", "import", DATA / "dgx-a100.xml", "-o", "p.yaml")
    assert (rc, err) == (0, "") and out.startswith("wrote p.yaml: 8 x A100-SXM4 (108 SMs)")
    rc, printed, _ = run(capsys, "hardware", "import", DATA / "dgx-a100.xml")
    assert rc == 0 and printed == Path("p.yaml").read_text()
    for kind in ("allgather", "allreduce"):
        rc, mine, _ = run(capsys, "bound", "--hardware", "p.yaml", "--nodes", 2, "--collective", kind, "--json")
        rc2, shipped, _ = run(capsys, "bound", "--hardware", "dgx-a100", "--nodes", 2, "--collective", kind, "--json")
        assert rc == rc2 == 0
        assert json.loads(mine)["algbw_exact"] == json.loads(shipped)["algbw_exact"]
        assert json.loads(mine)["latency_bound_us"] == json.loads(shipped)["latency_bound_us"]


# --- what NCCL writes that the shipped dumps do not show ------------------------------------------------
def test_unknown_elements_and_attributes_are_noted_once_per_kind(tmp_path, capsys, monkeypatch):
    text = text_of("dgx-h100")
    text = text.replace('<gpu dev="0"', '<gpu colour="red" dev="0"').replace('<gpu dev="1"', '<gpu colour="x" dev="1"')
    text = edit(text, "</gpu>", '<foo/><foo><nvlink/></foo></gpu>')
    text = edit(text, "</cpu>", "<foo/></cpu>")
    (tmp_path / "h.xml").write_text(text)
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "hardware", "import", "h.xml", "-o", "h.yaml")
    assert rc == 0 and out.startswith("wrote h.yaml")
    assert sorted(err.splitlines()) == ["colls: note: ignored <foo> elements (3)",
                                        "colls: note: ignored attribute colour of <gpu> (2)"]
    assert yaml.safe_load(Path("h.yaml").read_text())["gpu"]["count"] == 8


def test_nvswitches_not_in_the_dump_and_gpus_outside_the_job(tmp_path):
    # NCCL's own dumps have no <pci> for NVSwitches: tclass 0x068000 alone says what the target is
    text = re.sub(r'\s*<pci busid="0000:c[4-9]:00.0" class="0x068000"[^>]*/>', "", text_of("dgx-a100"))
    assert 'device="0x1af1"' not in text
    assert import_text(tmp_path, text).profile["switches"] == \
        nccl_topo.import_dump(str(DATA / "dgx-a100.xml")).profile["switches"]
    # a job on GPUs 0-3 of an NDv2: links to GPUs 4-7 (not in the dump) are left out, with a note
    ndv2 = text_of("ndv2")
    cut = ndv2.index('  <cpu numaid="1"')
    result = import_text(tmp_path, ndv2[:cut] + "</system>\n")
    assert result.profile["gpu"]["count"] == 4
    assert result.profile["direct"]["matrix"] == [[0, 2, 1, 1], [2, 0, 1, 2], [1, 1, 0, 2], [1, 2, 2, 0]]
    assert result.notes == ["ignored <nvlink> to GPUs not in the dump (4): NCCL lists only the GPUs of the "
                            "job that wrote it"]


def test_multiport_nics_are_one_nic_per_port(tmp_path):
    # DGX A100 with one two-port card per PCIe switch instead of two cards: the same eight NICs
    text = text_of("dgx-a100")
    for i in (1, 3, 5, 7):
        port = re.search(rf'<net name="mlx5_{i}"[^>]*/>', text).group(0)
        text = re.sub(rf'\s*<pci busid="[^"]*" class="0x020700"[^>]*>\s*<nic>\s*{re.escape(port)}\s*</nic>\s*</pci>',
                      "", text)
        text = re.sub(rf'(<net name="mlx5_{i - 1}"[^>]*/>)', lambda m: m.group(1) + port, text)
    assert text.count("<nic>") == 4 and text.count("<net ") == 8
    profile = import_text(tmp_path, text).profile
    assert profile["nics"] == nccl_topo.import_dump(str(DATA / "dgx-a100.xml")).profile["nics"]


def test_compute_capability_alone_and_overrides(tmp_path):
    text = re.sub(r' device="0x20b0"', "", text_of("dgx-a100"))
    result = import_text(tmp_path, text)
    assert result.profile["gpu"]["model"] == "A100-SXM4" and result.profile["gpu"]["sms"] == 108
    assert result.notes[0].startswith("GPU model assumed from compute capability 80")
    # a part colls does not know: the user says what it is
    text = text_of("dgx-h100").replace('device="0x2330"', 'device="0x2339"')
    result = import_text(tmp_path, text, gpu_model="H100-NVL", sms=132, link_bandwidth="26.5")
    assert result.profile["gpu"] == {"model": "H100-NVL", "sms": 132, "count": 8}
    assert result.profile["link_classes"]["nvlink4"] == {"bandwidth": nccl_topo.Fraction("26.5"), "latency": 0.15}
    assert "given with --link-bandwidth" in result.text
    topo = load(tmp_path, result, 2)
    assert topo.ngpus == 16
    # an NVLink generation colls has no figure for (compute capability 86) needs --link-bandwidth too
    with pytest.raises(CollsError, match=r"<gpu busid=0000:00:00.0>: no per-link bandwidth .* give --link-bandwidth"):
        import_text(tmp_path, SM86, gpu_model="A40", sms=84)
    p = import_text(tmp_path, SM86, gpu_model="A40", sms=84, link_bandwidth="14.0625").profile
    assert p["direct"] == {"class": "nvlink", "matrix": [[0, 4], [4, 0]]}
    assert p["link_classes"]["nvlink"]["bandwidth"] == nccl_topo.Fraction("14.0625")


def test_power_cpu_nvlinks_and_a_single_gpu(tmp_path):
    power = ('<system version="1"><cpu numaid="0" arch="ppc64">'
             '<pci busid="0004:04:00.0" class="0x030200" vendor="0x10de" device="0x1db1" link_speed="8.0 GT/s PCIe" '
             'link_width="16"><gpu dev="0" sm="70" rank="0"><nvlink target="0004:04:00.0x" count="1"/></gpu></pci>'
             '</cpu></system>')
    power = power.replace('<nvlink target="0004:04:00.0x" count="1"/>',
                          '<nvlink target="0007:00:00.0" count="2" tclass="0x068001"/>'
                          '<nvlink target="0035:03:00.0" count="3" tclass="0x030200"/>')
    power = power.replace("</pci></cpu>", '</pci><pci busid="0035:03:00.0" class="0x030200" vendor="0x10de" '
                          'device="0x1db1"><gpu dev="1" sm="70" rank="1"><nvlink target="0007:00:00.1" count="2" '
                          'tclass="0x068001"/><nvlink target="0004:04:00.0" count="3" tclass="0x030200"/></gpu></pci>'
                          '</cpu>')
    p = import_text(tmp_path, power).profile
    assert p["switches"] == [{"name": "cpu0", "class": "nvlink2", "links": 2, "gpus": "all"}]
    assert p["direct"] == {"class": "nvlink2-p2p", "matrix": [[0, 3], [3, 0]]}
    assert p["link_classes"]["nvlink2"]["latency"] == 0.15 and p["link_classes"]["nvlink2-p2p"]["latency"] == 0.3
    one = ('<system version="1"><cpu numaid="0"><pci busid="0000:07:00.0" vendor="0x10de" device="0x2330">'
           '<gpu dev="0" sm="90" rank="0"/></pci></cpu></system>')
    result = import_text(tmp_path, one)
    assert result.profile["gpu"]["count"] == 1 and "nics" not in result.profile
    assert result.notes == ["the dump has no <net>: the profile describes one node (--nodes 1 only)"]


def test_output_is_replaced_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("p.yaml").write_text("old\n")
    (tmp_path / "bad.xml").write_text(text_of("ndv2").replace('speed="100000"', 'speed="0"'))
    rc, out, err = run(capsys, "hardware", "import", "bad.xml", "-o", "p.yaml")
    assert rc == 2 and Path("p.yaml").read_text() == "old\n" and sorted(os.listdir()) == ["bad.xml", "p.yaml"]
    rc, out, err = run(capsys, "hardware", "import", DATA / "ndv2.xml", "-o", "p.yaml")
    assert rc == 0 and Path("p.yaml").read_text().startswith("# Node profile imported")
    assert sorted(os.listdir()) == ["bad.xml", "p.yaml"]


# --- bad dumps: exit 2, one line naming the file and the element, nothing written ---------------------
def _bad(name, old, new, count=1):
    return lambda: edit(text_of(name), old, new, count)


A100, NDV2 = "dgx-a100", "ndv2"
SM86 = ('<system><cpu numaid="0">' + "".join(f'<pci busid="0000:0{i}:00.0" vendor="0x10de"><gpu dev="{i}" sm="86">'
                                             f'<nvlink target="0000:0{1 - i}:00.0" count="4" tclass="0x030000"/></gpu>'
                                             f'</pci>' for i in range(2)) + "</cpu></system>")
BIG = ("<system><cpu>" + "".join(f'<pci busid="{i >> 16:04x}:{(i >> 8) & 255:02x}:{(i >> 3) & 31:02x}.{i & 7}">'
                                 f'<gpu dev="{i}" sm="80"/></pci>' for i in range(100_000)) + "</cpu></system>")
BAD = {
    # file and syntax
    "empty": (lambda: "", "is empty"),
    "not-xml": (lambda: text_of(A100)[:3000], "not well-formed XML"),
    "binary": (lambda: bytes(range(256)), "is not UTF-8"),
    "nul-byte": (lambda: "<system>\0</system>", "not well-formed XML"),
    "doctype-bomb": (lambda: '<!DOCTYPE system [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
                             '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><system version="&c;"/>', "has a DOCTYPE"),
    "external-dtd": (lambda: '<!DOCTYPE system SYSTEM "/etc/passwd"><system/>', "has a DOCTYPE"),
    "undefined-entity": (lambda: '<system version="&x;"/>', "Entity 'x' not defined"),
    "deep": (lambda: "<system><cpu>" + "".join(f'<pci busid="0000:{i:02x}:00.0">' for i in range(100))
             + "</pci>" * 100 + "</cpu></system>", "nested deeper than 64 levels"),
    "100k-gpus": (lambda: BIG, "<gpu>: has more than 256 GPUs"),
    # schema
    "no-system": (lambda: text_of(A100).replace('<system version="1">', "<topo>").replace("</system>", "</topo>"),
                  "<system>: missing <system>"),
    "no-gpu": (lambda: re.sub(r"<gpu .*?</gpu>", "", text_of(A100), flags=re.S), "<system>: no <gpu> element"),
    "gpu-outside-pci": (lambda: '<system><cpu numaid="0"><gpu dev="0" sm="80"/></cpu></system>',
                        "<gpu dev=0>: a <gpu> belongs inside <pci>"),
    "bad-busid": (_bad(A100, 'busid="0000:07:00.0"', 'busid="zz"'), "<pci busid>: expected a PCI address"),
    "same-busid": (_bad(A100, 'busid="0000:0f:00.0"', 'busid="0000:07:00.0"'), "<pci busid>: PCI address"),
    "dev-twice": (_bad(A100, '<gpu dev="1"', '<gpu dev="0"'), "<gpu busid=0000:0f:00.0 dev>: GPU device 0"),
    "dev-not-a-number": (_bad(A100, '<gpu dev="1"', '<gpu dev="one"'), "<gpu busid=0000:0f:00.0 dev>: expected"),
    "no-sm": (_bad(A100, ' sm="80"', ""), "<gpu busid=0000:07:00.0 sm>: missing attribute"),
    "sm-not-device": (_bad(A100, 'sm="80"', 'sm="90"', 8), "<gpu busid=0000:07:00.0 sm>: compute capability 90"),
    "mixed-gpus": (lambda: edit(edit(text_of(A100), 'device="0x20b0"', 'device="0x2330"'), 'sm="80"', 'sm="90"'),
                   "<gpu busid=0000:0f:00.0>: GPUs differ (this one: PCI device 0x20b0, compute capability 80"),
    "unknown-gpu": (_bad(A100, 'device="0x20b0"', 'device="0x20b3"', 8), "give --gpu-model NAME and --sms N"),
    "two-hosts": (lambda: text_of(A100).replace('<cpu numaid="0"', '<cpu host_hash="0x1" numaid="0"').replace(
        '<cpu numaid="1"', '<cpu host_hash="0x2" numaid="1"'), "<cpu numaid=1 host_hash>: the dump describes 2 hosts"),
    # links
    "nvlink-to-nic": (_bad(A100, 'target="0000:c4:00.0"', 'target="0000:0c:00.0"'),
                      "<gpu busid=0000:07:00.0>/<nvlink target>: the target <pci busid=0000:0c:00.0 class=0x020700>"),
    "nvlink-unknown-tclass": (_bad(A100, 'tclass="0x068000"', 'tclass="0x068002"'),
                              "<gpu busid=0000:07:00.0>/<nvlink target=0000:c4:00.0 tclass>: '0x068002' is neither"),
    "nvlink-unknown-target": (_bad(A100, 'target="0000:c4:00.0" count="2" tclass="0x068000"',
                                   'target="0000:ee:00.0" count="2"'), "<nvlink target>: the target '0000:ee:00.0'"),
    "nvlink-to-itself": (_bad(NDV2, 'target="0002:00:00.0" count="2"', 'target="0001:00:00.0" count="2"'),
                         "<gpu busid=0001:00:00.0>/<nvlink target>: a GPU cannot link to itself"),
    "nvlink-count-zero": (_bad(A100, 'count="2"', 'count="0"'), "<nvlink target=0000:c4:00.0 count>: must be"),
    "nvswitch-counts-differ": (_bad(A100, 'count="2"', 'count="1"'), "<gpu busid=0000:07:00.0>: inconsistent counts"),
    "direct-counts-differ": (_bad(NDV2, 'target="0002:00:00.0" count="2"', 'target="0002:00:00.0" count="1"'),
                             "<gpu busid=0001:00:00.0>/<nvlink target=0002:00:00.0 count>: inconsistent counts"),
    "disconnected": (lambda: '<system><cpu numaid="0">' + "".join(
        f'<pci busid="0000:0{i}:00.0" vendor="0x10de" device="0x2330"><gpu dev="{i}" sm="90"/></pci>'
        for i in range(2)) + "</cpu></system>", "<gpu busid=0000:01:00.0>: GPU 1 is joined to GPU 0 by no NVLink"),
    "unknown-compute-capability": (lambda: SM86, "<pci busid=0000:00:00.0>: the GPU (no PCI device id, compute "
                                                 "capability 86) is not one colls knows: give --gpu-model NAME"),
    # NICs
    "net-no-speed": (_bad(A100, ' speed="200000"', ""), "<net name=mlx5_0 speed>: missing attribute"),
    "net-speed-unknown": (_bad(A100, 'speed="200000"', 'speed="-1"'), "<net name=mlx5_0 speed>: the NIC's speed is"),
    "net-dev-twice": (_bad(A100, 'name="mlx5_1" dev="1"', 'name="mlx5_1" dev="0"'),
                      "<net name=mlx5_1 dev>: NIC device 0"),
    "net-outside-nic": (lambda: edit(edit(text_of(A100), "<nic>", ""), "</nic>", ""),
                        "<net name=mlx5_0>: a <net> belongs inside <nic>, not <pci>"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_dump(tmp_path, capsys, monkeypatch, case):
    make, names = BAD[case]
    content = make()
    path = tmp_path / "topo.xml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    monkeypatch.chdir(out_dir)
    rc, out, err = run(capsys, "hardware", "import", path, "-o", "p.yaml")
    assert rc == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"colls: error: {path}: "), err
    assert names in lines[0], lines[0]
    assert lines[0].isprintable() and len(lines[0]) < 400 and out == ""
    assert os.listdir(out_dir) == []


@pytest.mark.parametrize("args, names", [
    ([DATA / "dgx-a100.xml", "--link-bandwidth", "fast"], "--link-bandwidth: expected GB/s"),
    ([DATA / "dgx-a100.xml", "--link-bandwidth", "0"], "--link-bandwidth: must be between"),
    ([DATA / "dgx-a100.xml", "--name", "my node"], "--name: expected a name"),
    ([DATA / "dgx-a100.xml", "--gpu-model", "x\ty"], "--gpu-model: expected at most 100 printable"),
    ([DATA / "dgx-a100.xml", "-o", "missing/p.yaml"], "-o: 'missing/p.yaml': folder"),
    (["@dir"], "is a directory"),
    (["@fifo"], "is a named pipe"),
    (["no-such.xml"], "no-such.xml: no such file"),
])
def test_bad_arguments(tmp_path, capsys, monkeypatch, args, names):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo")
    os.mkdir("dir")
    args = [{"@dir": "dir", "@fifo": "fifo"}.get(str(a), a) for a in args]
    rc, out, err = run(capsys, "hardware", "import", *args)
    assert rc == 2 and len(err.splitlines()) == 1 and names in err and out == "", err
    assert sorted(os.listdir()) == ["dir", "fifo"]
