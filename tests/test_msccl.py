"""colls.msccl: the loader's exact text format out, any generator's MSCCL XML in."""

from __future__ import annotations

import copy
import re
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colls.errors import CollsError
from colls.msccl import ALGO_ATTRS, STEP_ATTRS, Finding, emit, parse, read, strtol
from colls.program import STEP_TYPES, Gpu, Program, Step, Threadblock

DATA = Path(__file__).parent / "data"


def small_program() -> Program:
    """Two ranks swapping one chunk (an out-of-place allgather)."""
    gpus = []
    for r in range(2):
        steps = [Step(0, "cpy", "i", 0, "o", r, 1, -1, -1, 0),
                 Step(1, "s", "i", 0, "o", r, 1, -1, -1, 0),
                 Step(2, "r", "o", 1 - r, "o", 1 - r, 1, -1, -1, 0)]
        gpus.append(Gpu(r, 1, 2, 0, [Threadblock(0, 1 - r, 1 - r, 0, steps)]))
    return Program("swap", "allgather", 2, 2, 1, "Simple", 0, 1, 0, 0, gpus, extra={"redop": "sum"})


def without_lines(p: Program) -> Program:
    """The Program with the source line numbers cleared (they are where it was read, not what it is)."""
    q = copy.deepcopy(p)
    for g in q.gpus:
        g.line = None
        for tb in g.tbs:
            tb.line = None
            for s in tb.steps:
                s.line = None
    return q


# --- emit ---------------------------------------------------------------------------------------------

def test_emit_is_the_loaders_text_format():
    text = emit(small_program())
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert "\t" not in text and "<?xml" not in text and "'" not in text
    lines = text.splitlines()
    assert all(re.fullmatch(r" *<[^<>\n]+>", line) for line in lines)       # one element per line
    assert lines[0] == ('<algo name="swap" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" '
                        'coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0" redop="sum">')
    assert lines[1] == '  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">'
    assert lines[2] == '    <tb id="0" send="1" recv="1" chan="0">'
    assert lines[3] == ('      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" '
                        'depid="-1" deps="-1" hasdep="0"/>')
    assert lines[-1] == "</algo>"
    for line in lines:
        if "<step " in line:
            assert re.findall(r'(\w+)="', line) == list(STEP_ATTRS)
    assert emit(small_program()) == text                                     # deterministic


def test_emit_writes_all_ten_attributes_on_a_nop():
    p = small_program()
    p.gpus[0].tbs[0].steps.insert(0, Step(0, "nop", "i", -1, "o", -1, 0, 0, 0, 0))
    nop = [line for line in emit(p).splitlines() if 'type="nop"' in line][0]
    assert re.findall(r'(\w+)="', nop) == list(STEP_ATTRS)


def test_emit_escapes_what_would_break_the_markup():
    p = small_program()
    p.name = 'a "b" <c> & d'
    text = emit(p)
    assert read(text).name == p.name
    assert text.splitlines()[0].count('"') == 2 * (len(ALGO_ATTRS) + 1)


# --- parse --------------------------------------------------------------------------------------------

def test_round_trip_of_a_small_program():
    p = small_program()
    q, findings = parse(emit(p), "swap.xml")
    assert findings == []
    assert without_lines(q) == p
    assert emit(q) == emit(p)
    assert q.gpus[1].line == 9                                     # line numbers are kept
    assert q.gpus[1].tbs[0].steps[2].line == 13


def test_a_program_pickles_and_copies_whole():
    """Steps, threadblocks and GPUs pickle as their fields (colls compile moves programs between processes):
    every field comes back, the line numbers the findings cite included."""
    import pickle
    q, _ = parse(emit(small_program()), "swap.xml")
    for back in (pickle.loads(pickle.dumps(q, protocol=pickle.HIGHEST_PROTOCOL)), copy.deepcopy(q)):
        assert back == q and emit(back) == emit(q)
        assert back.gpus[1].line == 9 and back.gpus[1].tbs[0].line == q.gpus[1].tbs[0].line
        assert back.gpus[1].tbs[0].steps[2].line == 13
        assert type(back.gpus[1].tbs[0].steps[2]) is Step


def test_msccl_tools_file_lacks_three_algo_attributes():
    p, findings = parse((DATA / "msccl_tools_allgather_ring8.xml").read_text(), "ring8.xml")
    assert findings == []
    assert (p.outofplace, p.min_bytes, p.max_bytes) == (None, None, None)
    assert (p.name, p.proto, p.coll, p.inplace, p.ngpus, p.nchunksperloop) == (
        "allgather_ring_1channelsperring", "LL128", "allgather", 1, 8, 8)
    assert len(p.gpus) == 8 and all(len(g.tbs[0].steps) == 8 for g in p.gpus)
    assert p.gpus[3].tbs[0].steps[1] == Step(1, "rcs", "o", 2, "o", 2, 1, -1, -1, 0, line=p.gpus[3].tbs[0].steps[1].line)


def test_taccl_file_keeps_redop_as_extra():
    p, findings = parse((DATA / "taccl_reduce_scatter_ring4.xml").read_text())
    assert findings == []
    assert p.coll == "reduce_scatter" and p.extra == {"redop": "nop"}
    assert 'redop="nop"' in emit(p).splitlines()[0]


def test_missing_attributes_become_none_not_exceptions():
    text = '<algo ngpus="1">\n  <gpu id="0">\n    <tb id="0">\n      <step type="nop"/>\n    </tb>\n  </gpu>\n</algo>\n'
    p, findings = parse(text)
    assert findings == []
    assert (p.name, p.coll, p.nchannels, p.proto, p.min_bytes) == (None, None, None, None, None)
    assert p.gpus[0].i_chunks is None and p.gpus[0].tbs[0].send is None
    s = p.gpus[0].tbs[0].steps[0]
    assert s.type == "nop" and s.s is None and s.cnt is None and s.hasdep is None
    assert emit(p) == text


@pytest.mark.parametrize("text, message", [
    ("this is not xml", r"^x\.xml: not well-formed XML"),
    ("<algo><gpu></algo>", r"^x\.xml: not well-formed XML"),
    ('<program name="a"/>', r"^x\.xml: the root element is <program>, not <algo>"),
])
def test_not_msccl_xml_raises_one_line_collserror(text, message):
    with pytest.raises(CollsError, match=message) as err:
        parse(text, "x.xml")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, message, value", [
    ('<algo ngpus="two"/>', "<algo> ngpus='two' is not an integer; the loader reads 0", 0),
    ('<algo>\n<gpu id="0"><tb id="0"><step s="1.5"/></tb></gpu></algo>', "<step> s='1.5' is not an integer; "
     "the loader reads 1", 1),
    ('<algo><gpu id=""/></algo>', "<gpu> id='' is not an integer; the loader reads 0", 0),
])
def test_a_value_that_is_not_an_integer_is_an_error_finding_with_what_the_loader_reads(text, message, value):
    """Like any other invalid file (exit 1 from colls verify), not an unreadable one: the loader's strtol reads
    its digits, or 0, and the checks go on with that value."""
    program, findings = parse(text, "x.xml")
    hits = [f for f in findings if f.rule == "format-number" and f.severity == "error"]
    assert [f.message for f in hits] == [message]
    assert value in (program.ngpus, program.gpus[0].id if program.gpus else None,
                     program.gpus[0].tbs[0].steps[0].s if program.gpus and program.gpus[0].tbs else None)


# --- the loader's text rules ----------------------------------------------------------------------------

BASE = emit(small_program())


def findings_of(text):
    return parse(text, "f.xml")[1]


def only(findings, rule) -> Finding:
    hits = [f for f in findings if f.rule == rule]
    assert hits, findings
    return hits[0]


def test_xml_declaration():
    f = only(findings_of('<?xml version="1.0" encoding="UTF-8"?>\n' + BASE), "xml-declaration")
    assert f.line == 1 and f.severity == "error"


def test_tab_characters():
    f = only(findings_of(BASE.replace("  <gpu", "\t<gpu")), "format-tab")
    assert f.line == 2 and "2 in the file" in f.message


def test_attributes_spanning_lines():
    text = BASE.replace(' cnt="1" depid="-1" deps="-1" hasdep="0"/>', '\n        cnt="1" depid="-1" deps="-1" hasdep="0"/>', 1)
    f = only(findings_of(text), "format-multiline-tag")
    assert f.line == 4 and "<step>" in f.message
    assert read(text).gpus[0].tbs[0].steps[0].cnt == 1                     # the structure still reads


def test_single_quoted_values():
    f = only(findings_of(BASE.replace('id="1" i_chunks', "id='1' i_chunks")), "format-single-quote")
    assert "<gpu>" in f.message and f.line == 9


@pytest.mark.parametrize("raw, value, why, severity", [
    ("010", 8, "octal", "error"), ("08", 0, "octal", "error"), ("+1", 1, "'+'", "warning"),
    ("0x1", 1, "hexadecimal", "warning"), ("-2", -2, "negative", "warning"),
])
def test_numbers_strtol_misreads(raw, value, why, severity):
    """Octal is a misreading (an error); '+', hex and other negatives are read as meant (a warning)."""
    text = BASE.replace('<step s="1" type="s" srcbuf="i" srcoff="0"', f'<step s="1" type="s" srcbuf="i" srcoff="{raw}"', 1)
    p, findings = parse(text)
    f = only(findings, "format-number")
    assert why in f.message and f"reads {value}" in f.message and f.severity == severity
    assert (f.gpu, f.tb, f.step, f.line) == (0, 0, 1, 5)
    assert p.gpus[0].tbs[0].steps[1].srcoff == value                         # what the runtime would use


@pytest.mark.parametrize("raw, value", [
    ("4294967297", 1), ("2147483648", -2147483648), ("-2147483649", 2147483647),
    ("99999999999999999999", -1),            # strtol saturates at LONG_MAX, whose low 32 bits read -1
    ("0x100000001", 1),
])
def test_numbers_beyond_int32_read_as_the_loaders_int(raw, value):
    """mscclXmlGetAttrInt stores strtol's long in an int: the low 32 bits (minBytes and maxBytes are int64)."""
    text = BASE.replace('<step s="1" type="s" srcbuf="i" srcoff="0"', f'<step s="1" type="s" srcbuf="i" srcoff="{raw}"', 1)
    p, findings = parse(text)
    f = only(findings, "format-number")
    assert "beyond int32" in f.message and f"reads {value}" in f.message and f.severity == "error"
    assert p.gpus[0].tbs[0].steps[1].srcoff == value
    if raw.isdigit():      # maxBytes (an int64) reads the same text as written: only the int is flagged
        p, findings = parse(text.replace('maxBytes="0"', f'maxBytes="{raw}"'))
        assert p.max_bytes == int(raw) and only(findings, "format-number").message == f.message


def test_strtol():
    assert [strtol(x) for x in ("0", "-1", "42", "010", "0x1F", "+7", "09", " 12")] == [0, -1, 42, 8, 31, 7, 0, 12]


def test_more_than_sixteen_attributes():
    extra = " ".join(f'x{i}="1"' for i in range(7))
    text = BASE.replace('redop="sum">', f'redop="sum" {extra}>')       # 11 + 7 = 18
    f = only(findings_of(text), "format-too-many-attrs")
    assert "18 attributes" in f.message and f.line == 1
    assert not [f for f in findings_of(BASE.replace('redop="sum">', 'redop="sum" x="1" y="2" z="3" w="4" v="5">'))
                if f.rule == "format-too-many-attrs"]                          # exactly 16 is fine


def test_double_spaces_count_as_attributes_too():
    # the loader's tokenizer makes an empty attribute of each extra space
    text = BASE.replace('redop="sum">', 'redop="sum"  x="1" y="2" z="3" w="4" v="5">')
    assert only(findings_of(text), "format-too-many-attrs").message.startswith("<algo> has 17")


def test_values_longer_than_the_loader_buffer():
    f = only(findings_of(BASE.replace('name="swap"', f'name="{"n" * 256}"')), "format-long-value")
    assert f.line == 1
    assert not findings_of(BASE.replace('name="swap"', f'name="{"n" * 255}"'))


def test_comments_are_skipped_as_the_loader_skips_them_unless_their_first_word_is_too_long():
    assert not findings_of(BASE.replace("  <gpu id=\"1\"", "  <!-- rank 1 -->\n  <gpu id=\"1\""))
    assert not findings_of(BASE.replace("  <gpu id=\"1\"", "  <!--rank-1-->\n  <gpu id=\"1\""))
    long = "  <!--" + "x" * 260 + " -->\n  <gpu id=\"1\""
    f = only(findings_of(BASE.replace("  <gpu id=\"1\"", long)), "format-comment")
    assert f.severity == "error" and f.line == 9 and "name too long" in f.message


def test_stray_text_and_unknown_elements_and_attributes():
    text = BASE.replace('<gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">',
                        '<gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">\n    <copy i_off="0" o_off="1"/>\n    junk')
    text = text.replace('<step s="2" type="r"', '<step s="2" type="r" note="x"', 1)
    findings = findings_of(text)
    assert only(findings, "format-text").severity == "error"
    unknown = only(findings, "unknown-element")
    assert unknown.severity == "warning" and unknown.gpu == 1 and "<copy>" in unknown.message
    attr = only(findings, "attr-unknown")
    assert (attr.gpu, attr.tb, attr.step, attr.severity) == (0, 0, 2, "warning")


def test_repeated_format_findings_are_summarised():
    text = BASE.replace('" ', '"\n ')                  # 11 tags with attributes on several lines
    findings = [f for f in findings_of(text) if f.rule == "format-multiline-tag"]
    assert len(findings) == 11
    assert all(f.line for f in findings[:10])
    assert findings[10].line is None and findings[10].message.startswith("1 more")


def test_finding_text_names_the_place():
    f = Finding("step-cnt", "cnt=0", 3, 1, 4, 57)
    assert str(f) == "error [step-cnt] gpu 3 tb 1 step 4 (line 57): cnt=0"
    assert str(Finding("deadlock", "x", severity="warning")) == "warning [deadlock]: x"
    assert str(Finding("tb-id", "x", 2, line=9)) == "error [tb-id] gpu 2 (line 9): x"


# --- the law: read(emit(p)) == p ----------------------------------------------------------------------

_int = st.integers(-5, 300)
_maybe_int = st.none() | _int
_text = st.text(alphabet=string.ascii_letters + string.digits + " _-.&<>\"'", max_size=12)


def _steps():
    return st.builds(Step, s=_maybe_int, type=st.none() | st.sampled_from(STEP_TYPES + ("bogus",)),
                     srcbuf=st.none() | st.sampled_from("ios"), srcoff=_maybe_int,
                     dstbuf=st.none() | st.sampled_from("ios"), dstoff=_maybe_int, cnt=_maybe_int,
                     depid=_maybe_int, deps=_maybe_int, hasdep=_maybe_int)


def _tbs():
    return st.builds(Threadblock, id=_maybe_int, send=_maybe_int, recv=_maybe_int, chan=_maybe_int,
                     steps=st.lists(_steps(), max_size=4))


def _gpus():
    return st.builds(Gpu, id=_maybe_int, i_chunks=_maybe_int, o_chunks=_maybe_int, s_chunks=_maybe_int,
                     tbs=st.lists(_tbs(), max_size=3))


programs = st.builds(
    Program, name=st.none() | _text, coll=st.none() | st.sampled_from(["allgather", "reduce_scatter", "x y"]),
    ngpus=_maybe_int, nchunksperloop=_maybe_int, nchannels=_maybe_int,
    proto=st.none() | st.sampled_from(["Simple", "LL", "LL128", "bad"]), inplace=_maybe_int,
    outofplace=_maybe_int, min_bytes=st.none() | st.integers(0, 2**62), max_bytes=st.none() | st.integers(0, 2**62),
    gpus=st.lists(_gpus(), max_size=3),
    extra=st.dictionaries(st.sampled_from(["redop", "root", "note"]), _text, max_size=2))


@settings(max_examples=150, deadline=None)
@given(programs)
def test_read_emit_round_trip(p):
    text = emit(p)
    q, findings = parse(text)
    assert without_lines(q) == p
    assert emit(q) == text
    assert "\t" not in text and not text.startswith("<?xml")
    assert not [f for f in findings if f.rule.startswith("format-") and f.rule != "format-number"]
