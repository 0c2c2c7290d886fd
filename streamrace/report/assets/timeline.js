"use strict";
// The streamrace HTML report (streamrace/report/html.py). Trace strings reach the page only
// through textContent and the canvas's fillText: never as markup.
(function () {
  const data = JSON.parse(document.getElementById("streamrace-data").textContent);
  // The axis band is tall enough for its labels above the callout an access on the first lane
  // puts over that lane: otherwise the callout hides the labels.
  const AXIS = 36, AXIS_TEXT = 8, ROW = 30, BLOCK_ROW = 26, MIN_COL = 1 / 64, MAX_COL = 160, MAX_SPACER = 8e6;
  const COLORS = { op: "#4a7fd4", kernel: "#8e6bd8", replay: "#e09a2a", record: "#2f9e44", wait: "#2f9e44" };
  const BAD = "#d62728", EDGE = "#2f9e44";
  const $ = (id) => document.getElementById(id);
  const el = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };

  // Columns: seqs come as differences; names and sites index the trace's tables.
  for (const view of data.views) {
    let seq = 0;
    view.seqs = view.seq.map((d) => (seq += d));
    view.columns = view.seqs.length;
  }

  const state = { view: null, colW: 12, finding: null, frame: null, pending: false };
  const canvas = $("canvas"), scroller = $("scroller"), spacer = $("spacer"), tooltip = $("tooltip");
  const ctx = canvas.getContext("2d");

  // "read aten::mm", but "free", not "free free": a free or a record_stream is its own op.
  function accessText(a) { return a.op === a.access ? a.access : a.access + " " + a.op; }
  // A stream as the program named it, its handle after it as secondary text (two streams may
  // share a name, and the handle is what a debugger shows).
  function streamNode(name, handle) {
    const node = el("span", "stream");
    node.appendChild(el("span", "name", name));
    if (handle && handle !== name) {
      node.appendChild(document.createTextNode(" "));  // so that copied text reads "kv 0x47fb74d0"
      node.appendChild(el("span", "handle", handle));
    }
    return node;
  }
  function plural(n, one, many) { return n.toLocaleString("en") + " " + (n === 1 ? one : (many || one + "s")); }

  // -- the page around the timeline ---------------------------------------------------------
  function header() {
    const paths = data.traces.map((t) => t.path);
    $("title").textContent = "streamrace: " + (paths.join(", ") || "no trace");
    const s = { findings: 0, graphs: 0, replays: 0, ops: 0, accesses: 0 };
    for (const t of data.traces) for (const k in s) s[k] += t.summary[k] || 0;
    $("summary").textContent = (s.findings ? plural(s.findings, "finding") : "no findings") + "; analysed " +
      plural(s.graphs, "graph") + ", " + plural(s.replays, "replay") + ", " + plural(s.ops, "op") + ", " +
      plural(s.accesses, "access", "accesses");
    for (const t of data.traces) {
      for (const note of t.notes) $("notes").appendChild(el("li", "note", note));
    }
  }

  function findingsList() {
    const list = $("findings");
    if (!data.findings.length) {
      // Nothing recorded is not a clean run (exit code 5): say so, not "No findings".
      const nothing = data.traces.length && data.traces.every((t) => t.recorded_nothing);
      list.appendChild(el("li", "none", nothing ? "Nothing was recorded: no op and no capture to check. This is not a clean run." : "No findings."));
    }
    data.findings.forEach((f, index) => {
      const item = el("li", "finding");
      item.dataset.index = String(index);
      item.dataset.kind = f.kind;
      item.dataset.signature = f.signature;
      item.tabIndex = 0;
      item.setAttribute("role", "button");
      const head = el("div", "head");
      head.appendChild(el("span", "sev-" + f.severity, "[" + f.number + "] " + f.kind));
      head.appendChild(document.createTextNode(
        (f.hazard ? " " + f.hazard : "") + (f.aliasing ? " aliasing" : "") + (f.count > 1 ? " (\u00d7" + f.count + ")" : "")));
      item.appendChild(head);
      const pair = el("div", "pair");
      f.accesses.forEach((a, i) => {
        if (i) pair.appendChild(document.createTextNode("  \u2194  "));
        pair.appendChild(el("span", "op", a.op));
        pair.appendChild(document.createTextNode(" on "));
        pair.appendChild(streamNode(a.stream, a.handle));
      });
      item.appendChild(pair);
      item.title = f.accesses.map((a) => a.op + " on " + a.stream + " (" + a.handle + ")").join("\n");  // what an ellipsis cut
      if (data.traces.length > 1) item.appendChild(el("div", "pair path", data.traces[f.trace].path));
      item.addEventListener("click", () => select(index));
      item.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); select(index); } });
      list.appendChild(item);
    });
  }

  function viewsList() {
    data.views.forEach((view, index) => {
      const button = el("button", "view", (data.traces.length > 1 ? data.traces[view.trace].path + ": " : "") +
        view.title + " \u2014 " + plural(view.lanes.length, "stream") + ", " + plural(view.columns, "column"));
      button.type = "button";
      button.title = button.textContent;  // the whole title, where the button cuts it
      button.dataset.index = String(index);
      button.addEventListener("click", () => { show(index); fit(); });
      $("views").appendChild(button);
    });
  }

  // -- one view -----------------------------------------------------------------------------
  function height(view) { return AXIS + view.lanes.length * ROW + BLOCK_ROW; }

  function show(index) {
    state.view = index;
    const view = data.views[index];
    for (const b of $("views").children) b.classList.toggle("current", Number(b.dataset.index) === index);
    $("view-title").textContent = (data.traces.length > 1 ? data.traces[view.trace].path + ": " : "") + view.title;
    const labels = $("lane-labels");
    labels.replaceChildren();
    labels.style.height = height(view) + "px";
    view.lanes.forEach((name, lane) => {
      const label = el("div", "lane-label");
      label.appendChild(streamNode(name, view.handles[lane]));
      label.style.top = AXIS + lane * ROW + "px";
      label.style.height = ROW + "px";
      label.title = name + " (stream " + view.handles[lane] + ")";
      label.dataset.lane = String(lane);
      labels.appendChild(label);
    });
    const blockLabel = el("div", "lane-label block-row", "memory");
    blockLabel.style.top = AXIS + view.lanes.length * ROW + "px";
    blockLabel.style.height = BLOCK_ROW + "px";
    labels.appendChild(blockLabel);
    $("timeline").dataset.view = view.title;
    markLanes();
    layout();
  }

  function markLanes() {
    const hl = highlightOf(data.views[state.view]);
    const involved = new Set(hl ? hl.accesses.map((a) => a.lane) : []);
    for (const label of $("lane-labels").children) {
      if (label.dataset.lane !== undefined) label.classList.toggle("involved", involved.has(Number(label.dataset.lane)));
    }
  }

  function layout() {
    const view = data.views[state.view];
    const width = Math.max(200, $("area").clientWidth);
    const h = height(view);
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(h * ratio);
    canvas.style.width = width + "px";
    canvas.style.height = h + "px";
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    state.colW = Math.min(state.colW, MAX_SPACER / Math.max(1, view.columns));
    // Half a screen of room past the last column, so that the last ops can be centred too.
    spacer.style.width = Math.max(width, Math.ceil(view.columns * state.colW + width / 2)) + "px";
    spacer.style.height = h + "px";
    redraw();
  }

  function redraw() {
    if (state.pending) return;
    state.pending = true;
    requestAnimationFrame(() => { state.pending = false; draw(); });
  }

  function highlightOf(view) {
    const f = state.finding === null ? null : data.findings[state.finding];
    if (!f) return null;
    return { finding: f, accesses: f.accesses.filter((a) => a.view === state.view), block: f.block && f.block.view === state.view ? f.block : null };
  }

  function draw() {
    const view = data.views[state.view];
    const trace = data.traces[view.trace];
    const width = canvas.width / (window.devicePixelRatio || 1), h = height(view);
    const colW = state.colW, left = scroller.scrollLeft;
    const first = Math.max(0, Math.floor(left / colW)), last = Math.min(view.columns - 1, Math.ceil((left + width) / colW));
    const x = (column) => column * colW - left;
    const laneY = (lane) => AXIS + lane * ROW;
    ctx.clearRect(0, 0, width, h);
    // lanes
    view.lanes.forEach((_, lane) => {
      ctx.fillStyle = lane % 2 ? "#fafbfc" : "#ffffff";
      ctx.fillRect(0, laneY(lane), width, ROW);
    });
    ctx.fillStyle = "#f6f7f9";
    ctx.fillRect(0, laneY(view.lanes.length), width, BLOCK_ROW);
    const hl = highlightOf(view);
    // the block's lifetime, a band across every lane, and its bar in the memory row
    if (hl && hl.block) drawBlock(view, hl.block, x, width);
    // axis: a tick every so many columns, labelled with the column's seq
    ctx.fillStyle = "#6b7280";
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const step = Math.max(1, Math.pow(10, Math.ceil(Math.log10(90 / colW))));
    const axis = [];
    for (let c = Math.ceil(first / step) * step; c <= last; c += step) {
      const label = "seq " + view.seqs[c];
      ctx.fillRect(x(c), AXIS_TEXT + 7, 1, 5);
      ctx.fillText(label, x(c) + 3, AXIS_TEXT);
      axis.push({ x: x(c) + 3, y: AXIS_TEXT - 7, w: ctx.measureText(label).width, h: 14 });
    }
    // slices: several columns to a pixel when zoomed out, one rectangle per pixel and lane
    let drawn = 0;
    const lastPixel = new Float64Array(view.lanes.length).fill(-1);
    ctx.textBaseline = "middle";
    for (let c = first; c <= last; c++) {
      const lane = view.lane[c], kind = data.kinds[view.kind[c]];
      const px = Math.floor(x(c));
      if (colW < 2) {
        if (px === lastPixel[lane]) continue;
        lastPixel[lane] = px;
      }
      drawn++;
      ctx.fillStyle = COLORS[kind];
      const y = laneY(lane);
      if (kind === "record" || kind === "wait") {
        const w = Math.max(1, Math.min(kind === "record" ? 8 : 4, colW - 1));
        ctx.fillRect(x(c) + (colW - w) / 2, y + 8, w, ROW - 16);
        continue;
      }
      const w = Math.max(1, colW - (colW > 4 ? 2 : 0));
      ctx.fillRect(x(c), y + 5, w, ROW - 10);
      if (colW >= 36) {
        ctx.save();
        ctx.beginPath();
        ctx.rect(x(c) + 2, y, w - 4, ROW);
        ctx.clip();
        ctx.fillStyle = "#ffffff";
        ctx.fillText(trace.names[view.name[c]], x(c) + 3, y + ROW / 2);
        ctx.restore();
      }
    }
    // event edges, record -> wait (skipped when so many are in sight that they are a smear)
    const edges = view.edges;
    let inSight = 0;
    for (let i = 0; i < edges.length; i += 3) if (Math.max(edges[i], edges[i + 1]) >= first && Math.min(edges[i], edges[i + 1]) <= last) inSight++;
    if (inSight <= 3000) {
      for (let i = 0; i < edges.length; i += 3) {
        const r = edges[i], w = edges[i + 1];
        if (Math.max(r, w) < first || Math.min(r, w) > last) continue;
        arrow(x(r) + colW / 2, laneY(view.lane[r]) + ROW / 2, x(w) + colW / 2, laneY(view.lane[w]) + ROW / 2, EDGE, false, 1.25);
      }
    }
    const frame = { view: view.title, first: first, last: last, colW: colW, drawn: drawn, edges: inSight <= 3000 ? inSight : 0, highlighted: [], missingEdge: false, block: false, axis: axis, tags: [] };
    if (hl) drawPair(view, hl, x, laneY, frame);
    state.frame = frame;
    $("position").textContent = view.columns ? "columns " + first.toLocaleString("en") + "\u2013" + last.toLocaleString("en") +
      " of " + view.columns.toLocaleString("en") : "no work in this view";
  }

  function drawBlock(view, block, x, width) {
    const start = x(block.start), end = block.end === null ? width + 10 : x(block.end);
    const top = AXIS, lanesH = view.lanes.length * ROW, rowY = AXIS + lanesH, mid = rowY + BLOCK_ROW / 2;
    const reuse = block.reuse === null ? null : x(Math.max(block.reuse, block.end === null ? block.reuse : block.end));
    ctx.fillStyle = "rgba(240, 170, 40, 0.13)";
    ctx.fillRect(start, top, end - start, lanesH);
    ctx.fillStyle = "rgba(240, 170, 40, 0.6)";
    ctx.fillRect(start, rowY + 4, end - start, BLOCK_ROW - 8);
    if (reuse !== null) {
      ctx.fillStyle = "rgba(214, 39, 40, 0.10)";
      ctx.fillRect(reuse, top, width + 10 - reuse, lanesH);
      ctx.fillStyle = "rgba(214, 39, 40, 0.45)";
      ctx.fillRect(reuse, rowY + 4, width + 10 - reuse, BLOCK_ROW - 8);
    }
    ctx.font = "600 11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#1d2330";
    const from = Math.max(start, 0);
    clippedText((block.starts_before ? "\u2190 " : "") + blockName(block) + (block.end !== null ? " \u2192 freed" : ""), from + 4, mid, end - from - 8);
    if (reuse !== null) clippedText("reused by " + (block.reused_by || "a new tensor"), reuse + 4, mid, width - reuse - 8);
  }

  function clippedText(text, x, y, room) {
    if (room < 12) return;
    ctx.save();
    ctx.beginPath();
    ctx.rect(x, y - 10, room, 20);
    ctx.clip();
    ctx.fillText(text, x, y);
    ctx.restore();
  }

  function callout(text, x, y, above) {
    ctx.font = "600 11px system-ui, sans-serif";
    const w = ctx.measureText(text).width + 8, h = 15;
    const top = above ? y - h - 1 : y + 1;
    ctx.fillStyle = "rgba(255, 255, 255, 0.92)";
    ctx.strokeStyle = BAD;
    ctx.lineWidth = 1;
    ctx.fillRect(x, top, w, h);
    ctx.strokeRect(x, top, w, h);
    ctx.fillStyle = BAD;
    ctx.textBaseline = "middle";
    ctx.fillText(text, x + 4, top + h / 2 + 0.5);
    return { x: x, y: top, w: w, h: h };
  }

  function blockName(block) {
    return "tensor " + (block.source ? "`" + block.source + "` " : "") + "(" + block.size.toLocaleString("en") + " bytes on " +
      block.stream + ")" + (block.alloc_location ? " allocated at " + block.alloc_location : "");
  }

  function overlaps(a, b) { return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h; }

  function drawPair(view, hl, x, laneY, frame) {
    const colW = state.colW;
    const points = [];
    for (const a of hl.accesses) {
      const y = laneY(a.lane);
      ctx.strokeStyle = BAD;
      ctx.lineWidth = 3;
      if (a.exact) {
        ctx.strokeRect(x(a.column) - 2, y + 3, Math.max(colW, 4), ROW - 6);
        points.push({ a: a, left: x(a.column) - 2, right: x(a.column) + Math.max(colW, 4) - 2, y: y + ROW / 2 });
      } else {  // a free: a mark at the boundary where it falls
        ctx.beginPath();
        ctx.moveTo(x(a.column), y + 2);
        ctx.lineTo(x(a.column), y + ROW - 2);
        ctx.stroke();
        points.push({ a: a, left: x(a.column), right: x(a.column), y: y + ROW / 2 });
      }
      frame.highlighted.push({ op: a.op, access: a.access, lane: view.lanes[a.lane], column: a.column, exact: a.exact });
    }
    // Labels: the upper access's above its lane, the lower's below (the first's above on one lane).
    const taken = [];
    const order = points.slice().sort((p, q) => p.a.lane - q.a.lane || (p === points[0] ? -1 : 1));
    order.forEach((p, i) => {
      const above = i === 0 && order.length > 1 ? true : order.length === 1;
      taken.push(callout(accessText(p.a), p.left, above ? laneY(p.a.lane) + 3 : laneY(p.a.lane) + ROW - 3, above));
    });
    frame.tags.push(...taken);
    taken.push(...frame.axis);  // the missing edge's label keeps off the axis's too
    if (points.length === 2 && hl.finding.unordered) {  // a padded scatter's pair is ordered: no missing edge
      const [p, q] = points[0].left <= points[1].left ? points : [points[1], points[0]];
      arrow(p.right, p.y, q.left, q.y, BAD, true, 2.5);
      ctx.font = "600 11px system-ui, sans-serif";
      const label = "missing edge";
      const w = ctx.measureText(label).width;
      // Beside the arrow, where no access's label is: the first free place of a few.
      const h = 16, top = Math.min(p.y, q.y), bottom = Math.max(p.y, q.y), mid = (p.right + q.left) / 2 - w / 2;
      for (const point of points) taken.push({ x: point.left, y: point.y - ROW / 2 + 3, w: point.right - point.left, h: ROW - 6 });
      const places = [
        { x: q.y < p.y ? q.left - w - 10 : p.right + 10, y: top - h / 2 },
        { x: mid, y: (top + bottom) / 2 - h / 2 },
        { x: q.left - w - 10, y: bottom + ROW / 2 - 2 },
        { x: p.right + 10, y: top - ROW / 2 - h + 2 },
        { x: Math.max(p.right, q.right) + 8, y: top - h / 2 },
      ].map((c) => ({ x: c.x - 2, y: c.y, w: w + 4, h: h }));
      const place = places.find((c) => taken.every((t) => !overlaps(c, t))) || places[places.length - 1];
      ctx.fillStyle = "rgba(255, 255, 255, 0.92)";
      ctx.fillRect(place.x, place.y, place.w, place.h);
      ctx.fillStyle = BAD;
      ctx.textBaseline = "middle";
      ctx.fillText(label, place.x + 2, place.y + h / 2);
      frame.tags.push(place);
      frame.missingEdge = true;
    }
    frame.block = Boolean(hl.block);
  }

  function arrow(x1, y1, x2, y2, color, dashed, width) {
    ctx.save();
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = width;
    if (dashed) ctx.setLineDash([6, 4]);
    ctx.beginPath();
    ctx.moveTo(x1, y1);
    const mid = (x1 + x2) / 2;
    ctx.bezierCurveTo(mid, y1, mid, y2, x2, y2);
    ctx.stroke();
    ctx.setLineDash([]);
    const angle = Math.atan2(y2 - y1, Math.max(1, x2 - mid)) / 3;
    ctx.beginPath();
    ctx.moveTo(x2, y2);
    ctx.lineTo(x2 - 8 * Math.cos(angle - 0.45), y2 - 8 * Math.sin(angle - 0.45));
    ctx.lineTo(x2 - 8 * Math.cos(angle + 0.45), y2 - 8 * Math.sin(angle + 0.45));
    ctx.closePath();
    ctx.fill();
    ctx.restore();
  }

  // -- zoom and scroll ------------------------------------------------------------------------
  // Zoom, fit and hover act on the view shown; a trace with no view (nothing recorded) has none.
  function zoom(factor, anchor) {
    if (state.view === null) return;
    const view = data.views[state.view];
    const width = $("area").clientWidth;
    const at = anchor === undefined ? width / 2 : anchor;
    const column = (scroller.scrollLeft + at) / state.colW;
    state.colW = Math.max(MIN_COL, Math.min(MAX_COL, MAX_SPACER / Math.max(1, view.columns), state.colW * factor));
    layout();
    scroller.scrollLeft = column * state.colW - at;
    redraw();
  }

  function fit() {
    if (state.view === null) return;
    const view = data.views[state.view];
    state.colW = Math.max(MIN_COL, Math.min(24, $("area").clientWidth / Math.max(1, view.columns)));
    layout();
    scroller.scrollLeft = 0;
  }

  function reveal(pair, context) {
    // The pair as close as a label fits; the block's start too, when it fits as well.
    const width = $("area").clientWidth;
    const span = (cols) => Math.max(...cols) - Math.min(...cols) + 1;
    const withContext = pair.concat(context);
    const wide = (width * 0.8) / span(withContext);
    const columns = context.length && wide >= 28 ? withContext : pair;
    const lo = Math.min(...columns), hi = Math.max(...columns);
    state.colW = Math.max(2, Math.min(64, (width * 0.8) / span(columns), columns === pair ? 64 : 48));
    layout();
    scroller.scrollLeft = ((lo + hi + 1) / 2) * state.colW - width / 2;
    redraw();
  }

  // -- a finding ------------------------------------------------------------------------------
  function select(index) {
    const f = data.findings[index];
    state.finding = index;
    for (const item of $("findings").children) {
      const on = Number(item.dataset.index) === index;
      item.classList.toggle("selected", on);
      item.setAttribute("aria-selected", on ? "true" : "false");
    }
    $("finding-text").textContent = f.text;
    const pair = $("pair");
    pair.replaceChildren();
    const row = (label, value, className) => {
      pair.appendChild(el("div", "label", label));
      const cell = el("div", "value" + (className ? " " + className : ""));
      for (const part of Array.isArray(value) ? value : [value]) cell.appendChild(typeof part === "string" ? document.createTextNode(part) : part);
      pair.appendChild(cell);
    };
    f.accesses.forEach((a, i) => {
      const where = a.view === null ? "not on the timeline" : data.views[a.view].title;
      row(i === 0 ? "first" : "second", [accessText(a) + " on ", streamNode(a.stream, a.handle), (a.location ? " at " + a.location : "") +
        (a.captured ? " (captured at " + a.captured + ")" : "") + " \u2014 " + where], "access");
    });
    if (f.block) row("block", blockName(f.block) + (f.block.free_location ? ", freed at " + f.block.free_location : "") +
      (f.block.reused_by ? ", reused by " + f.block.reused_by : ""));
    if (f.missing_edge) row("missing edge", f.missing_edge);
    const timeline = $("timeline");
    timeline.dataset.finding = f.signature;
    timeline.dataset.highlight = f.accesses.filter((a) => a.view === f.view).map((a) => a.op + "@" + a.stream).join(" | ");
    if (f.view !== null) {
      if (state.view !== f.view) show(f.view);
      markLanes();
      const columns = f.accesses.filter((a) => a.view === f.view).map((a) => a.column);
      reveal(columns, f.block && f.block.view === f.view ? [f.block.start] : []);
    }
  }

  // -- hover ----------------------------------------------------------------------------------
  scroller.addEventListener("mousemove", (e) => {
    if (state.view === null) return;
    const view = data.views[state.view];
    const box = scroller.getBoundingClientRect();
    const column = Math.floor((e.clientX - box.left + scroller.scrollLeft) / state.colW);
    const lane = Math.floor((e.clientY - box.top - AXIS) / ROW);
    if (column < 0 || column >= view.columns || view.lane[column] !== lane) { tooltip.hidden = true; return; }
    const trace = data.traces[view.trace];
    const site = view.site[column] >= 0 ? trace.sites[view.site[column]] : "no user source line recorded";
    tooltip.textContent = data.kinds[view.kind[column]] + " " + trace.names[view.name[column]] + "\non " +
      view.lanes[lane] + " (stream " + view.handles[lane] + "), seq " + view.seqs[column] + "\n" + site;
    tooltip.style.left = Math.min(e.clientX + 12, window.innerWidth - 540) + "px";
    tooltip.style.top = e.clientY + 14 + "px";
    tooltip.hidden = false;
  });
  scroller.addEventListener("mouseleave", () => { tooltip.hidden = true; });
  scroller.addEventListener("scroll", redraw);
  scroller.addEventListener("wheel", (e) => {
    if (!e.ctrlKey) return;
    e.preventDefault();
    zoom(e.deltaY < 0 ? 1.25 : 0.8, e.clientX - scroller.getBoundingClientRect().left);
  }, { passive: false });
  $("zoom-in").addEventListener("click", () => zoom(2));
  $("zoom-out").addEventListener("click", () => zoom(0.5));
  $("fit").addEventListener("click", fit);
  window.addEventListener("resize", () => { if (state.view !== null) layout(); });

  header();
  findingsList();
  viewsList();
  // What a test (or a curious reader, in the console) can ask the page: the last frame drawn.
  window.streamrace = { frame: () => state.frame, select: select, show: show };
  if (data.views.length) {
    show(0);
    fit();
  } else {
    for (const id of ["zoom-in", "zoom-out", "fit"]) $(id).disabled = true;
    $("position").textContent = "no view to draw";
  }
  if (data.findings.length) select(0);
  document.body.dataset.ready = "true";
})();
