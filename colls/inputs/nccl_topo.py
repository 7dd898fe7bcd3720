"""NCCL (and RCCL) topology dumps -> node profiles: ``colls hardware import TOPO.xml``.

NCCL writes what it knows about a node to ``NCCL_TOPO_DUMP_FILE`` (NCCL's ``src/graph/xml.cc`` writes it,
``src/graph/topo.cc`` reads it back). The elements colls reads::

    <system version>
      <cpu numaid arch vendor familyid modelid host_hash ...>       a NUMA domain
        <pci busid class vendor device link_speed link_width ...>   a bridge, switch port or device; nests
          <gpu dev sm rank gdr [gcn arch]>                          a GPU (sm: the compute capability)
            <nvlink target count tclass/>                           NVLinks to a GPU, NVSwitch or CPU
            <xgmi target count tclass/>                             RCCL: xGMI links to another GPU
          <nic> <net name dev speed port latency guid ...> </nic>   one NIC port per <net>; speed in Mb/s
        <nic> ... </nic>                                            a NIC with no PCI address (virtual)

and what becomes of them in the node profile (see :mod:`colls.inputs.hardware`):

- ``gpu``: one model per node. NVIDIA GPUs are told apart by ``<pci device>`` (:data:`NVIDIA_GPUS`; ``<gpu
  sm>`` is the compute capability, not the SM count); without a device id the compute capability picks
  the SXM part of its generation (:data:`BY_COMPUTE_CAPABILITY`), said in a note. AMD GPUs by ``<pci device>``
  or ``<gpu gcn>`` (:data:`AMD_GPUS`). Anything else needs ``--gpu-model`` and ``--sms``. GPUs are numbered
  by ``<gpu dev>``.
- ``link_classes``/``switches``/``direct``: NVLinks to other GPUs (``tclass`` 0x03....) become the
  ``direct`` matrix, which must be symmetric; NVLinks to NVSwitches (``tclass`` 0x068000, or a target that
  is a ``<pci class=0x068000>``) become one switch vertex, as NCCL's topo.cc merges every NVSwitch into one
  NVS node, with the GPU's total link count (equal for every GPU); NVLinks to a CPU (``tclass`` 0x068001,
  POWER systems) a switch vertex per CPU. Bandwidth per link and direction from the NVLink (or xGMI)
  generation (:data:`NVLINK`, :data:`XGMI`), efficiency from NCCL's and RCCL's own per-link figures.
- ``nics``: every ``<net>`` is a NIC (several under one ``<nic>`` are the ports of one card). A GPU's
  nearest NICs are those under the closest ``<pci>`` it shares with a NIC below the CPU (the same PCIe
  switch); if none, the NICs of its CPU; if none, every NIC. GPUs with the same nearest NICs share them out
  in turn (NCCL's ``ncclTopoGetLocalNet`` spreads GPUs over equally near NICs), so a switch with two GPUs
  and two NICs gives one NIC to each. When the PCIe links between a GPU and its NIC (``link_speed`` x
  ``link_width``, after line encoding) are slower than the NIC, the NIC gets a ``pcie`` hop class.
- ``network``: ``rails`` when there are several NICs serving disjoint sets of GPUs, else ``single``; the dump
  says nothing of the network, so the YAML says this was inferred.

Latencies are not in the dump; the YAML uses the shipped profiles' choices and says so.

Every figure in the YAML carries a comment naming the element or attribute it came from, or the NCCL or
vendor figure assumed. Elements and attributes outside this schema are ignored, one note per kind
(:attr:`Imported.notes`); NCCL's ``<c2c>``, ``<pcilink>``, ``<gin>`` and ``<rma>`` say nothing colls models
and are skipped silently. Anything missing or inconsistent is a :class:`CollsError` naming the file and the
element (``topo.xml: <gpu busid=0000:07:00.0>/<nvlink target>: ...``).

Hostile input: the file is read with :func:`colls.files.read_text` (a regular file of at most
:data:`MAX_DUMP_BYTES`), parsed by lxml without entities, network, DTD or huge-tree mode, and refused if it
has a DOCTYPE, is nested deeper than :data:`MAX_DEPTH` levels, or has more than :data:`MAX_ELEMENTS`
elements, :data:`MAX_GPUS` GPUs or :data:`MAX_NICS` NICs.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

import yaml
from lxml import etree

from colls.collectives import rank_ranges
from colls.errors import CollsError, excerpt, printable, xml_reason
from colls.files import read_text
from colls.runtimes.costs import family_of

MAX_DUMP_BYTES = 16 * 2**20
MAX_DEPTH = 64          # levels of elements; NCCL's own dumps are about 8 deep
MAX_ELEMENTS = 100_000
MAX_GPUS = MAX_NICS = 256  # per node: NCCL's NCCL_TOPO_MAX_NODES (src/include/graph.h) of most versions
MAX_PAIRS = 16384       # GPU-NIC pairs in the profile's nics lists
MAX_LINKS = 1000        # NVLinks or xGMI links from one GPU to one target (18 on an H100)
MAX_NET_MBPS = 8 * 10**9  # 1 PB/s, colls' largest bandwidth

NVIDIA, AMD = 0x10DE, 0x1002
NVSWITCH_CLASS, CPU_CLASS = "0x068000", "0x068001"  # NCCL topo.cc kvDictPciClass

# (model, SMs, compute capability, what the PCI id is called) by PCI device id (vendor 0x10de)
NVIDIA_GPUS = {
    0x15F9: ("P100-SXM2", 56, 60, "Tesla P100 SXM2 16GB"),
    0x1DB1: ("V100-SXM2", 80, 70, "Tesla V100 SXM2 16GB"),
    0x1DB5: ("V100-SXM2", 80, 70, "Tesla V100 SXM2 32GB"),
    0x1DB8: ("V100-SXM3", 80, 70, "Tesla V100 SXM3 32GB"),
    0x1DB4: ("V100-PCIE", 80, 70, "Tesla V100 PCIe 16GB"),
    0x1DB6: ("V100-PCIE", 80, 70, "Tesla V100 PCIe 32GB"),
    0x20B0: ("A100-SXM4", 108, 80, "A100 SXM4 40GB"),
    0x20B2: ("A100-SXM4", 108, 80, "A100 SXM4 80GB"),
    0x20F1: ("A100-PCIE", 108, 80, "A100 PCIe 40GB"),
    0x20B5: ("A100-PCIE", 108, 80, "A100 PCIe 80GB"),
    0x2330: ("H100-SXM5", 132, 90, "H100 SXM5 80GB"),
    0x2331: ("H100-PCIE", 114, 90, "H100 PCIe"),
    0x2335: ("H200", 132, 90, "H200 141GB"),
}
# the SXM part of each generation, for a dump without <pci device>
BY_COMPUTE_CAPABILITY = {60: ("P100-SXM2", 56), 70: ("V100-SXM2", 80), 80: ("A100-SXM4", 108),
                         90: ("H100-SXM5", 132)}
# (model, compute units per GCD, gfx arch, what the PCI id is called) by PCI device id (vendor 0x1002)
AMD_GPUS = {
    0x740C: ("MI250-GCD", 104, "gfx90a", "Instinct MI250X/MI250: 104 CUs per GCD, MI250's (MI250X has 110)"),
    0x7408: ("MI250X-GCD", 110, "gfx90a", "Instinct MI250X: 110 CUs per GCD"),
    0x74A1: ("MI300X", 304, "gfx942", "Instinct MI300X: 304 CUs"),
}
# gfx90a without a device id: 104 CUs, the fewest of any gfx90a part (MI210, MI250 104; MI250X 110)
BY_GCN = {"gfx90a": ("MI250-GCD", 104)}
_GCN_NAMES = {"910": "gfx90a", "940": "gfx940", "941": "gfx941", "942": "gfx942"}  # RCCL's older numbers

# compute capability -> (class, GB/s per link and direction, NCCL's per-link figure, its name)
NVLINK = {
    60: ("nvlink1", Fraction(20), "18.0", "SM60_NVLINK_BW", "P100: NVLink1, 20 GB/s per link and direction"),
    70: ("nvlink2", Fraction(25), "20.0", "SM70_NVLINK_BW", "V100: NVLink2, 25 GB/s per link and direction"),
    80: ("nvlink3", Fraction(25), "20.0", "SM80_NVLINK_BW", "A100: NVLink3, 25 GB/s per link and direction"),
    90: ("nvlink4", Fraction(25), "20.6", "SM90_NVLINK_BW", "H100: NVLink4, 25 GB/s per link and direction"),
    100: ("nvlink5", Fraction(50), "40.1", "SM100_NVLINK_BW",
          "B200: NVLink5, 50 GB/s per link and direction"),
}
XGMI = {
    "gfx90a": ("xgmi", Fraction(50), "36.0", "MI200_XGMI_WIDTH",
               "MI250 data sheet: xGMI (Infinity Fabric) links of 50 GB/s per direction"),
    "gfx942": ("xgmi", Fraction(64), "48.0", "GFX94X_XGMI_WIDTH",
               "MI300X data sheet: xGMI (Infinity Fabric) links of 64 GB/s per direction"),
}
LAT_SWITCH, LAT_DIRECT, LAT_XGMI, LAT_XGMI3, LAT_NET = 0.15, 0.3, 0.7, 1.7, 0.65
_LAT_WHY = {
    LAT_SWITCH: "assumed: 0.3 us per transfer (TACCL's profiled NVSwitch alpha), over two hops GPU->switch->GPU",
    LAT_DIRECT: "assumed: 0.3 us per transfer (TACCL's profiled NVLink alpha); a direct link is one hop",
    LAT_XGMI: "assumed: no published xGMI figure; 0.7 us per transfer (as the shipped mi250 profile), one hop",
    LAT_XGMI3: "measured: an LL hop of published MSCCL files on MI300X, RCCL 2.21.5 (as the shipped mi300x profile)",
    LAT_NET: "assumed: TACCL's remote alpha 2.6 us per transfer, over four hops GPU->NIC->switch->NIC->GPU",
}
# PCIe: GT/s per lane -> line encoding (8b/10b to Gen2, 128b/130b Gen3-5, Gen6 FLIT mode 242 of 256 bytes)
_PCIE_ENCODING = {Fraction(5, 2): Fraction(8, 10), Fraction(5): Fraction(8, 10), Fraction(8): Fraction(128, 130),
                  Fraction(16): Fraction(128, 130), Fraction(32): Fraction(128, 130),
                  Fraction(64): Fraction(242, 256)}

_KNOWN = {  # element -> (allowed parents, attributes of NCCL's or RCCL's schema)
    "system": ((), {"version"}),
    "cpu": (("system",), {"numaid", "affinity", "affinity_offset", "arch", "vendor", "familyid", "modelid",
                          "host_hash"}),
    "pci": (("cpu", "pci"), {"busid", "class", "vendor", "device", "subsystem_vendor", "subsystem_device",
                             "link_speed", "link_width"}),
    "gpu": (("pci",), {"dev", "sm", "rank", "gdr", "gcn", "arch"}),
    "nvlink": (("gpu",), {"target", "count", "tclass"}),
    "xgmi": (("gpu",), {"target", "count", "tclass"}),
    "nic": (("pci", "cpu"), set()),
    "net": (("nic",), {"name", "dev", "speed", "port", "latency", "guid", "maxconn", "gdr", "coll", "net",
                       "rail", "plane"}),
}
_SKIPPED = {"c2c", "pcilink", "gin", "rma"}
_BUSID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\Z")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+-]*\Z")


@dataclass
class Imported:
    """The result of :func:`import_dump`."""

    text: str                     # the node profile, YAML with comments
    profile: dict                 # the same, as data
    summary: str                  # one line: what the profile describes
    notes: list[str] = field(default_factory=list)  # what was ignored or assumed, one line each


@dataclass
class _Gpu:
    el: object
    busid: tuple
    bus_text: str
    dev: int
    cpu: object
    chain: tuple                  # the <pci> elements from below the CPU down to the GPU's own
    index: int = -1               # profile GPU number (by dev)


@dataclass
class _Net:
    el: object
    name: str
    dev: int
    speed: int
    cpu: object
    chain: tuple                  # the <pci> elements from below the CPU down to the NIC's own (may be empty)
    kind: str = "net"             # ib or eth, from the NIC's <pci class> (0x0207.. InfiniBand, 0x0200.. Ethernet)


# --- public entry point ---------------------------------------------------------------------------------
def import_dump(path: str, name: str | None = None, gpu_model: str | None = None, sms: int | None = None,
                link_bandwidth: str | None = None) -> Imported:
    """Read the NCCL/RCCL topology dump ``path`` and return the node profile it describes.

    Parameters
    ----------
    path : the dump (``NCCL_TOPO_DUMP_FILE``).
    name : the profile's name (default: from the file name).
    gpu_model, sms : the GPU model and SM count, for a GPU colls does not know or to override its table.
    link_bandwidth : GB/s per NVLink/xGMI link and direction (a decimal number), for a generation colls
        does not know or to override its table.

    Returns
    -------
    :class:`Imported`; its ``text`` loads with ``--hardware`` at any ``--nodes`` (at 1 when the dump has
    no NIC).

    Raises
    ------
    CollsError naming ``path`` and the element at fault, or the option.
    """
    overrides = _check_options(name, gpu_model, sms, link_bandwidth)
    dump = _Dump(path)
    return _Builder(dump, overrides).build()


def _check_options(name, gpu_model, sms, link_bandwidth) -> dict:
    if name is not None and (not _NAME.match(name) or len(name) > 100):
        raise CollsError(f"expected a name of at most 100 letters, digits, '_', '+' or '-', got {excerpt(name)}",
                         key="--name")
    if gpu_model is not None and (not gpu_model or len(gpu_model) > 100 or not gpu_model.isascii()
                                  or not gpu_model.isprintable()):
        raise CollsError(f"expected at most 100 printable ASCII characters, got {excerpt(gpu_model)}",
                         key="--gpu-model")
    if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= 10**6):
        raise CollsError(f"must be a whole number from 1 to 1000000, got {excerpt(sms)}", key="--sms")
    bw = None
    if link_bandwidth is not None:
        text = str(link_bandwidth).strip()
        if not re.fullmatch(r"[0-9]{1,7}(\.[0-9]{1,6})?", text):
            raise CollsError(f"expected GB/s as a decimal number (e.g. 25 or 12.5), got {excerpt(text)}",
                             key="--link-bandwidth")
        bw = Fraction(text)
        if not Fraction(1, 10**6) <= bw <= 10**6:
            raise CollsError(f"must be between 1e-06 and 1e+06 GB/s, got {text}", key="--link-bandwidth")
    return {"name": name, "gpu_model": gpu_model, "sms": sms, "link_bandwidth": bw}


# --- reading the dump -----------------------------------------------------------------------------------
class _Dump:
    """The dump's elements, checked against the schema, as GPUs, their links, NICs and NVSwitches."""

    def __init__(self, path: str):
        self.source = path
        self.notes: dict[str, int] = {}
        text = read_text(path, MAX_DUMP_BYTES)
        if not text.strip():
            raise CollsError("is empty; expected an NCCL topology dump (<system> ...)", source=path)
        if re.search(r"<!(DOCTYPE|ENTITY)", re.sub(r"<!--.*?-->", "", text, flags=re.S), re.I):
            raise CollsError("has a DOCTYPE; NCCL topology dumps have none, and colls reads no DTD", source=path)
        # (collect_ids=False would make libxml2 read an external DTD subset, a local file: left at its default)
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False,
                                 dtd_validation=False, remove_comments=True, remove_pis=True)
        try:
            root = etree.fromstring(text.encode("utf-8"), parser)
        except etree.XMLSyntaxError as e:
            why = xml_reason(re.sub(r"\s*\(<string>, line [0-9]+\)\s*$", "", str(e)))
            raise CollsError(f"not well-formed XML: {printable(why, 160)}", source=path) from None
        if root is None:
            raise CollsError("has no elements; expected an NCCL topology dump (<system> ...)", source=path)
        docinfo = root.getroottree().docinfo
        if docinfo.doctype or docinfo.internalDTD is not None:
            raise CollsError("has a DOCTYPE; NCCL topology dumps have none, and colls reads no DTD",
                             source=path)
        if root.tag != "system":
            raise CollsError(f"missing <system>: the top element is <{_tag(root)}>; an NCCL topology dump "
                             f"starts with <system version=...>", source=path, key="<system>")
        self.root = root
        self.gpus: list[_Gpu] = []
        self.links: dict[int, list] = {}   # id(gpu element) -> [(element, target busid, text, count, tclass)]
        self.nets: list[_Net] = []
        self.pci: dict[tuple, object] = {}  # busid -> <pci>
        self.cpus: list = []
        self._walk()

    # messages ---------------------------------------------------------------------------------------------
    def fail(self, el, message: str, attr: str | None = None):
        raise CollsError(message, source=self.source, key=self.where(el, attr))

    def where(self, el, attr: str | None = None) -> str:
        """``<gpu busid=0000:07:00.0>/<nvlink target>``: the element, by what identifies it."""
        tag = _tag(el)
        ident = {"cpu": "numaid", "pci": "busid", "net": "name", "nvlink": "target", "xgmi": "target"}.get(tag)
        own = el.get(ident) if ident else None
        if tag in ("gpu", "nic"):
            parent = el.getparent()
            ident, own = "busid", parent.get("busid") if parent is not None and _tag(parent) == "pci" else None
            if own is None and tag == "gpu":
                ident, own = "dev", el.get("dev")
        parts = [tag]
        if own is not None and attr != ident:
            parts.append(f"{ident}={printable(own, 40)}")
        if attr:
            parts.append(printable(attr, 40))
        text = "<" + " ".join(parts) + ">"
        if tag in ("nvlink", "xgmi"):
            text = self.where(el.getparent()) + "/" + text
        return text

    def note(self, kind: str, n: int = 1) -> None:
        self.notes[kind] = self.notes.get(kind, 0) + n

    # attributes -------------------------------------------------------------------------------------------
    def attr(self, el, name: str, required: bool = True) -> str | None:
        value = el.get(name)
        if value is None and required:
            self.fail(el, "missing attribute", name)
        return value

    def integer(self, el, name: str, minimum: int, maximum: int, required: bool = True) -> int | None:
        value = self.attr(el, name, required)
        if value is None:
            return None
        text = value.strip()
        try:
            n = None if len(text) > 20 else int(text, 16) if text.lower().startswith("0x") else int(text, 10)
        except ValueError:
            n = None
        if n is None:
            self.fail(el, f"expected a whole number, got {excerpt(value)}", name)
        if not minimum <= n <= maximum:
            self.fail(el, f"must be between {minimum} and {maximum}, got {excerpt(value)}", name)
        return n

    def busid(self, el, name: str) -> tuple:
        value = self.attr(el, name)
        m = _BUSID.match(value.strip())
        if not m:
            self.fail(el, f"expected a PCI address such as 0000:07:00.0, got {excerpt(value)}", name)
        return tuple(int(x, 16) for x in m.groups())

    # the walk ---------------------------------------------------------------------------------------------
    def _walk(self) -> None:
        self._attrs(self.root)
        count = 1
        stack = [(child, 1, None, ()) for child in reversed(self.root)]
        while stack:
            el, depth, cpu, chain = stack.pop()
            if not isinstance(el.tag, str):   # an entity reference left unexpanded
                continue
            count += 1
            if count > MAX_ELEMENTS:
                raise CollsError(f"has more than {MAX_ELEMENTS} elements; an NCCL topology dump of one node has "
                                 f"a few hundred", source=self.source)
            if depth > MAX_DEPTH:
                self.fail(el, f"nested deeper than {MAX_DEPTH} levels")
            tag = el.tag
            if tag in _SKIPPED:
                continue
            if tag not in _KNOWN:
                self.note(f"ignored <{printable(_tag(el), 40)}> elements")
                continue
            parent = el.getparent()
            allowed = _KNOWN[tag][0]
            if _tag(parent) not in allowed:
                self.fail(el, f"a <{tag}> belongs inside {' or '.join(f'<{p}>' for p in allowed) or 'nothing'}, "
                              f"not <{_tag(parent)}>")
            self._attrs(el)
            if tag == "cpu":
                cpu = el
                self.cpus.append(el)
            elif tag == "pci":
                bus = self.busid(el, "busid")
                if bus in self.pci:
                    self.fail(el, f"PCI address {excerpt(el.get('busid'))} is listed twice", "busid")
                self.pci[bus] = el
                chain = chain + (el,)
            elif tag == "gpu":
                self._gpu(el, cpu, chain)
            elif tag in ("nvlink", "xgmi"):
                self._link(el)
            elif tag == "net":
                self._net(el, cpu, chain)
            stack.extend((child, depth + 1, cpu, chain) for child in reversed(el))

    def _attrs(self, el) -> None:
        known = _KNOWN[el.tag][1]
        for a in el.keys():
            if a not in known:
                self.note(f"ignored attribute {printable(a, 40)} of <{el.tag}>")

    def _gpu(self, el, cpu, chain) -> None:
        pci = el.getparent()
        if sum(1 for e in pci if e.tag == "gpu") > 1:
            self.fail(el, "two <gpu> elements in one <pci>: NVLink targets could not tell them apart")
        if len(self.gpus) >= MAX_GPUS:
            raise CollsError(f"has more than {MAX_GPUS} GPUs; colls imports one node's dump (NCCL's "
                             f"NCCL_TOPO_MAX_NODES is {MAX_GPUS} in most versions)", source=self.source, key="<gpu>")
        bus = self.busid(pci, "busid")
        dev = self.integer(el, "dev", 0, 10**6)
        self.gpus.append(_Gpu(el, bus, pci.get("busid").strip().lower(), dev, cpu, chain))
        self.links[id(el)] = []

    def _link(self, el) -> None:
        gpu = el.getparent()
        target = self.busid(el, "target")
        count = self.integer(el, "count", 1, MAX_LINKS)
        tclass = el.get("tclass")
        self.links[id(gpu)].append((el, target, el.get("target").strip().lower(), count,
                                    tclass.strip().lower() if tclass is not None else None))

    def _net(self, el, cpu, chain) -> None:
        if el.get("net", "1").strip() == "0":
            self.note("ignored <net net=0> elements (NICs fused into a virtual NIC, which NCCL skips too)")
            return
        if len(self.nets) >= MAX_NICS:
            raise CollsError(f"has more than {MAX_NICS} NICs; colls imports one node's dump", source=self.source,
                             key="<net>")
        name = self.attr(el, "name", required=False) or ""
        dev = self.integer(el, "dev", 0, 10**6)
        speed = self.integer(el, "speed", -1, MAX_NET_MBPS)
        if speed <= 0:
            self.fail(el, f"the NIC's speed is unknown ({speed} Mb/s); give its speed in Mb/s, e.g. 200000 "
                          f"for 200 Gb/s", "speed")
        nic_parent = el.getparent().getparent()
        on_pci = _tag(nic_parent) == "pci"
        cls = (nic_parent.get("class") or "").strip().lower() if on_pci else ""
        kind = "ib" if cls.startswith("0x0207") else "eth" if cls.startswith("0x0200") else "net"
        self.nets.append(_Net(el, name, dev, speed, cpu, chain if on_pci else (), kind))


# --- building the profile -------------------------------------------------------------------------------
class _Builder:
    def __init__(self, dump: _Dump, overrides: dict):
        self.d = dump
        self.o = overrides
        self.notes: list[str] = []
        self.unknown_pcie: set = set()

    def build(self) -> Imported:
        d = self.d
        self._check_hosts()
        if not d.gpus:
            d.fail(d.root, "no <gpu> element: the dump describes no GPU (NCCL writes one <gpu> per GPU of "
                           "the job, inside its <pci>)")
        gpus = sorted(d.gpus, key=lambda g: g.dev)
        for a, b in zip(gpus, gpus[1:]):
            if a.dev == b.dev:
                d.fail(b.el, f"GPU device {b.dev} is listed twice (also <gpu busid={a.bus_text}>)", "dev")
        for i, g in enumerate(gpus):
            g.index = i
        seen = {}
        for g in gpus:
            if g.busid in seen:
                d.fail(g.el, f"two GPUs at one PCI address (also <gpu dev={seen[g.busid].dev}>)")
            seen[g.busid] = g
        self.gpus = gpus
        model = self._model()
        links = self._links(model)
        nics, hop_classes, layout, layout_why = self._nics()
        return self._emit(model, links, nics, hop_classes, layout, layout_why)

    def _check_hosts(self) -> None:
        hashes = {}
        for cpu in self.d.cpus:
            h = cpu.get("host_hash")
            if h is not None:
                hashes.setdefault(h.strip().lower(), cpu)
        if len(hashes) > 1:
            first, second = list(hashes.values())[:2]
            self.d.fail(second, f"the dump describes {len(hashes)} hosts (host_hash "
                                f"{printable(first.get('host_hash'), 20)}, {printable(second.get('host_hash'), 20)}, "
                                f"...); colls imports one node: keep one host's <cpu> elements", "host_hash")

    # GPUs -------------------------------------------------------------------------------------------------
    def _model(self) -> dict:
        """Model, SMs and interconnect of the GPUs (all alike), with where each came from."""
        d, o = self.d, self.o
        seen: dict[tuple, tuple] = {}
        for g in self.gpus:
            m = self._identify(g)
            same = (m["model"], m["sms"], m["link"]) if m["model"] else m["key"]
            if seen and same not in seen:
                other, om = next(iter(seen.values()))
                d.fail(g.el, f"GPUs differ (this one: {m['what']}; <gpu busid={other.bus_text}>: {om['what']}); "
                             f"a node profile has one GPU model")
            seen.setdefault(same, (g, m))
        first, m = next(iter(seen.values()))
        if m["model"] is None and (o["gpu_model"] is None or o["sms"] is None):
            d.fail(first.el.getparent(), f"the GPU ({m['what']}) is not one colls knows: give --gpu-model NAME and "
                                         f"--sms N (its SM or CU count), and --link-bandwidth GBPS if it has NVLink "
                                         f"or xGMI")
        if m.get("assumed") and (o["gpu_model"] is None or o["sms"] is None):
            self.notes.append(m["assumed"])
        if o["gpu_model"]:
            m["model"], m["model_why"] = o["gpu_model"], "given with --gpu-model"
        if o["sms"]:
            m["sms"], m["sms_why"] = o["sms"], "given with --sms"
        return m

    def _identify(self, g: _Gpu) -> dict:
        """What one GPU is: ``model``, ``sms`` (None when unknown), ``link`` (its NVLINK/XGMI entry or None),
        ``what`` (its ids in words), the ``*_why`` comments, and ``assumed`` (a note) when guessed."""
        d = self.d
        pci = g.el.getparent()
        vendor = d.integer(pci, "vendor", 0, 0xFFFF, required=False)
        device = d.integer(pci, "device", 0, 0xFFFF, required=False)
        gcn = _gcn(g.el.get("gcn"))
        if vendor is None:
            vendor = AMD if gcn is not None else NVIDIA
        dev_text = f"PCI device 0x{device:04x}" if device is not None else "no PCI device id"
        m = {"model": None, "sms": None, "link": None, "key": (vendor, device, gcn)}
        if vendor == NVIDIA:
            cc = d.integer(g.el, "sm", 0, 10**4)
            m["key"] += (cc,)
            m["what"] = f"{dev_text}, compute capability {cc}"
            m["link"] = NVLINK.get(cc)
            if device is not None and device in NVIDIA_GPUS:
                model, nsms, want_cc, called = NVIDIA_GPUS[device]
                if cc != want_cc:
                    d.fail(g.el, f"compute capability {cc} does not match <pci device=0x{device:04x}> ({called}, "
                                 f"compute capability {want_cc})", "sm")
                m.update(model=model, sms=nsms, model_why=f"<pci device=0x{device:04x}> (vendor 0x10de): {called}",
                         sms_why=f"{model}: {nsms} SMs (NVIDIA's whitepaper for the part)")
            elif device is None and cc in BY_COMPUTE_CAPABILITY:
                model, nsms = BY_COMPUTE_CAPABILITY[cc]
                m.update(model=model, sms=nsms,
                         model_why=f"assumed from compute capability {cc} (<gpu sm={cc}>, no <pci device>): "
                                   f"the SXM part", sms_why=f"{model}: {nsms} SMs (NVIDIA's whitepaper)",
                         assumed=f"GPU model assumed from compute capability {cc} (the dump gives no <pci device>): "
                                 f"{model}, {nsms} SMs; give --gpu-model and --sms if yours differs")
        elif vendor == AMD:
            if device is not None and device in AMD_GPUS:
                model, nsms, want_gcn, called = AMD_GPUS[device]
                if gcn is not None and gcn != want_gcn:
                    d.fail(g.el, f"gcn {excerpt(gcn)} does not match <pci device=0x{device:04x}> "
                                 f"({called.split(':')[0]}, {want_gcn})", "gcn")
                gcn = want_gcn
                m.update(model=model, sms=nsms,
                         model_why=f"<pci device=0x{device:04x}> (vendor 0x1002): {called.split(':')[0]}",
                         sms_why=f"{called.split(': ', 1)[1]} (AMD's data sheet)")
            elif device is None and gcn in BY_GCN:
                model, nsms = BY_GCN[gcn]
                m.update(model=model, sms=nsms, model_why=f"assumed from <gpu gcn> {gcn} (no <pci device>)",
                         sms_why=f"{model}: {nsms} CUs, the fewest of any {gcn} part (AMD's data sheets)",
                         assumed=f"GPU model assumed from <gpu gcn> {gcn} (the dump gives no <pci device>): "
                                 f"{model}, {nsms} CUs; give --gpu-model and --sms if yours differs")
            m["link"] = XGMI.get(gcn)
            m["what"] = f"{dev_text}, gcn {printable(gcn, 20) if gcn else 'not given'}"
        else:
            m["what"] = f"PCI vendor 0x{vendor:04x}, {dev_text}"
        return m

    # NVLinks and xGMI ----------------------------------------------------------------------------------------
    def _links(self, model: dict) -> dict:
        d = self.d
        by_bus = {g.busid: g for g in self.gpus}
        n = len(self.gpus)
        matrix = [[0] * n for _ in range(n)]
        first_el = [[None] * n for _ in range(n)]
        switch_links: dict[int, dict] = {g.index: {} for g in self.gpus}   # GPU -> {switch busid text: count}
        cpu_links: dict[int, dict] = {}                                    # id(cpu) -> {GPU: count}
        cpu_of: dict[int, object] = {}
        tags = set()
        absent = 0
        for g in self.gpus:
            for el, target, target_text, count, tclass in d.links[id(g.el)]:
                tags.add(el.tag)
                kind = None
                if tclass is not None:
                    if tclass.startswith("0x03"):
                        kind = "gpu"
                    elif tclass == NVSWITCH_CLASS:
                        kind = "switch"
                    elif tclass == CPU_CLASS:
                        kind = "cpu"
                    else:
                        d.fail(el, f"{excerpt(tclass)} is neither a GPU (0x03....), an NVSwitch ({NVSWITCH_CLASS}) "
                                   f"nor a CPU ({CPU_CLASS})", "tclass")
                if target == g.busid:
                    d.fail(el, "a GPU cannot link to itself", "target")
                if target in by_bus:
                    if kind not in (None, "gpu"):
                        d.fail(el, f"the target is a GPU, but tclass {tclass} says it is not", "target")
                    other = by_bus[target]
                    matrix[g.index][other.index] += count
                    first_el[g.index][other.index] = first_el[g.index][other.index] or el
                elif target in d.pci and kind != "cpu":
                    target_el = d.pci[target]
                    cls = (target_el.get("class") or "").strip().lower()
                    if cls.startswith("0x03") and kind in (None, "gpu"):
                        absent += 1     # a GPU's <pci> without its <gpu>: not used by the job
                        continue
                    if cls != NVSWITCH_CLASS or kind not in (None, "switch"):
                        d.fail(el, f"the target <pci busid={target_text} class={printable(cls or 'none', 20)}> is "
                                   f"neither a GPU nor an NVSwitch (class {NVSWITCH_CLASS})", "target")
                    switch_links[g.index][target_text] = switch_links[g.index].get(target_text, 0) + count
                elif kind == "switch":   # NCCL: an NVLink device not visible here (a VM) is an NVSwitch
                    switch_links[g.index][target_text] = switch_links[g.index].get(target_text, 0) + count
                elif kind == "cpu":
                    cpu_links.setdefault(id(g.cpu), {})
                    cpu_links[id(g.cpu)][g.index] = cpu_links[id(g.cpu)].get(g.index, 0) + count
                    cpu_of[id(g.cpu)] = g.cpu
                elif kind == "gpu":      # a GPU of the node that the job which wrote the dump did not use
                    absent += 1
                else:
                    d.fail(el, f"the target {excerpt(target_text)} is not in the dump and there is no tclass to "
                               f"say what it is (a GPU, an NVSwitch)", "target")
        if len(tags) > 1:
            d.fail(self.gpus[0].el, "the dump mixes <nvlink> and <xgmi> links")
        if absent:
            self.notes.append(f"ignored <{next(iter(tags))}> to GPUs not in the dump ({absent}): NCCL lists only "
                              f"the GPUs of the job that wrote it")
        for i in range(n):
            for j in range(i + 1, n):
                if matrix[i][j] != matrix[j][i]:
                    a, b = (i, j) if first_el[i][j] is not None else (j, i)
                    d.fail(first_el[a][b], f"inconsistent counts: GPU {a} lists {matrix[a][b]} links to GPU {b}, "
                                           f"GPU {b} lists {matrix[b][a]} back", "count")
        totals = {i: sum(s.values()) for i, s in switch_links.items() if s}
        if len(set(totals.values())) > 1:
            usual = Counter(totals.values()).most_common(1)[0][0]
            odd = next(i for i in sorted(totals) if totals[i] != usual)
            ref = next(i for i in sorted(totals) if totals[i] == usual)
            d.fail(self.gpus[odd].el, f"inconsistent counts: GPU {odd} has {totals[odd]} NVSwitch links, GPU {ref} "
                                      f"has {usual}; a node profile gives every GPU of a switch one count")
        for key, per_gpu in cpu_links.items():
            if len(set(per_gpu.values())) > 1:
                lo = min(per_gpu, key=lambda i: per_gpu[i])
                d.fail(self.gpus[lo].el, f"inconsistent counts: GPUs of one CPU have {sorted(set(per_gpu.values()))} "
                                         f"NVLinks to it; a node profile gives every GPU of a switch one count")
        has_links = any(any(row) for row in matrix) or bool(totals) or bool(cpu_links)
        links = {"matrix": matrix if any(any(row) for row in matrix) else None, "switch": switch_links,
                 "totals": totals, "cpu": [(cpu_of[k], v) for k, v in cpu_links.items()],
                 "tag": next(iter(tags)) if tags else None}
        if has_links:
            self._link_class(model, links)
        self._check_connected(links)
        return links

    def _link_class(self, model: dict, links: dict) -> None:
        tag = links["tag"]
        spec = model["link"]
        bw = self.o["link_bandwidth"]
        if spec is None and bw is None:
            self.d.fail(self.gpus[0].el, f"no per-link bandwidth is known for these GPUs' <{tag}> ({model['what']}): "
                                         f"give --link-bandwidth GBPS (GB/s per link and direction)")
        name = spec[0] if spec else ("xgmi" if tag == "xgmi" else "nvlink")
        if bw is not None:
            links["bw"], links["bw_why"], links["eff"] = bw, "given with --link-bandwidth", None
        else:
            _, raw, figure, const, why = spec
            links["bw"], links["bw_why"] = raw, why
            eff = Fraction(figure) / raw
            source = "RCCL" if tag == "xgmi" else "NCCL"
            links["eff"] = (eff, f"{source} src/graph/topo.h: {const} {figure} GB/s per link of the {_dec(raw)} raw")
        links["name"] = name

    def _check_connected(self, links: dict) -> None:
        """Every GPU must reach every other over NVLink/xGMI: colls does not model GPU-to-GPU PCIe paths."""
        n = len(self.gpus)
        if n < 2:
            return
        adj = [set() for _ in range(n)]
        matrix = links["matrix"] or [[0] * n for _ in range(n)]
        for i in range(n):
            adj[i].update(j for j in range(n) if matrix[i][j])
        on_switch = [i for i, t in links["totals"].items() if t]
        for group in [on_switch] + [list(v) for _, v in links["cpu"]]:
            for i in group:
                adj[i].update(group)
        seen, todo = {0}, [0]
        while todo:
            for j in adj[todo.pop()] - seen:
                seen.add(j)
                todo.append(j)
        if len(seen) < n:
            lost = min(set(range(n)) - seen)
            self.d.fail(self.gpus[lost].el, f"GPU {lost} is joined to GPU 0 by no NVLink or xGMI path; colls does not "
                                            f"model GPU-to-GPU traffic over PCIe, so it cannot describe this node")

    # NICs -------------------------------------------------------------------------------------------------
    def _nics(self):
        d = self.d
        nets = sorted(d.nets, key=lambda t: t.dev)
        for a, b in zip(nets, nets[1:]):
            if a.dev == b.dev:
                d.fail(b.el, f"NIC device {b.dev} is listed twice (also <net name={printable(a.name, 40)}>)", "dev")
        if not nets:
            self.notes.append("the dump has no <net>: the profile describes one node (--nodes 1 only)")
            return [], {}, None, None
        under: dict[int, list[int]] = {}
        for j, t in enumerate(nets):
            for el in t.chain:
                under.setdefault(id(el), []).append(j)
        groups: dict[tuple, list] = {}
        for g in self.gpus:
            near, why = None, None
            for el in reversed(g.chain[:-1]):
                if id(el) in under:
                    near = under[id(el)]
                    why = f"same PCIe switch <pci busid={printable(el.get('busid'), 40)}>"
                    break
            if near is None:
                near = [j for j, t in enumerate(nets) if t.cpu is g.cpu]
                why = (f"same CPU <cpu numaid={printable(g.cpu.get('numaid', '?'), 20)}>, no NIC under their "
                       f"PCIe switches")
            if not near:
                near = list(range(len(nets)))
                why = "no NIC on their CPU: every NIC, across the CPUs' interconnect"
            groups.setdefault((tuple(near), why), []).append(g.index)
        served: list[list[int]] = [[] for _ in nets]
        reasons: list[list[str]] = [[] for _ in nets]
        for (near, why), members in groups.items():
            for k, gpu in enumerate(members):
                picks = [near[k % len(near)]] if len(near) <= len(members) else near[k::len(members)]
                for j in picks:
                    served[j].append(gpu)
            for j in near:
                reasons[j].append(f"nearest to GPU{'s' if len(members) > 1 else ''} {rank_ranges(members)} ({why})")
        if sum(map(len, served)) > MAX_PAIRS:
            d.fail(d.root, f"GPUs and NICs make more than {MAX_PAIRS} GPU-NIC pairs; colls imports one node's dump")
        kept = [j for j in range(len(nets)) if served[j]]
        for j in range(len(nets)):
            if not served[j]:
                self.notes.append(f"ignored NIC <net name={printable(nets[j].name, 40)}>: every GPU has nearer "
                                  f"NICs, so NCCL would not use it either")
        nics = []
        hop_classes = {}
        for j in kept:
            t = nets[j]
            gpus = sorted(served[j])
            bw = Fraction(t.speed, 8000)
            hop = self._pcie(t, [self.gpus[i] for i in gpus])
            split = any(len(near) > 1 for near, _ in groups if j in near)
            nic = {"net": t, "gpus": gpus, "bw": bw, "why": reasons[j], "split": split}
            if hop is not None and hop[0] < bw:
                floor = Fraction(int(hop[0] * 1000), 1000)
                cname = f"pcie-{_dec(floor).replace('.', 'p')}"
                hop_classes[cname] = (floor, hop[1])
                nic["pcie"] = cname
            nics.append(nic)
        sets = [set(n["gpus"]) for n in nics]
        disjoint = all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:])
        if len(nics) > 1 and disjoint:
            layout, why = "rails", ("inferred: each NIC serves GPUs of its own (rail-optimised, NIC j of every node "
                                    "on leaf j); the dump does not describe the network")
        else:
            layout, why = "single", ("inferred: " + ("one NIC" if len(nics) == 1 else "NICs share GPUs") +
                                     ", all NICs on one switch; the dump does not describe the network")
        return nics, hop_classes, layout, why

    def _pcie(self, net: _Net, gpus: list[_Gpu]):
        """(GB/s, the slowest link's element) of the PCIe links between ``net`` and the slowest of ``gpus``."""
        worst = None
        for g in gpus:
            if g.cpu is net.cpu:
                common = 0
                while common < min(len(g.chain), len(net.chain)) and g.chain[common] is net.chain[common]:
                    common += 1
            else:
                common = 0
            for el in g.chain[common:] + net.chain[common:]:
                bw = _pcie_link(el)
                if bw is None:
                    self.unknown_pcie.add(el)
                elif worst is None or bw < worst[0]:
                    worst = (bw, el)
        return worst

    # YAML -------------------------------------------------------------------------------------------------
    def _emit(self, model, links, nics, hop_classes, layout, layout_why) -> Imported:
        d, o = self.d, self.o
        source = os.path.basename(d.source)
        name = o["name"] or _default_name(source)
        count = len(self.gpus)
        net_classes: dict[str, tuple] = {}
        for nic in nics:
            t = nic["net"]
            cname = _net_class(t)
            net_classes.setdefault(cname, (nic["bw"], t))
            nic["class"] = cname

        p: dict = {"name": name}
        parts = [f"{count} x {model['model']}"]
        n_switches = len({s for per in links["switch"].values() for s in per})
        if links["totals"]:
            parts.append(f"{n_switches} NVSwitch{'es' if n_switches != 1 else ''}")
        if links["matrix"]:
            parts.append(f"{links['name']} direct links")
        if nics:
            speeds = sorted({n["net"].speed for n in nics})
            parts.append(f"{len(nics)} x " + "/".join(_gbits(s) for s in speeds) + " NIC"
                         + ("s" if len(nics) > 1 else ""))
        p["description"] = f"{', '.join(parts)}; imported from {printable(source, 80)}"
        p["gpu"] = {"model": model["model"], "sms": model["sms"], "count": count}
        classes = {}
        if "name" in links:
            switch_class = direct_class = links["name"]
            if links["matrix"] and (links["totals"] or links["cpu"]):
                direct_class = f"{links['name']}-p2p"
            if links["totals"] or links["cpu"]:
                classes[switch_class] = {"bandwidth": links["bw"], "latency": LAT_SWITCH}
            if links["matrix"]:
                xgmi = LAT_XGMI3 if family_of(model["model"]).name == "CDNA3" else LAT_XGMI
                classes[direct_class] = {"bandwidth": links["bw"],
                                         "latency": xgmi if links["tag"] == "xgmi" else LAT_DIRECT}
            for c in classes.values():
                if links["eff"]:
                    c["efficiency"] = links["eff"][0]
        for cname, (bw, _) in net_classes.items():
            classes[cname] = {"bandwidth": bw, "latency": LAT_NET}
        for cname, (bw, _) in hop_classes.items():
            classes[cname] = {"bandwidth": bw, "latency": LAT_NET}
        p["link_classes"] = classes
        switches = []
        if links["totals"]:
            members = sorted(links["totals"])
            switches.append({"name": "nvswitch", "class": switch_class, "links": links["totals"][members[0]],
                             "gpus": "all" if len(members) == count else members})
        for k, (cpu, per_gpu) in enumerate(links["cpu"]):
            members = sorted(per_gpu)
            switches.append({"name": f"cpu{k}", "class": switch_class, "links": per_gpu[members[0]],
                             "gpus": "all" if len(members) == count else members})
        if switches:
            p["switches"] = switches
        if links["matrix"]:
            p["direct"] = {"class": direct_class, "matrix": links["matrix"]}
        if nics:
            p["nics"] = [{"class": n["class"], "gpus": n["gpus"], **({"pcie": n["pcie"]} if "pcie" in n else {})}
                         for n in nics]
            p["network"] = {"layout": layout}

        out = _Writer()
        out.comment(f"Node profile imported from the NCCL topology dump {printable(source, 80)} by "
                    f"`colls hardware import`.")
        out.comment("Each figure says where it came from: an element or attribute of the dump, or the NCCL or "
                    "vendor figure assumed.")
        out.comment("GPUs are numbered by <gpu dev> (the CUDA device index):")
        for g in self.gpus:
            rank = g.el.get("rank")
            out.comment(f"  GPU {g.index}: <gpu dev={g.dev}> at <pci busid={printable(g.bus_text, 40)}>"
                        + (f", rank {printable(rank, 20)}" if rank is not None else "")
                        + f", <cpu numaid={printable(g.cpu.get('numaid', '?'), 20)}>")
        out.line(f"name: {_scalar(name)}", "--name" if o["name"] else "from the file name")
        out.line(f"description: {_scalar(p['description'])}")
        out.line("gpu:")
        out.line(f"  model: {_scalar(model['model'])}", model["model_why"])
        out.line(f"  sms: {model['sms']}", model["sms_why"])
        out.line(f"  count: {count}", f"<gpu> elements in the dump: {count}")
        out.line("link_classes:" if classes else "link_classes: {}", None if classes else "a single GPU, no NIC")
        for cname, c in classes.items():
            out.line(f"  {cname}:")
            if cname in net_classes:
                t = net_classes[cname][1]
                kind = {"ib": "InfiniBand NIC (<pci class=0x0207..>)", "eth": "Ethernet NIC (<pci class=0x0200..>)",
                        "net": "NIC"}[t.kind]
                out.line(f"    bandwidth: {_dec(c['bandwidth'])}",
                         f"<net speed={t.speed}> Mb/s = {_dec(c['bandwidth'])} GB/s per {kind} and direction")
            elif cname in hop_classes:
                bw, el = hop_classes[cname]
                out.line(f"    bandwidth: {_dec(bw)}", f"slowest PCIe link between a GPU and its NIC: <pci busid="
                                                       f"{printable(el.get('busid'), 40)} link_speed="
                                                       f"{printable(el.get('link_speed', ''), 20)} link_width="
                                                       f"{printable(el.get('link_width', ''), 8)}>, after line "
                                                       f"encoding (rounded down)")
            else:
                out.line(f"    bandwidth: {_dec(c['bandwidth'])}", links["bw_why"] + (
                    "" if links["bw_why"].startswith("given") else f" ({model['what']})"))
            out.line(f"    latency: {c['latency']!r}", _LAT_WHY[c["latency"]])
            if "efficiency" in c:
                out.line(f"    efficiency: {_dec(c['efficiency'])}", links["eff"][1])
        if switches:
            out.line("switches:")
            for sw in switches:
                if sw["name"] == "nvswitch":
                    per = links["switch"][sorted(links["totals"])[0]]
                    names = list(per)
                    out.comment(f"<{links['tag']} tclass={NVSWITCH_CLASS}>: {len(names)} NVSwitch"
                                f"{'es' if len(names) != 1 else ''} ({_few(names)}), "
                                f"{' + '.join(str(per[s]) for s in names)} = {sw['links']} links per GPU; one switch "
                                f"vertex, as NCCL's topo.cc merges all NVSwitches into one", indent=2)
                else:
                    cpu = links["cpu"][int(sw["name"][3:])][0]
                    out.comment(f"<{links['tag']} tclass={CPU_CLASS}>: NVLinks to <cpu numaid="
                                f"{printable(cpu.get('numaid', '?'), 20)}>, {sw['links']} per GPU", indent=2)
                out.line(f"  - {_flow(sw)}")
        if links["matrix"]:
            out.line("direct:")
            out.comment(f"<{links['tag']}> to other GPUs: links from GPU row to GPU column", indent=2)
            out.line(f"  class: {direct_class}")
            out.line("  matrix:")
            for row in links["matrix"]:
                out.line(f"    - [{', '.join(map(str, row))}]")
        if nics:
            out.line("nics:")
            for j, nic in enumerate(nics):
                t = nic["net"]
                where = (f"<pci busid={printable(t.chain[-1].get('busid'), 40)}>" if t.chain
                         else f"<cpu numaid={printable(t.cpu.get('numaid', '?'), 20)}>")
                out.comment(f"NIC {j}: <net name={printable(t.name, 40)} dev={t.dev}> in {where}; "
                            f"{'; '.join(nic['why'])}" + ("; equally near NICs go to the GPUs in turn, as NCCL's "
                                                          "ncclTopoGetLocalNet spreads them" if nic["split"] else ""),
                            indent=2)
                if "pcie" in nic:
                    out.comment(f"its PCIe path is slower than the NIC: GPU<->NIC hop class {nic['pcie']}", indent=2)
                out.line(f"  - {_flow(p['nics'][j])}")
            out.line(f"network: {{layout: {layout}}}", layout_why)
        text = out.text()
        self._validate(text, p, bool(nics))
        if self.unknown_pcie:
            d.note("PCIe links of unknown speed on GPU-NIC paths (not checked)", len(self.unknown_pcie))
        notes = self.notes + [f"{kind} ({n})" for kind, n in d.notes.items()]
        summary = (f"{count} x {model['model']} ({model['sms']} SMs)"
                   + (f", {switches[0]['links']} NVSwitch link{'s' if switches[0]['links'] > 1 else ''} per GPU"
                      if links["totals"] else "")
                   + (f", direct {links['tag']} links" if links["matrix"] else "")
                   + (f", {len(nics)} NICs, network {layout}" if nics else ", no NIC"))
        return Imported(text, p, summary, notes)

    def _validate(self, text: str, profile: dict, multinode: bool) -> None:
        """The YAML reads back as ``profile`` and loads as a machine of 1 (and 2) nodes."""
        from colls.inputs import hardware as hw
        source = f"the profile imported from {self.d.source}"
        data = hw._read_yaml(source, text)
        if data != _plain(profile):
            raise RuntimeError("the imported profile's YAML does not read back as written")
        check = hw._Checker(source)
        prof = hw._parse_profile(check, data)
        for nodes in (1, 2) if multinode else (1,):
            hw._cluster(check, prof, nodes).validate(source)


# --- small helpers --------------------------------------------------------------------------------------
class _Writer:
    """YAML lines with their comments aligned in one column, wrapped at WIDTH characters."""

    COLUMN, WIDTH = 28, 112

    def __init__(self):
        self.lines: list[str] = []

    def line(self, text: str, why: str | None = None) -> None:
        if not why:
            self.lines.append(text)
            return
        start = max(self.COLUMN, len(text) + 1)
        first, *rest = textwrap.wrap(_ascii(why), max(40, self.WIDTH - start - 2), break_on_hyphens=False)
        self.lines.append(f"{text:<{start - 1}} # {first}")
        self.lines.extend(" " * start + "# " + more for more in rest)

    def comment(self, text: str, indent: int = 0) -> None:
        for piece in textwrap.wrap(_ascii(text), self.WIDTH - indent - 2, break_on_hyphens=False,
                                   subsequent_indent="  "):
            self.lines.append(" " * indent + "# " + piece)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _tag(el) -> str:
    return el.tag if isinstance(el.tag, str) else "?"


def _gcn(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip().lower().split(":")[0]
    return _GCN_NAMES.get(text, text)


def _pcie_link(el) -> Fraction | None:
    """GB/s per direction of the PCIe link above ``el`` after line encoding; None when not given."""
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", el.get("link_speed") or "")
    width = (el.get("link_width") or "").strip()
    if not m or not width.isdigit() or not 0 < int(width) <= 64:
        return None
    rate = Fraction(m.group(1))
    if rate not in _PCIE_ENCODING:
        return None
    return rate * _PCIE_ENCODING[rate] * int(width) / 8


def _net_class(net: _Net) -> str:
    speed = net.speed
    return f"{net.kind}-{speed // 1000}g" if speed % 1000 == 0 else f"{net.kind}-{speed}m"


def _gbits(speed: int) -> str:
    return f"{speed // 1000} Gb/s" if speed % 1000 == 0 else f"{speed} Mb/s"


def _default_name(source: str) -> str:
    stem = source.rsplit(".", 1)[0] if "." in source else source
    name = re.sub(r"[^A-Za-z0-9_+-]+", "-", stem).lstrip("+-")[:100]
    return name or "imported"


def _dec(x: Fraction) -> str:
    """A Fraction whose denominator has only the prime factors 2 and 5, written exactly as a decimal."""
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    digits = 0
    while (x * 10**digits).denominator != 1:
        digits += 1
        if digits > 40:
            raise ValueError(f"{x} has no finite decimal form")
    whole = x * 10**digits
    text = f"{whole.numerator // 10**digits}.{whole.numerator % 10**digits:0{digits}d}"
    return text


def _scalar(text: str) -> str:
    """A YAML scalar that reads back as the string ``text``: plain when that is safe, else double-quoted."""
    try:
        plain = "#" not in text and yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        plain = False
    if plain and text == text.strip() and text.isascii() and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=True)


def _flow(item: dict) -> str:
    parts = []
    for k, v in item.items():
        if isinstance(v, list):
            v = "[" + ", ".join(map(str, v)) + "]"
        parts.append(f"{k}: {v}")
    return "{" + ", ".join(parts) + "}"


def _plain(value):
    """``profile`` as YAML reads it back (Fractions as floats or ints)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else float(value)
    return value


def _ascii(text: str) -> str:
    return printable(text, 400).encode("ascii", "backslashreplace").decode("ascii")


def _few(names: list[str], limit: int = 3) -> str:
    shown = [printable(n, 40) for n in names[:limit]]
    return ", ".join(shown) + (", ..." if len(names) > limit else "")
