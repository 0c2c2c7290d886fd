"""The HTML report in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, which .ci/run installs) driven by selenium through the system
chromedriver. The page is checked through its DOM and what its script says it drew
(``window.streamrace.frame()``); each test saves a screenshot under its tmp_path."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from visual_traces import DSV4_RACE, HOSTILE_NAME, HOSTILE_SCRIPT, REPLAY_RACE, analysed, write_many_ops

from streamrace.report import html
from streamrace.trace import load_trace
from streamrace.trace.builder import TraceBuilder

pytestmark = pytest.mark.browser

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or not Path(CHROMEDRIVER).exists():
        pytest.skip("needs headless Chromium and its chromedriver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,900")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _open(browser: Any, page: Path, drawn: bool = True) -> None:
    """Open ``page`` and wait for its script: until it drew a frame, or (``drawn`` False: a
    page with no view to draw) until it is ready."""
    browser.get(page.as_uri())
    ready = "document.body.dataset.ready === 'true'" + (" && !!window.streamrace.frame()" if drawn else "")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if browser.execute_script("return " + ready):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the page never drew its timeline")
    _no_errors(browser)


def _no_errors(browser: Any) -> None:
    """Nothing went wrong in the page's script (an uncaught error, a refused resource)."""
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors


def _frame(browser: Any) -> dict[str, Any]:
    """The next frame the page draws (it draws on the next animation frame)."""
    browser.execute_async_script("requestAnimationFrame(() => requestAnimationFrame(arguments[0]))")
    _no_errors(browser)
    return browser.execute_script("return window.streamrace.frame()")


def _texts(browser: Any, selector: str) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), (e) => e.textContent)", selector
    )


def _report(tmp_path: Path, trace: Path, name: str) -> Path:
    page = tmp_path / name
    page.write_text(html.render([analysed(trace)]), encoding="utf-8")
    return page


def test_the_dsv4_race_shows_its_lanes_its_finding_and_the_pair(browser: Any, tmp_path: Path) -> None:
    _open(browser, _report(tmp_path, DSV4_RACE, "dsv4.html"))
    lanes = [text.split(" ")[0] for text in _texts(browser, ".lane-label")]
    assert {"main", "kv"} <= set(lanes) and lanes[-1] == "memory"
    (finding,) = _texts(browser, ".finding")
    assert "unsafe-free" in finding and "aten::mul.Tensor on kv" in finding and "aten::mm on main" in finding
    _streams_read_as_named(browser)
    browser.execute_script("document.querySelector('.finding').click()")
    frame = _frame(browser)
    assert frame["view"] == "graph 1 (capture)" and frame["missingEdge"] and frame["block"]
    pair = [(h["access"], h["op"], h["lane"].split(" ")[0]) for h in frame["highlighted"]]
    assert pair == [("read", "aten::mul.Tensor", "kv"), ("write", "aten::mm", "main")]
    assert all(frame["first"] <= h["column"] <= frame["last"] for h in frame["highlighted"]), "both in sight"
    selected = "return document.querySelector('.finding.selected').getAttribute('aria-selected')"
    assert browser.execute_script(selected) == "true"
    involved = [text.split(" ")[0] for text in _texts(browser, ".lane-label.involved")]
    assert sorted(involved) == ["kv", "main"]
    text = browser.find_element("id", "finding-text").text
    assert "[1] error unsafe-free WAR aliasing" in text and "105 | qkv = x @ self.w_qkv" in text
    pair_panel = browser.find_element("id", "pair").text
    assert "qkv = x @ self.w_qkv" in pair_panel and "missing edge" in pair_panel
    assert browser.find_element("id", "timeline").get_attribute("data-highlight") == (
        "aten::mul.Tensor@kv | aten::mm@main"
    )
    assert browser.save_screenshot(str(tmp_path / "dsv4.png"))


def _streams_read_as_named(browser: Any) -> None:
    """The DSV4 race's lanes and finding show each stream by the program's name, its handle
    after it, dimmer and lighter: secondary."""
    names, handles = _texts(browser, ".lane-label .name"), _texts(browser, ".lane-label .handle")
    handle = {e["name"]: f"{e['stream']:#x}" for e in load_trace(DSV4_RACE).events if e["ev"] == "stream"}
    assert names[:2] == ["main", "kv"] and handles[:2] == [handle["main"], handle["kv"]]
    style = "const s = getComputedStyle(document.querySelector(arguments[0])); return [s.color, s.fontWeight];"
    name_style = browser.execute_script(style, ".lane-label .name")
    handle_style = browser.execute_script(style, ".lane-label .handle")
    assert handle_style[0] != name_style[0] and int(handle_style[1]) < int(name_style[1])
    assert _texts(browser, ".finding .pair .name") == ["kv", "main"]
    assert _texts(browser, ".finding .pair .handle") == [handle["kv"], handle["main"]]


def test_the_execution_view_shows_the_replay_that_races(browser: Any, tmp_path: Path) -> None:
    _open(browser, _report(tmp_path, REPLAY_RACE, "x1.html"))
    frame = _frame(browser)
    assert frame["view"] == "execution view: eager work and replays"
    assert any(h["op"] == "aten::mul.Tensor" and h["access"] == "write" for h in frame["highlighted"])
    assert "consumer" in {text.split(" ")[0] for text in _texts(browser, ".lane-label")}
    assert "in graph 1's replay" in browser.find_element("id", "finding-text").text
    views = _texts(browser, "#views button")
    assert any(view.startswith("graph 1 (capture)") for view in views)
    browser.execute_script("document.querySelectorAll('#views button')[1].click()")
    assert _frame(browser)["view"] == "graph 1 (capture)", "another view is a click away"
    assert browser.save_screenshot(str(tmp_path / "x1.png"))


@pytest.mark.parametrize("name", ["execution_X4_buggy", "execution_X5_buggy", "gallery_H4_buggy", "cupy_buggy"])
def test_other_findings_draw_without_a_script_error(browser: Any, tmp_path: Path, name: str) -> None:
    _open(browser, _report(tmp_path, DSV4_RACE.parent / f"{name}.jsonl.gz", f"{name}.html"))
    frame = _frame(browser)
    assert frame["highlighted"], "the finding's accesses are drawn"
    assert browser.find_element("id", "finding-text").text.startswith("[1] error")


def test_a_hostile_trace_runs_no_script_and_shows_its_strings_as_text(browser: Any, tmp_path: Path) -> None:
    tb = TraceBuilder()
    main_s, side = tb.stream(HOSTILE_NAME), tb.stream(HOSTILE_SCRIPT)
    with tb.capture(main_s):
        x = tb.alloc(4096, main_s, at=f"{HOSTILE_SCRIPT}.py:1")
        tb.wait_stream(side, main_s)
        tb.op(HOSTILE_SCRIPT, main_s, writes=[tb.span(x, 4096)], at=f"{HOSTILE_NAME}.py:2")
        tb.op(HOSTILE_NAME, side, reads=[tb.span(x, 4096)], at="<!--.py:3")
        tb.wait_stream(main_s, side)
    trace = tmp_path / "hostile.jsonl"
    tb.write(str(trace))
    _open(browser, _report(tmp_path, trace, "hostile.html"))
    browser.execute_script("document.querySelector('.finding').click()")
    _frame(browser)
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    assert browser.execute_script("return document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert browser.execute_script("return document.scripts.length") == 2, "the data and the page's script, no other"
    lanes = _texts(browser, ".lane-label .name") + _texts(browser, ".lane-label.block-row")
    assert lanes == [HOSTILE_NAME, HOSTILE_SCRIPT, "memory"]
    assert HOSTILE_SCRIPT in browser.find_element("id", "finding-text").text
    assert HOSTILE_NAME in _texts(browser, ".finding")[0]
    assert browser.save_screenshot(str(tmp_path / "hostile.png"))


def test_100k_ops_draw_a_bounded_page_zoomed_out_and_in(browser: Any, tmp_path: Path) -> None:
    _open(browser, _report(tmp_path, write_many_ops(tmp_path / "many.jsonl.gz", 100_000), "many.html"))
    assert browser.execute_script("return document.getElementsByTagName('*').length") < 200
    browser.execute_script("document.getElementById('fit').click()")
    frame = _frame(browser)
    width = browser.execute_script("return document.getElementById('area').clientWidth")
    assert frame["last"] - frame["first"] > 50_000, "zoomed out, most of the trace is in sight"
    assert frame["drawn"] <= 4 * (width + 1), "zoomed out, one rectangle per pixel and lane at most"
    browser.execute_script("document.querySelector('.finding').click()")
    frame = _frame(browser)
    assert frame["drawn"] <= frame["last"] - frame["first"] + 1 < 1000, "zoomed in, only the columns in sight"
    assert [h["op"] for h in frame["highlighted"]] == ["aten::racing_write", "aten::racing_read"]
    assert browser.save_screenshot(str(tmp_path / "many.png"))


def test_an_empty_trace_zooms_scrolls_and_hovers_without_a_script_error(browser: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"format": "streamrace-trace", "version": 1}\n')
    _open(browser, _report(tmp_path, empty, "empty.html"), drawn=False)
    assert browser.execute_script("return document.querySelectorAll('#views button').length") == 0, "no view"
    for button in ("zoom-in", "zoom-out", "fit"):
        browser.execute_script("document.getElementById(arguments[0]).click()", button)
    browser.execute_script(
        "const s = document.getElementById('scroller');"
        "s.dispatchEvent(new WheelEvent('wheel', {ctrlKey: true, deltaY: -1, bubbles: true, cancelable: true}));"
        "s.dispatchEvent(new MouseEvent('mousemove', {clientX: 10, clientY: 10, bubbles: true}));"
        "window.dispatchEvent(new Event('resize'));"
    )
    _frame(browser)  # fails on any uncaught error the clicks raised
    assert browser.execute_script("return window.streamrace.frame()") is None, "nothing was drawn"
    assert "Nothing was recorded" in _texts(browser, "#findings li")[0]
    assert browser.find_element("id", "position").text == "no view to draw"
    assert not browser.find_element("id", "zoom-in").is_enabled(), "zoom has nothing to act on"


LONG_OP = "aten::" + "very_long_operator_name_" * 12
LONG_STREAM = "a_stream_the_program_named_at_great_length_" * 4

# Every element of the sidebar inside it, and no element's content wider than its box unless
# the element ends it in an ellipsis by design.
_SIDEBAR_OVERFLOW = """
const side = document.getElementById('side'), box = side.getBoundingClientRect(), bad = [];
for (const e of side.querySelectorAll('*')) {
  const r = e.getBoundingClientRect(), s = getComputedStyle(e);
  if (r.left < box.left - 0.5 || r.right > box.right + 0.5) bad.push('outside: ' + e.className + ' ' + e.tagName);
  const clipped = s.textOverflow === 'ellipsis' && s.overflow === 'hidden';
  if (!clipped && e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0) {
    bad.push('overflows: ' + e.className + ' ' + e.tagName);
  }
}
return bad;
"""

# How many lines each occurrence of a name is laid out on (a name cut by a wrap: more than one).
_LINES_OF = """
const out = [], walker = document.createTreeWalker(document.getElementById(arguments[1]), NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  for (let at = node.data.indexOf(arguments[0]); at >= 0; at = node.data.indexOf(arguments[0], at + 1)) {
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + arguments[0].length);
    out.push(new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top))).size);
  }
}
return out;
"""


def test_long_names_stay_in_the_sidebar_on_one_line_and_tags_keep_off_the_axis(browser: Any, tmp_path: Path) -> None:
    tb = TraceBuilder()
    main_s, side = tb.stream("main"), tb.stream(LONG_STREAM)
    with tb.capture(main_s):
        x = tb.alloc(4096, main_s)
        tb.wait_stream(side, main_s)
        tb.op(LONG_OP, main_s, writes=[tb.span(x, 4096)])
        tb.op(LONG_OP + "_read", side, reads=[tb.span(x, 4096)])
        tb.wait_stream(main_s, side)
    trace = tmp_path / ("long_" * 30 + ".jsonl")
    tb.write(str(trace))
    _open(browser, _report(tmp_path, trace, "long.html"))
    browser.execute_script("document.querySelector('.finding').click()")
    frame = _frame(browser)
    assert browser.execute_script(_SIDEBAR_OVERFLOW) == []
    for name in (LONG_OP, LONG_STREAM):
        lines = browser.execute_script(_LINES_OF, name, "findings")
        assert lines and all(n == 1 for n in lines), f"{name[:20]}... is cut by a wrap: {lines}"
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    # The access's tag on the first lane sits above that lane: below the axis's labels, so that
    # it can hide none of them wherever the columns fall.
    assert frame["axis"] and len(frame["tags"]) == 3, "two access tags and the missing edge's"
    labels_bottom = max(label["y"] + label["h"] for label in frame["axis"])
    assert all(tag["y"] >= labels_bottom for tag in frame["tags"]), (frame["tags"], frame["axis"])
    assert browser.save_screenshot(str(tmp_path / "long.png"))
