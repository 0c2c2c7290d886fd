"""Findings in code inductor generated are reported at the user's compiled line first."""

from __future__ import annotations

from streamrace.analysis import analyze
from streamrace.analysis.generated_code import GeneratedCode
from streamrace.trace.builder import TraceBuilder

GENERATED = "/tmp/torchinductor_root/ab/cabcd1234.py:136 in call"


def test_the_innermost_frame_outside_generated_code_comes_first():
    generated = GeneratedCode()
    frames = [["/tmp/torchinductor_root/ab/cab.py", 136, "call"], ["model.py", 20, "forward"], ["train.py", 5, "main"]]
    assert generated.user_first(frames) == [frames[1], frames[0], frames[2]]
    assert generated.user_first(frames[1:]) == frames[1:], "nothing generated: as it was"
    assert generated.user_first(frames[:1]) == frames[:1], "generated only: as it was"


def test_a_cache_directory_the_header_names_is_generated_code():
    frames = [["/cache/inductor/x/cx.py", 9, "call"], ["model.py", 20, "forward"]]
    assert GeneratedCode().user_first(frames) == frames
    assert GeneratedCode(["/cache/inductor"]).user_first(frames) == [frames[1], frames[0]]
    assert "/cache/inductorial/x.py" not in GeneratedCode(["/cache/inductor"]), "a directory, not a prefix"


def test_inductor_modules_are_generated_code_wherever_the_cache_is():
    generated = GeneratedCode()
    assert "/tmp/tmpex57p9zn/54/c54wnu4phlkeiabzx74qgmey42ks4k6vvb65qat7vtks3qt6bxe3.py" in generated
    assert "/home/me/project/54/c54model.py" not in generated, "a short name is the user's"
    assert "/home/me/project/ab/c54wnu4phlkeiabzx74qgmey42ks4k6vvb65qat7vt.py" not in generated, "folder and hash agree"


def _race_in_compiled_code(**header):
    tb = TraceBuilder(**header)
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        x = tb.alloc(4096, main)
        tb.op("aten::fill_", main, writes=[tb.span(x, 4096)], at="model.py:10 in forward")
        tb.wait_stream(side, main)
        tb.op("triton_poi_fused_add_0", side, writes=[tb.span(x, 4096)], at=[GENERATED, "model.py:20 in forward"])
        tb.op("triton_poi_fused_mul_1", main, writes=[tb.span(x, 4096)], at=[GENERATED, "model.py:21 in forward"])
        tb.wait_stream(main, side)
        tb.free(x)
    return tb.trace()


def test_a_race_in_generated_code_names_the_compiled_line_then_the_generated_file():
    (finding,) = analyze(_race_in_compiled_code()).findings
    later = finding.accesses[-1]
    assert later.location == "model.py:21"
    assert later.stack[1] == ["/tmp/torchinductor_root/ab/cabcd1234.py", 136, "call"]
    assert "model.py:21" in finding.message and "cabcd1234" not in finding.message
