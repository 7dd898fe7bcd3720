"""colls verify on files shaped like other tools' (tests/data): judged as the runtime would behave.

Each file is small and written by hand in the style of one generator (MSCCLang in-place files that declare
the unused buffer as 0 chunks, ForestColl's trees with comments in every thread block, TE-CCL's ``<copy>``
elements), or of one runtime behaviour (a hang that only large calls meet). Each has a twin that is really
broken, to show the rule that accepts the first still rejects the second.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from colls.msccl import emit, parse
from colls.program import Gpu, Program, Threadblock
from colls.verify import verify, verify_text
from colls.verify.execution import chunk_effective_bytes, max_allowed_count

DATA = Path(__file__).parent / "data"

from test_verify import at, ring_allgather, step  # noqa: E402  (the shared hand-made programs)


def check(name: str, target: str = "exe", text: str | None = None):
    text = (DATA / name).read_text() if text is None else text
    return verify_text(text, name, target)


@pytest.mark.parametrize("name, coll, modes", [
    ("mscclang_allgather_inplace.xml", "allgather", ["in-place"]),
    ("mscclang_reducescatter_inplace.xml", "reducescatter", ["in-place"]),
    ("mscclang_allreduce_inplace.xml", "allreduce", ["in-place"]),
    ("forestcoll_allreduce_tree3.xml", "allreduce", ["in-place"]),
    ("teccl_allgather_inplace.xml", "allgather", ["in-place"]),
    ("size_dependent_hang.xml", "allgather", ["out-of-place"]),
])
@pytest.mark.parametrize("target", ["exe", "rccl"])
def test_files_the_runtime_runs_correctly_are_valid(name, coll, modes, target):
    report = check(name, target)
    assert report.ok and report.verdict == "valid", report.format()
    assert report.facts["coll"] == coll and report.facts["checked"] == modes
    assert report.format().splitlines()[-1].startswith(f"{name}: VALID for {target}")


def test_unused_buffer_declared_empty_is_fine_but_a_step_using_it_is_refused():
    text = (DATA / "mscclang_allgather_inplace.xml").read_text()
    assert 'i_chunks="0"' in text
    # a step that does read the input, declared as 0 chunks: the loader's bounds check refuses the file
    broken = text.replace('type="s" srcbuf="o" srcoff="0"', 'type="s" srcbuf="i" srcoff="0"', 1)
    report = check("x.xml", text=broken)
    assert report.rules() == {"step-offset"}, report.format()
    assert report.errors[0].effect == "will not load"
    assert "INVALID for exe: will not load" in report.format()


def test_declared_counts_larger_than_the_call_do_not_hide_an_out_of_bounds_step():
    p = ring_allgather()
    for g in p.gpus:
        g.o_chunks = 16                          # declared: the loader lets offsets up to 15 through
    at(p, 0, 2, 0).dstoff = 9                    # but the call's output has 4 chunks
    report = verify(p, "exe")
    assert "step-bounds" in report.rules(), report.format()
    f = [f for f in report.errors if f.rule == "step-bounds"][0]
    assert f.effect == "has undefined behaviour" and "[9, 10)" in f.message
    p = ring_allgather()
    for g in p.gpus:
        g.o_chunks = 16
    assert verify(p, "exe").ok                   # declaring more is harmless in itself


def test_a_hang_only_large_calls_meet_is_an_error_only_where_the_size_range_reaches_it():
    text = (DATA / "size_dependent_hang.xml").read_text()
    ok = check("sdh.xml", text=text)
    assert ok.ok and [f.rule for f in ok.warnings] == ["deadlock"]
    assert "8388609 bytes or more" in ok.warnings[0].message and "never selects" in ok.warnings[0].message
    eff = chunk_effective_bytes("Simple", "allgather")
    assert eff == 2 * 1024 * 1024                # 4 MiB NCCL_BUFFSIZE / 8 slots x 4 slots per primitive
    assert max_allowed_count(8388608, 8, eff) == 2 and max_allowed_count(8388616, 8, eff) == 1
    for max_bytes in ("0", "8388609", "1099511627776"):
        report = check("sdh.xml", text=text.replace('maxBytes="8388608"', f'maxBytes="{max_bytes}"'))
        assert report.rules() == {"deadlock"}, report.format()
        assert all(f.calls and "8388609" in f.calls for f in report.errors)
        assert "loads, but hangs for calls of 8388609" in report.format().splitlines()[-1]
    # a site with a 16 MiB NCCL_BUFFSIZE moves the threshold 4 times higher
    report = verify_text(text.replace('maxBytes="8388608"', 'maxBytes="0"'), "sdh.xml", "exe", buffsize=1 << 24)
    assert all("33554433" in f.calls for f in report.errors) and "NCCL_BUFFSIZE=16777216" in report.format()
    # LL keeps 8 messages in flight: no size hangs
    assert check("sdh.xml", text=text.replace('maxBytes="8388608"', 'maxBytes="0"')
                 .replace('proto="Simple"', 'proto="LL"')).ok


def test_ordering_through_a_chain_of_messages_is_real_ordering():
    report = check("forestcoll_allreduce_tree3.xml")
    assert report.ok and not report.warnings, report.format()      # the loader skips the comments


def _loop_back(dst_first: int) -> Program:
    """gpu 0 sends output chunks [0, 2) to gpu 1, which sends them straight back into [dst_first, +2)."""
    g0 = Gpu(0, 2, 3, 0, [Threadblock(0, 1, -1, 0, [step(0, "s", "o", 0, "o", 0, cnt=2)]),
                          Threadblock(1, -1, 1, 0, [step(0, "r", "o", dst_first, "o", dst_first, cnt=2)])])
    g1 = Gpu(1, 2, 3, 0, [Threadblock(0, 0, 0, 0, [step(0, "rcs", "o", 0, "o", 0, cnt=2)])])
    return Program("loop", "allreduce", 2, 3, 1, "Simple", 1, 0, 0, 0, [g0, g1])


def test_a_chain_of_messages_orders_a_chunk_only_where_it_keeps_its_place():
    # the chunk read at position j comes back to position j: written only after it was read
    assert "race" not in verify(_loop_back(0), "exe").rules()
    # chunk 1 is read at position 1 but written back at position 0, possibly before it was read
    report = verify(_loop_back(1), "exe")
    races = [f for f in report.errors if f.rule == "race"]
    assert races and "output chunk 1" in races[0].message, report.format()
    assert races[0].calls == "in-place calls"


def test_a_nop_without_dependency_is_accepted_and_numbered_as_the_kernel_does():
    p = ring_allgather()
    tb = p.gpus[0].tbs[2]
    tb.steps.insert(0, step(0, "nop", cnt=0))          # the loader drops it
    for i, s in enumerate(tb.steps):
        s.s = i
    report = verify(p, "exe")     # the waits on "tb 2 step 0" name the nop; the kernel waits for the copy
    assert report.ok and report.rules(None) == {"hasdep-missing"}, report.format()
    assert "nop-unanchored" not in verify_text(emit(p), "nop.xml", "exe").rules(None)
    # written by position, the wait names step 1; the kernel never numbers a step of that block 1
    for b in p.gpus[0].tbs:
        for s in b.steps:
            if s.depid == 2:
                s.deps = 1
    report = verify(p, "exe")
    assert "deadlock" in report.rules() and "nop-no-dep" in report.rules(None), report.format()


def test_nops_carrying_dependencies_at_the_end_are_dropped_with_a_warning():
    p = ring_allgather()
    tb = p.gpus[1].tbs[2]
    tb.steps.append(step(1, "nop", cnt=0, depid=1, deps=2))
    report = verify(p, "exe")
    assert report.ok and "nop-trailing" in report.rules(None), report.format()


def test_every_broadcast_and_reduce_file_says_it_serves_one_root():
    g0 = Gpu(0, 1, 1, 0, [Threadblock(0, 2, 1, 0, [step(0, "rcs", "i", 0, "o", 0)])])
    g1 = Gpu(1, 1, 1, 0, [Threadblock(0, 0, -1, 0, [step(0, "s", "i", 0, "o", 0), step(1, "cpy", "i", 0, "o", 0)])])
    g2 = Gpu(2, 1, 1, 0, [Threadblock(0, -1, 0, 0, [step(0, "r", "i", 0, "o", 0)])])
    report = verify(Program("colls-ring-broadcast-root1", "broadcast", 3, 1, 1, "Simple", 0, 1, 0, 0,
                            [g0, g1, g2]), "exe")
    assert report.ok
    f = [f for f in report.warnings if f.rule == "root-fixed"]
    assert f and "root 1" in f[0].message and "whatever its root" in f[0].message


def test_doctype_and_a_zero_chunk_loop_are_never_valid():
    text = emit(ring_allgather())
    for doctype in ("<!DOCTYPE algo>\n", '<!DOCTYPE algo [<!ENTITY x "y">]>\n'):
        report = verify_text(doctype + text, "d.xml", "exe")
        assert "format-doctype" in report.rules() and not report.ok, report.format()
        assert "will not load" in report.format().splitlines()[-1]
    report = verify_text(text.replace('nchunksperloop="4"', 'nchunksperloop="0"'), "z.xml", "exe")
    assert "chunks-per-loop" in report.rules() and not report.ok, report.format()
    assert report.errors[0].effect == "has undefined behaviour"


def test_a_shape_the_model_cannot_follow_is_not_proven():
    p = ring_allgather()
    p.nchunksperloop = 6                        # not a multiple of 4 ranks
    report = verify(p, "exe")
    assert report.errors == [] and report.verdict == "unproven", report.format()
    assert "chunks-mismatch" in report.rules(None)
    assert "NOT PROVEN" in report.format()


def test_the_summary_names_what_the_runtime_does_and_for_which_calls():
    from test_verify import in_place_breaker
    report = verify(in_place_breaker(1, 1), "exe")
    assert report.consequence() == "loads, but computes a wrong result for in-place calls"
    assert all(f.calls == "in-place calls" for f in report.errors)
    p = ring_allgather()
    p.min_bytes = None
    assert verify(p, "exe").consequence() == "will not load"


def test_step_index_off_by_nothing_else_is_a_warning():
    p = ring_allgather()
    at(p, 0, 0, 1).s = 7
    report = verify(p, "exe")
    assert report.ok and report.rules(None) == {"step-index"}


def test_findings_as_json_carry_effect_and_calls():
    import json
    data = json.loads(json.dumps(check("sdh.xml", text=(DATA / "size_dependent_hang.xml").read_text()
                                       .replace('maxBytes="8388608"', 'maxBytes="0"')).to_dict()))
    assert data["verdict"] == "invalid" and data["consequence"].startswith("loads, but hangs")
    f = data["findings"][0]
    assert f["effect"] == "hangs" and "8388609" in f["calls"]
    assert data["facts"]["hangs_for_bytes"][0][0] == 8388609


def test_parser_findings_get_their_rule_effect():
    report = verify_text('<?xml version="1.0"?>\n' + emit(ring_allgather()), "x.xml", "exe")
    assert report.errors[0].effect == "will not load"
    assert re.search(r"error \[xml-declaration\] line 1: will not load: ", str(report.errors[0]))
    assert parse(emit(ring_allgather()))[1] == []


def test_a_text_report_shows_ten_findings_of_a_rule_and_counts_the_rest():
    """ngpus="four" reads as 0, so every gpu id and every peer is out of range: one finding per threadblock.
    The text shows the first ten of each rule and says how many more there are; JSON keeps every one."""
    text = emit(ring_allgather(16)).replace('ngpus="16"', 'ngpus="four"')
    report = verify_text(text, "four.xml", "exe")
    lines = report.format().splitlines()
    per_rule = {rule: sum(1 for f in report.findings if f.rule == rule) for rule in report.rules()}
    assert per_rule["gpu-id"] == 16 and per_rule["tb-peer"] > 10
    for rule, n in per_rule.items():
        more = [line for line in lines if line.startswith(f"error [{rule}]: ") and " more like the " in line]
        assert sum(1 for line in lines if line.startswith(f"error [{rule}]")) == min(n, 10) + len(more)
        assert more == ([f"error [{rule}]: {n - 10} more like the 10 above (--json lists every finding)"]
                        if n > 10 else [])
    assert lines[-1] == report.summary() and len(report.to_dict()["findings"]) == len(report.findings)
    assert report.format(per_rule=1000).count("\n") == len(report.findings)


def test_counts_a_file_may_claim_cost_no_time_to_check():
    """ngpus, a thread block id or a scratch buffer of any size: the checks never range over the number a file
    states. A billion ranks with four <gpu> elements, thread block 2 * 10^9, 2^31 - 1 scratch chunks (more than the
    proof follows: not proven, and why); the loader keeps each in an int, so none is larger."""
    text = emit(ring_allgather())
    report = verify_text(text.replace('ngpus="4"', 'ngpus="1000000000"'), "n.xml", "exe")
    assert "ngpus-mismatch" in report.rules()
    report = verify_text(text.replace('<tb id="2"', '<tb id="2000000000"', 1), "t.xml", "exe")
    assert any("thread block 2 is missing" in f.message for f in report.errors)
    report = verify_text(re.sub(r's_chunks="\d+"', 's_chunks="2147483647"', text), "s.xml", "exe")
    assert report.verdict == "unproven" and report.facts["deadlock_free"]
    assert any("over the 4,194,304 it follows" in f.message for f in report.warnings)
    assert "loads and cannot deadlock, but what it computes was not checked" in report.summary()


def test_a_tag_of_thousands_of_attributes_is_read_as_the_loader_keeps_it():
    """The loader keeps an element's first 16 attributes and drops the rest without a word; past 256 the
    checker reads it the same way (the XML parser's attribute lists take time in the square of their length):
    the algo's own attributes after 16 others are not found, and the lines after it keep their numbers."""
    text = emit(ring_allgather())
    junk = " ".join(f'x{i}="1"' for i in range(5000))
    report = verify_text(text.replace("<algo ", f"<algo {junk} ", 1), "many.xml", "exe")
    assert "format-too-many-attrs" in report.rules() and "algo-attr-missing" in report.rules()
    assert report.consequence() == "will not load"
    moved = text.replace('<gpu id="1"', f'<gpu id="1" {junk}', 1).replace('send="2" recv="-1"', 'send="9" recv="-1"', 1)
    report = verify_text(moved, "gpu.xml", "exe")
    line = next(i for i, x in enumerate(moved.splitlines(), 1) if 'send="9"' in x)
    assert any(f.rule == "tb-peer" and f.line == line for f in report.errors)


def test_a_hang_names_every_size_that_hangs_as_a_published_run_met_it():
    """msccl-tools' all-pairs allreduce (Simple, one channel): each peer's threadblock sends 8 chunks before it
    receives. Calls up to 32 MiB send them as 2 messages, which the FIFO holds; above, as 3 or more, and every
    pair waits on the other. Its published run on 8 x MI300X (bench/published_files.yaml) completed 32 MiB and
    hung at 64 MiB; the report used to name only the smallest hanging range (32-44.7 MB), which no
    power-of-two call meets."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from msccl_files import make
    report = verify_text(make("ar_allpair_simple_x_1"), "ar_allpair_simple_x_1.xml", "rccl")
    assert not report.ok
    assert "wait cycle for calls of 33554433 bytes or more" in report.errors[0].message
    hangs = report.facts["hangs_for_bytes"]
    inside = lambda n: any(lo <= n and (hi is None or n <= hi) for lo, hi in hangs)  # noqa: E731
    assert inside(64 << 20) and not inside(32 << 20)
