"""Program <-> MSCCL XML text, in the exact format the runtimes' loader reads.

The loader (Azure/msccl-executor-nccl ``src/misc/msccl/msccl_parser.cc``, the same file in ROCm/rccl) is
not an XML parser. It reads one character at a time and accepts less than XML allows:

- an attribute list ends at the first character that is not a space: a tab or a line break inside a tag
  is "expected >", so every element's attributes must sit on one line, separated by single spaces;
- a value must be opened by a quote and is read up to the next double quote (``mscclXmlGetValue``):
  single quotes swallow the rest of the tag;
- between elements only spaces and line breaks may appear (a tab or any text is "expecting '<'"), so an
  ``<?xml ...?>`` declaration fails ("expected >, got '?'");
- it keeps at most ``MSCCL_MAX_ATTR_COUNT`` = 16 attributes per element and silently drops the rest (a
  double space counts as an empty attribute), and a value longer than ``MSCCL_MAX_STR_LEN`` = 255
  characters overruns its buffer (``msccl_parser.h``);
- numbers go through C ``strtol(str, NULL, 0)``: ``010`` is octal 8, ``0x10`` is 16, ``+3`` is 3.

:func:`emit` writes exactly that format. :func:`parse` reads any generator's file (ours, msccl-tools',
TACCL's, ForestColl's) with lxml for the structure, scans the raw text for the loader's format rules,
and returns the :class:`~colls.program.Program` the runtime would see plus a list of :class:`Finding`.
Missing attributes become ``None`` in the Program; :mod:`colls.verify` reports them.
"""

from __future__ import annotations

import io

import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass

from lxml import etree

from colls.errors import CollsError, printable, xml_reason
from colls.program import Gpu, Program, Step, Threadblock

# The loader's limits on the text itself (msccl_parser.h).
MAX_ATTRS = 16      # MSCCL_MAX_ATTR_COUNT: further attributes are dropped without a word
MAX_STR_LEN = 255   # MSCCL_MAX_STR_LEN: a longer value overruns the loader's buffer

# Attribute order of each element, as emitted (and as the runtimes' own examples write them).
ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
              "minBytes", "maxBytes")
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")

# XML attribute -> Program field (where they differ).
ALGO_FIELDS = {"minBytes": "min_bytes", "maxBytes": "max_bytes"}
_STEP_STRINGS = frozenset({"type", "srcbuf", "dstbuf"})
_GPU_SET, _TB_SET, _STEP_SET = frozenset(GPU_ATTRS), frozenset(TB_ATTRS), frozenset(STEP_ATTRS)
_STEP_KEYS = list(STEP_ATTRS)
_STEP_STRING_POS = tuple(i for i, key in enumerate(STEP_ATTRS) if key in _STEP_STRINGS)


@dataclass(frozen=True)
class Finding:
    """One problem found in a file or a Program.

    ``rule`` is a stable id (``"algo-attr-missing"``, ``"deadlock"``, ...); ``gpu``/``tb``/``step`` locate it
    (None where it concerns a whole level), ``line`` is the source line where known. Only ``"error"``
    findings make a file invalid; ``"warning"`` findings are worth reading but harmless to the runtime.
    """

    rule: str
    message: str
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None
    line: int | None = None
    severity: str = "error"
    effect: str | None = None      # what the runtime does with the file ("will not load", "hangs", ...)
    calls: str | None = None       # which calls it concerns ("in-place calls", "calls above 2097152 bytes")

    @property
    def where(self) -> str:
        parts = []
        for name in ("gpu", "tb", "step"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name} {value}")
        text = " ".join(parts)
        if self.line is not None:
            text = f"{text} (line {self.line})" if text else f"line {self.line}"
        return text

    def to_dict(self) -> dict:
        return {"rule": self.rule, "severity": self.severity, "effect": self.effect, "calls": self.calls,
                "message": self.message, "gpu": self.gpu, "tb": self.tb, "step": self.step, "line": self.line}

    def __str__(self) -> str:
        where = self.where
        head = f"{self.severity} [{self.rule}]"
        head = f"{head} {where}:" if where else f"{head}:"
        if self.severity == "error" and self.effect:
            head += f" {self.effect}" + (f" ({self.calls})" if self.calls else "") + ":"
        return f"{head} {self.message}"


# --------------------------------------------------------------------------------------------------
# emit
# --------------------------------------------------------------------------------------------------

def _text(value) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("\t", " ").replace("\n", " ").replace("\r", " "))


def _attrs(pairs) -> str:
    return " ".join(f'{key}="{_text(value)}"' for key, value in pairs if value is not None)


_PLAIN_WORDS = frozenset({"i", "o", "s", *("s r rcs rrs rrc rrcs cpy re nop".split())})


def _step_line(st) -> str:
    """One ``<step>`` line; the common case (ten plain values, as lowering makes them) without the
    general path's per-value escaping, which a 250k-step program would pay four million times."""
    if (st.type in _PLAIN_WORDS and st.srcbuf in _PLAIN_WORDS and st.dstbuf in _PLAIN_WORDS
            and all(type(v) is int for v in (st.s, st.srcoff, st.dstoff, st.cnt, st.depid, st.deps, st.hasdep))):
        return (f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                f'deps="{st.deps}" hasdep="{st.hasdep}"/>')
    return f"      <step {_attrs((a, getattr(st, a)) for a in STEP_ATTRS)}/>"


def emit(program: Program) -> str:
    """The loader's exact text for ``program``: deterministic, one element per line, ends with a newline.

    Attributes whose value is ``None`` are left out (a Program read from a file that lacked them stays
    without them); everything else is written in the order of ``ALGO_ATTRS`` ... ``STEP_ATTRS``, the
    algo's ``extra`` attributes last.
    """
    algo = [(a, getattr(program, ALGO_FIELDS.get(a, a))) for a in ALGO_ATTRS]
    algo += [(k, v) for k, v in program.extra.items() if k not in ALGO_ATTRS]
    lines = [f"<algo {_attrs(algo)}>"]
    for gpu in program.gpus:
        lines.append(f"  <gpu {_attrs((a, getattr(gpu, a)) for a in GPU_ATTRS)}>")
        for tb in gpu.tbs:
            lines.append(f"    <tb {_attrs((a, getattr(tb, a)) for a in TB_ATTRS)}>")
            for step in tb.steps:
                lines.append(_step_line(step))
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# parse
# --------------------------------------------------------------------------------------------------

FORMAT_CAP = 10    # findings of one format rule listed before a summary
ADVICE_CAP = 3     # warnings of one rule (ignored elements, attributes) listed before a summary

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_PI = re.compile(r"<\?[^>]*>")
_DECLARATION = re.compile(r"<!(DOCTYPE|\[CDATA\[|[A-Z]+|--)")
_LOADER_TOKEN = re.compile(r"[^ >/\n\r]*")      # what mscclXmlGetToken reads as an element name
_MULTILINE_TAG = re.compile(r"<([A-Za-z_][^\s>/]*+)[^>\n\r]*+[\n\r]")
_QUOTE_TAG = re.compile(r"<[A-Za-z_][^>']*+'")
_ATTR_VALUE = re.compile(r"""=\s*("[^"]*"|'[^']*')""")
_LONG_TOKEN = re.compile(r'="[^"]{%d}' % (MAX_STR_LEN + 1))   # a value over the loader's buffer
_MANY_SPACES = re.compile(r"<(?:[^> ]*+ ){%d}" % (MAX_ATTRS + 1))
# a tag with more attributes than this is read as the loader reads it, its first MAX_ATTRS alone: the XML
# parser's attribute lists take time in the square of their length (100,000 attributes: minutes)
ABSURD_ATTRS = 256
_ABSURD_TAG = re.compile(r"<(?:[^> ]*+ ){%d}" % (ABSURD_ATTRS + 1))
_XML_ATTR = re.compile(r"""\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|'[^']*')""")


def _loader_view(text: str) -> str:
    """``text`` with every tag of more than :data:`ABSURD_ATTRS` attributes cut to its first :data:`MAX_ATTRS`,
    as the loader keeps them (the rest dropped silently, reported by ``format-too-many-attrs``); the lines
    stay where they were."""
    out, pos = [], 0
    for m in _ABSURD_TAG.finditer(text):
        if m.start() < pos:
            continue
        end = text.find(">", m.start())
        if end < 0:
            break
        tag = text[m.start():end + 1]
        name = re.match(r"<[^\s>/]*", tag).group(0)
        attrs = list(_XML_ATTR.finditer(tag, len(name)))
        if len(attrs) <= ABSURD_ATTRS:
            continue
        kept = "".join(a.group(0) for a in attrs[:MAX_ATTRS])
        rest = tag[attrs[-1].end():]
        out += [text[pos:m.start()], name, kept, "\n" * (tag.count("\n") - kept.count("\n")), rest]
        pos = end + 1
    return "".join(out) + text[pos:] if out else text


def _tag_at(text: str, pos: int) -> str:
    """The element name of the tag that contains ``pos``, as ``<name>``."""
    start = text.rfind("<", 0, pos + 1)
    m = re.match(r"<([^\s>/]*)", text[start:start + MAX_STR_LEN + 2]) if start >= 0 else None
    return f"<{m.group(1)}>" if m else "a tag"


_INT_LITERAL = re.compile(r"\s*[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)")
_PLAIN_DECIMAL = re.compile(r"0|-?[1-9][0-9]*")


INT_MAX = 2**31 - 1
# attributes the loader reads with strtoll into an int64_t (mscclXmlGetAttrInt64); every other one with
# strtol into an int (mscclXmlGetAttrInt: ``*value = strtol(str, NULL, 0)``), msccl_parser.cc / rccl's
# msccl_parser.cc
_INT64_ATTRS = frozenset({"minBytes", "maxBytes"})


def as_int(value: int) -> int:
    """What an int holds after ``*value = strtol(...)``: strtol saturates at the 64-bit long's range, and the
    conversion to a 32-bit int keeps the low 32 bits (two's complement, as GCC and Clang convert)."""
    value = max(-2**63, min(2**63 - 1, value))
    return (value + 2**31) % 2**32 - 2**31


def strtol(text: str) -> int:
    """What C ``strtol(text, NULL, 0)`` returns: base from the prefix, reading as far as digits go."""
    s = text.lstrip()
    sign = 1
    if s and s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s[:2].lower() == "0x" and len(s) > 2 and s[2] in "0123456789abcdefABCDEF":
        base, s = 16, s[2:]
    elif s[:1] == "0":
        base = 8
    else:
        base = 10
    digits = "0123456789abcdef"[:base]
    n = 0
    for ch in s.lower():
        if ch not in digits:
            break
        n = n * base + digits.index(ch)
    return sign * n


class _Reader:
    """Reads one file into a Program, collecting findings; one instance per call of :func:`parse`."""

    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self.findings: list[Finding] = []
        self.plain: dict[str, int] = {}    # plain decimal text -> value (the fast path of integer())
        self.advice: dict[str, int] = {}   # warnings per rule so far

    def fail(self, message: str, line: int | None = None):
        at_line = f" (line {line})" if line and "line" not in message else ""
        raise CollsError(f"{self.source}: {message}{at_line}")

    def add(self, rule, message, gpu=None, tb=None, step=None, *, line=None, severity="error"):
        if severity != "error":               # advice about ignored elements and attributes: a few suffice
            seen = self.advice[rule] = self.advice.get(rule, 0) + 1
            if seen > ADVICE_CAP:
                return
        self.findings.append(Finding(rule, message, gpu, tb, step, line, severity))

    def summarize_advice(self):
        for rule, count in sorted(self.advice.items()):
            if count > ADVICE_CAP:
                self.findings.append(Finding(rule, f"{count - ADVICE_CAP} more like this", severity="warning"))

    # --- the loader's text rules, on the raw text ----------------------------------------------------
    def scan_text(self):
        """The loader's text rules, checked with whole-text scans (fast on 30 MB files)."""
        text = self.text
        hits = []                                   # (position, rule, message, severity)
        if text.startswith("\ufeff"):
            hits.append((0, "format-text", "the file starts with a byte-order mark; the loader expects '<' "
                         "(\"XML Parse error : expecting '<'\")", "error"))
        tab = text.find("\t")
        if tab >= 0:
            hits.append((tab, "format-tab", f"tab character ({text.count(chr(9))} in the file): the loader "
                         "accepts only spaces and line breaks between elements and attributes", "error"))
        for m in _COMMENT.finditer(text):        # the loader skips comments, once it has read "<!--word"
            word = _LOADER_TOKEN.match(text, m.start() + 1)
            if word and word.end() - word.start() >= MAX_STR_LEN:
                hits.append((m.start(), "format-comment", f"a comment starting with a word of {word.end() - m.start()} "
                             f"characters: the loader reads it as an element name of at most {MAX_STR_LEN - 1} "
                             "(\"name too long\")", "error"))
        for m in _DECLARATION.finditer(text):
            if m.group(1) == "DOCTYPE":
                hits.append((m.start(), "format-doctype", "a <!DOCTYPE ...> declaration: the loader reads it as an "
                             "element named !DOCTYPE that is never closed (\"unterminated !DOCTYPE\")", "error"))
            elif not text.startswith("<!--", m.start()):
                hits.append((m.start(), "format-text", f"{text[m.start():m.start() + 12]!r}...: the loader cannot "
                             "read markup declarations or CDATA", "error"))
        for m in _PI.finditer(text):
            if text.startswith("<?xml", m.start()):
                hits.append((m.start(), "xml-declaration", "the file has an <?xml ...?> declaration; the loader "
                             "fails on it (\"XML Parse : expected >, got '?'\")", "error"))
            else:
                hits.append((m.start(), "format-text", f"processing instruction {m.group(0)[:20]!r}: the loader "
                             "cannot read it", "error"))
        for m in _MULTILINE_TAG.finditer(text):
            hits.append((m.start(), "format-multiline-tag", f"the attributes of <{m.group(1)}> span several "
                         "lines; the loader reads an element's attributes from one line (\"expected >\")", "error"))
        for m in _QUOTE_TAG.finditer(text):         # tags with a ' somewhere: is it a value's quote?
            end = text.find(">", m.start())
            values = _ATTR_VALUE.findall(text, m.start(), end if end >= 0 else len(text))
            if any(v.startswith("'") for v in values):
                hits.append((m.start(), "format-single-quote", f"{_tag_at(text, m.start() + 1)} has a "
                             "single-quoted value; the loader reads a value up to the next double quote", "error"))
        for m in _LONG_TOKEN.finditer(text):
            hits.append((m.start(), "format-long-value", f"{_tag_at(text, m.start())} has a value "
                         f"longer than {MAX_STR_LEN} characters, the loader's buffer (MSCCL_MAX_STR_LEN)", "error"))
        for m in _MANY_SPACES.finditer(text):     # candidates: every attribute slot starts at a space
            end = text.find(">", m.start())
            count = _loader_attr_count(text[m.start():end + 1]) if end >= 0 else None
            if count is not None and count > MAX_ATTRS:
                hits.append((m.start(), "format-too-many-attrs", f"{_tag_at(text, m.start() + 1)} has {count} "
                             f"attributes; the loader keeps the first {MAX_ATTRS} and silently drops the rest",
                             "error"))
        hits.sort(key=lambda h: h[0])
        shown: dict[str, int] = {}
        pos, line = 0, 1
        for at, rule, message, severity in hits:
            shown[rule] = shown.get(rule, 0) + 1
            if shown[rule] > FORMAT_CAP:
                continue
            line += text.count("\n", pos, at)
            pos = at
            self.add(rule, message, line=line, severity=severity)
        for rule, count in shown.items():
            if count > FORMAT_CAP:
                self.add(rule, f"{count - FORMAT_CAP} more places break this rule")

    # --- values ------------------------------------------------------------------------------------
    def integer(self, elem, key: str, where: tuple = (None, None, None), raw: str | None = None) -> int | None:
        """The value the loader reads (C strtol) for an integer attribute; None when it is absent."""
        if raw is None:
            raw = elem.get(key)
            if raw is None:
                return None
        value = self.plain.get(raw)       # most values repeat: "-1", "0", small offsets
        if value is not None:
            return value
        if raw == "-1" or (raw[:1] != "-" and _PLAIN_DECIMAL.fullmatch(raw)):
            value = int(raw)
            if value <= INT_MAX:          # only values every attribute reads as written are remembered
                self.plain[raw] = value
                return value
            if key in _INT64_ATTRS:
                return value              # the checks of minBytes and maxBytes say what the loader makes of it
        line = elem.sourceline
        value = strtol(raw)
        loaded = value if key in _INT64_ATTRS else as_int(value)
        if not _INT_LITERAL.fullmatch(raw):
            # the loader reads it with strtol all the same (digits as far as they go, else 0): an invalid file,
            # like any other, whose checks then run on the value the loader gets
            self.add("format-number", f"<{elem.tag}> {key}={raw!r} is not an integer; the loader reads {loaded}",
                     where[0], where[1], where[2], line=line)
            return loaded
        if loaded != value:
            self.add("format-number", f"<{elem.tag}> {key}=\"{printable(raw, 40)}\" is beyond int32: the loader "
                     f"keeps strtol's value in an int and reads {loaded}", where[0], where[1], where[2], line=line)
            return loaded
        body = raw.strip().lstrip("+-")
        severity = "warning"                  # read as meant, only spelled unusually
        if body[:2].lower() == "0x":
            why = "hexadecimal"
        elif body.startswith("0") and len(body) > 1:
            why = "leading zero: strtol reads the number as octal"
            severity = "error"
        elif raw.strip().startswith("+"):
            why = "explicit '+' sign"
        elif value < -1:
            why = "negative numbers other than -1 have no meaning in MSCCL XML (the checks of this field decide)"
        else:
            why = "not plain decimal"
            severity = "error"
        self.add("format-number", f"<{elem.tag}> {key}=\"{raw}\": {why}; the loader reads {value}",
                 where[0], where[1], where[2], line=line, severity=severity)
        return value

    def unknown_attrs(self, elem, known, where: tuple, keys=None):
        keys = elem.keys() if keys is None else keys
        if known.issuperset(keys):
            return
        for key in keys:
            if key not in known:
                self.add("attr-unknown", f"<{elem.tag}> attribute {key!r} is not read by the runtime and "
                         "is dropped", *where, line=elem.sourceline, severity="warning")

    def children(self, elem, tag: str, where: tuple):
        """The ``tag`` children of ``elem``; other elements and stray text are findings."""
        out = []
        texts = [(elem.text, elem)]
        for child in elem:
            texts.append((child.tail, child))
            if child.tag == tag:
                out.append(child)
            elif isinstance(child.tag, str):       # not a comment or processing instruction
                self.add("unknown-element", f"<{child.tag}> inside <{elem.tag}> is ignored by the runtime "
                         f"(it reads only <{tag}> here)", *where, line=child.sourceline, severity="warning")
        for text, node in texts:
            if text and not text.isspace():
                self.add("format-text", f"text {text.strip()[:20]!r} inside <{elem.tag}>: the loader "
                         "expects only elements (\"expecting '<'\")", *where, line=node.sourceline)
        return out

    # --- structure ---------------------------------------------------------------------------------
    def read(self) -> Program:
        """The Program, read as the parser goes: each ``<gpu>`` is made into a Gpu as soon as it is closed and
        its elements freed (a 1,024-rank file's element tree alone would take gigabytes)."""
        self.scan_text()
        events = etree.iterparse(io.BytesIO(_loader_view(self.text).encode("utf-8")), events=("start", "end"),
                                 resolve_entities=False, huge_tree=True)
        root = program = None
        depth = 0
        plain_get = self.plain.get
        try:
            for event, elem in events:
                if event == "start":
                    if depth == 0:
                        root = elem
                        program = self.algo(root)
                    depth += 1
                    continue
                depth -= 1
                if depth == 1 and elem.tag == "gpu":
                    if not program.gpus:
                        mark = len(self.findings)  # the findings about <algo>'s own children go before
                    program.gpus.append(self.gpu(elem, plain_get))
                    elem.clear(keep_tail=True)
        except etree.XMLSyntaxError as e:
            self.fail(f"not well-formed XML: {xml_reason(e.msg)}", getattr(e, "lineno", None))
        if root is None:
            self.fail("not well-formed XML: no element")
        if root.tail and not root.tail.isspace():
            self.add("format-text", "text after </algo>", line=root.sourceline)
        after = self.findings[mark:] if program.gpus else []
        del self.findings[len(self.findings) - len(after):]
        self.children(root, "gpu", (None, None, None))     # stray elements and text between the gpus
        self.findings += after
        return program

    def algo(self, root) -> Program:
        """The Program's ``<algo>`` attributes (its gpus come as they are read)."""
        if root.tag != "algo":
            self.fail(f"the root element is <{root.tag}>, not <algo>: not an MSCCL algorithm", root.sourceline)
        ints = {ALGO_FIELDS.get(key, key): self.integer(root, key)
                for key in ("nchannels", "nchunksperloop", "ngpus", "inplace", "outofplace", "minBytes", "maxBytes")}
        extra = {k: v for k, v in root.items() if k not in ALGO_ATTRS}
        return Program(name=root.get("name"), coll=root.get("coll"), proto=root.get("proto"),
                       gpus=[], extra=extra, **ints)

    def gpu(self, g, plain_get) -> Gpu:
        gid = self.integer(g, "id")
        where = (gid, None, None)
        self.unknown_attrs(g, _GPU_SET, where)
        gpu = Gpu(gid, *(self.integer(g, key, where) for key in GPU_ATTRS[1:]), tbs=[], line=g.sourceline)
        for t in self.children(g, "tb", where):
            tid = self.integer(t, "id", where)
            where = (gid, tid, None)
            self.unknown_attrs(t, _TB_SET, where)
            tb = Threadblock(tid, *(self.integer(t, key, where) for key in TB_ATTRS[1:]), steps=[],
                             line=t.sourceline)
            for position, s in enumerate(self.children(t, "step", where)):
                keys = s.keys()
                if keys == _STEP_KEYS:                 # the usual order: read the values positionally
                    raws = s.values()
                else:
                    attrs = dict(zip(keys, s.values()))
                    self.unknown_attrs(s, _STEP_SET, (gid, tid, position), keys)
                    raws = [attrs.get(key) for key in STEP_ATTRS]
                values = list(map(plain_get, raws))      # known integers in one C-level pass
                for i in _STEP_STRING_POS:
                    values[i] = raws[i]
                if None in values:                          # absent, or not yet seen
                    for i, raw in enumerate(raws):
                        if values[i] is None and raw is not None:
                            values[i] = self.integer(s, STEP_ATTRS[i], (gid, tid, position), raw)
                tb.steps.append(Step(*values, line=s.sourceline))
            gpu.tbs.append(tb)
            where = (gid, None, None)
        return gpu


def _loader_attr_count(tag: str) -> int | None:
    """How many attribute slots the loader's tokenizer fills for one single-line tag (``mscclXmlGetNode``).

    It counts as the loader does: a double space or a space before ``/>`` makes an empty attribute too.
    Returns None for text the tokenizer would reject anyway (reported by other rules).
    """
    if "\n" in tag or "\r" in tag:
        return None
    i, n = 1, len(tag)
    while i < n and tag[i] not in " >/":
        i += 1
    if i >= n:
        return None
    c = tag[i]
    i += 1
    count = 0
    while c == " ":
        while True:
            if i >= n:
                return count
            ch = tag[i]
            i += 1
            if ch == "=":
                if i >= n or tag[i] != '"':
                    return None
                end = tag.find('"', i + 1)
                if end < 0 or end + 1 >= n:
                    return None
                i = end + 1
                c = tag[i]
                i += 1
                break
            if ch in " >/":
                c = ch
                break
        count += 1
    return count


@contextmanager
def paused_gc():
    """Pause the cyclic garbage collector while building many acyclic objects (a 64-rank program has
    ~250k steps: the collector would rescan them all, repeatedly, for nothing). Restores its state."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse(text: str, source: str = "<string>") -> tuple[Program, list[Finding]]:
    """Read MSCCL XML text into the Program the runtime would load, and the format findings.

    Raises :class:`CollsError` (``"<source>: ..."``, one line) when the text is not XML, has no ``<algo>``
    root, or has a value that is not an integer where the runtime needs one. Everything else (missing
    attributes, the loader's text rules) is a :class:`Finding`, never an exception.
    """
    reader = _Reader(text, source)
    with paused_gc():
        program = reader.read()
    reader.summarize_advice()
    return program, reader.findings


def read(text: str, source: str = "<string>") -> Program:
    """The Program alone (``parse`` without the findings)."""
    return parse(text, source)[0]
