// workbench views: the front end of GraphView, BufferView and TimelineView.
//
// Plain ES module for anywidget (no build step, no network). The kernel sends a
// "scene" (plain data: positions, sizes, colours, labels, rows) and this module only
// draws it as SVG and handles interaction:
//   - zoom (wheel, +/- buttons) and pan (drag), "fit" resets;
//   - hover: a tooltip with the item's spec; click: select, spec in the side panel;
//   - search by name (Enter or a click on a result selects and centres it);
//   - linked selection: the "focus" trait names a graph value; views linked with
//     ipywidgets.jslink share it in the browser, so a click here highlights the same
//     value in the other views without a kernel round trip;
//   - graph: double-click (or the panel's button) expands a collapsed group in place;
//   - timeline: a kind filter and a time window; buffers: a step window.
// The interaction state (focus, selected, window, viewbox, hidden kinds, expanded
// groups, query) is synced back to the kernel, which keeps its own copy of it.

const SVGNS = "http://www.w3.org/2000/svg";
const RESULTS_MAX = 400; // search results listed (the list scrolls)

function h(tag, cls, parent, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function s(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

function stext(parent, x, y, text, attrs) {
  const t = s("text", Object.assign({ x, y }, attrs || {}), parent);
  t.textContent = text;
  return t;
}

export function fmtBytes(n) {
  const v = Number(n);
  for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (Math.abs(v) >= scale) return (v / scale).toFixed(1) + " " + unit;
  }
  return Math.trunc(v) + " B";
}

export function fmtUs(us) {
  return Math.abs(us) >= 1000 ? (us / 1000).toFixed(3) + " ms" : us.toFixed(3) + " µs";
}

// a tick label: the unit of the largest value, as few decimals as the step needs
export function fmtTickUs(v, step) {
  const ms = Math.max(Math.abs(v), step) >= 1000;
  const x = ms ? v / 1000 : v;
  const st = ms ? step / 1000 : step;
  const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(st) + 1e-9)));
  return (v === 0 ? "0" : x.toFixed(decimals)) + (ms ? " ms" : " µs");
}

// round tick values between lo and hi (about n of them): 1, 2, 2.5, 5 × 10^k
export function niceTicks(lo, hi, n) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / Math.max(1, n);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = mag;
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * mag >= raw) { step = m * mag; break; }
  }
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

// lines of at most ``width`` px made of ``parts`` joined by " · " (the first part, a label,
// is followed by a space only)
function wrapParts(parts, width, charPx) {
  const lines = [];
  let line = "";
  parts.forEach((part, i) => {
    const sep = i === 0 ? "" : i === 1 ? " " : " · ";
    if (line && (line + sep + part).length * charPx > width) {
      lines.push(line + (i > 1 ? " ·" : ""));
      line = part;
    } else {
      line += sep + part;
    }
  });
  if (line) lines.push(line);
  return lines;
}

function timing(kind, t0) {
  // interaction latency, read by the browser test and the benchmark
  const list = (window.wbViewsTiming = window.wbViewsTiming || []);
  list.push({ kind, ms: performance.now() - t0 });
  if (list.length > 200) list.shift();
}

function afterPaint(fn) {
  requestAnimationFrame(() => requestAnimationFrame(fn));
}

function debounce(fn, ms) {
  let t = null;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

// --- the shared shell: toolbar, stage, side panel, tooltip, search -------------------

class View {
  constructor(model, root) {
    this.model = model;
    this.root = root;
    this.listeners = [];
    root.classList.add("wbv", "wbv-" + this.kind);
    this.toolbar = h("div", "wbv-toolbar", root);
    const search = h("div", "wbv-searchbox", this.toolbar);
    this.search = h("input", "wbv-search", search);
    this.search.type = "search";
    this.search.placeholder = this.searchHint;
    this.search.setAttribute("aria-label", this.searchHint);
    this.results = h("ul", "wbv-results", search);
    this.tools = h("span", "wbv-tools", this.toolbar);
    this.button("+", "zoom in", () => this.zoomBy(1.5));
    this.button("−", "zoom out", () => this.zoomBy(1 / 1.5));
    this.button("fit", "show everything", () => this.fit(true));
    this.extraTools(this.tools);
    this.hint = h("span", "wbv-hint", this.toolbar, "scroll: zoom · drag: pan · click: select");
    this.legend = h("div", "wbv-legend", root);
    this.body = h("div", "wbv-body", root);
    this.stage = h("div", "wbv-stage", this.body);
    this.svg = s("svg", { class: "wbv-svg" }, this.stage);
    this.tip = h("div", "wbv-tip", this.stage);
    this.side = h("div", "wbv-side", this.body);
    this.wireSearch();
    this.wireZoom();
    this.on("change:scene", () => this.rebuild());
    this.on("change:focus", () => this.onFocus());
    this.on("change:selected", () => this.refreshSelection());
    this.on("change:detail", () => this.renderPanel());
    this.on("change:hidden_kinds", () => this.redraw());
    this.on("change:window", () => this.onWindow());
    this.on("change:viewbox", () => this.onViewbox());
  }

  on(event, fn) {
    this.model.on(event, fn);
    this.listeners.push([event, fn]);
  }

  destroy() {
    for (const [event, fn] of this.listeners) this.model.off(event, fn);
  }

  button(text, title, fn) {
    const b = h("button", "wbv-button", this.tools, text);
    b.title = title;
    b.type = "button";
    b.addEventListener("click", fn);
    return b;
  }

  set(changes) {
    for (const k in changes) this.model.set(k, changes[k]);
    this.model.save_changes();
  }

  get scene() {
    const raw = this.model.get("scene");
    if (raw !== this._raw) {
      this._raw = raw;
      this._scene = typeof raw === "string" ? JSON.parse(raw) : raw || {};
    }
    return this._scene;
  }

  // select an item of this view (key) and the graph value it stands for (focus)
  choose(key, focus) {
    const t0 = performance.now();
    this.choosing = true;
    this.set({ selected: key, focus: focus === undefined ? null : focus });
    this.choosing = false;
    this.refreshSelection();
    afterPaint(() => timing(this.kind + ":select", t0));
  }

  onFocus() {
    const key = this.keyForFocus(this.model.get("focus"));
    const changed = key !== undefined && key !== this.model.get("selected");
    if (changed) {
      this.model.set("selected", key);
      this.model.save_changes();
    }
    this.refreshSelection();
    // a selection made in another view: bring it into sight if it is out of view
    if (changed && key !== null && !this.choosing) this.reveal(key, true, true);
  }

  refreshSelection() {
    this.highlight();
    this.renderPanel();
  }

  rebuild() {
    const scene = this.scene;
    this.renderLegend(scene.legend || []);
    this.build(scene);
    this.refreshSelection();
  }

  renderLegend(items) {
    this.legend.replaceChildren();
    for (const item of items) {
      const span = h("span", "wbv-legend-item", this.legend);
      const mark = h("span", "wbv-swatch wbv-swatch-" + (item.shape || "box"), span);
      mark.style.background = item.fill || "transparent";
      mark.style.borderColor = item.stroke || item.fill || "#555";
      if (item.dashed) mark.style.borderStyle = "dashed";
      h("span", null, span, item.label);
    }
  }

  // --- side panel ----------------------------------------------------------------
  renderPanel() {
    const key = this.model.get("selected");
    const focus = this.model.get("focus");
    this.side.replaceChildren();
    const info = key !== null && key !== undefined ? this.itemInfo(key) : null;
    const detail = this.model.get("detail") || {};
    const fromKernel = detail.key !== undefined && detail.key !== null && String(detail.key) === String(key);
    if (!info && !fromKernel) {
      if (focus) {
        h("div", "wbv-side-title", this.side, focus);
        h("div", "wbv-side-empty", this.side, this.notHere);
      } else {
        h("div", "wbv-side-empty", this.side, this.emptyPanel);
      }
      return;
    }
    const title = fromKernel ? detail.title : info.title;
    const rows = fromKernel ? detail.rows : info.rows;
    h("div", "wbv-side-title", this.side, title);
    const table = h("table", "wbv-spec", this.side);
    for (const [k, v] of rows || []) {
      const tr = h("tr", null, table);
      h("th", null, tr, k);
      h("td", null, tr, v);
    }
    if (info && info.actions) {
      for (const [text, fn] of info.actions) {
        const b = h("button", "wbv-button wbv-action", this.side, text);
        b.type = "button";
        b.addEventListener("click", fn);
      }
    }
  }

  // --- tooltip -------------------------------------------------------------------
  showTip(evt, title, rows) {
    this.tip.replaceChildren();
    h("div", "wbv-tip-title", this.tip, title);
    if (rows && rows.length) {
      const table = h("table", null, this.tip);
      for (const [k, v] of rows.slice(0, 10)) {
        const tr = h("tr", null, table);
        h("th", null, tr, k);
        h("td", null, tr, v);
      }
    }
    const box = this.stage.getBoundingClientRect();
    let x = evt.clientX - box.left + 14;
    let y = evt.clientY - box.top + 14;
    this.tip.style.display = "block";
    const w = this.tip.offsetWidth;
    const hgt = this.tip.offsetHeight;
    if (x + w > box.width) x = Math.max(0, evt.clientX - box.left - w - 10);
    if (y + hgt > box.height) y = Math.max(0, evt.clientY - box.top - hgt - 10);
    this.tip.style.left = x + "px";
    this.tip.style.top = y + "px";
  }

  hideTip() {
    this.tip.style.display = "none";
  }

  // --- search --------------------------------------------------------------------
  wireSearch() {
    const run = () => {
      const q = this.search.value.trim().toLowerCase();
      this.results.replaceChildren();
      this.matches = [];
      if (!q) {
        this.results.style.display = "none";
        return;
      }
      // names that start with the text, names that contain it, then other words of the
      // item (op, device, module, copy kind)
      const starts = [];
      const contains = [];
      const described = [];
      for (const entry of this.searchIndex()) {
        const name = entry[0].toLowerCase();
        if (name.startsWith(q)) starts.push(entry);
        else if (name.includes(q)) contains.push(entry);
        else if (entry[4] && entry[4].includes(q)) described.push(entry);
      }
      this.matches = starts.concat(contains, described);
      const shown = this.matches.slice(0, RESULTS_MAX);
      h("li", "wbv-result-count", this.results, `${this.matches.length} match${this.matches.length === 1 ? "" : "es"}`);
      for (const [name, key, focus, note, terms] of shown) {
        const li = h("li", "wbv-result", this.results, name);
        const why = note || "";
        if (why || terms) h("span", "wbv-result-note", li, " " + [why, terms && !name.toLowerCase().includes(q) ? terms : ""].filter(Boolean).join(" · "));
        li.addEventListener("mousedown", (e) => {
          e.preventDefault();
          this.pick(key, focus);
        });
      }
      if (this.matches.length > RESULTS_MAX) h("li", "wbv-result-more", this.results, `… ${this.matches.length - RESULTS_MAX} more: type more to narrow`);
      if (!this.matches.length) h("li", "wbv-result-more", this.results, "no match");
      this.results.style.display = "block";
    };
    this.search.addEventListener("input", run);
    this.search.addEventListener("focus", run);
    this.search.addEventListener("blur", () => setTimeout(() => (this.results.style.display = "none"), 150));
    this.search.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && this.matches && this.matches.length) {
        const [, key, focus] = this.matches[0];
        this.pick(key, focus);
      } else if (e.key === "Escape") {
        this.search.value = "";
        run();
      }
    });
  }

  pick(key, focus) {
    this.results.style.display = "none";
    this.model.set("query", this.search.value);
    this.choose(key, focus);
    this.reveal(key);
  }

  // --- zoom and pan (subclasses say what a zoom does) --------------------------------
  wireZoom() {
    this.stage.addEventListener(
      "wheel",
      (e) => {
        if (!e.ctrlKey && !e.metaKey && !e.altKey && Math.abs(e.deltaY) < Math.abs(e.deltaX)) return;
        e.preventDefault();
        const box = this.stage.getBoundingClientRect();
        this.zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - box.left, e.clientY - box.top);
      },
      { passive: false }
    );
    let drag = null;
    this.stage.addEventListener("mousedown", (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, moved: false };
    });
    window.addEventListener("mousemove", (this._move = (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      drag.moved = true;
      drag.x = e.clientX;
      drag.y = e.clientY;
      this.stage.classList.add("wbv-dragging");
      this.panBy(dx, dy);
    }));
    window.addEventListener("mouseup", (this._up = () => {
      if (drag && drag.moved) {
        this.suppressClick = true;
        setTimeout(() => (this.suppressClick = false), 0);
      }
      drag = null;
      this.stage.classList.remove("wbv-dragging");
    }));
  }

  destroyWindowListeners() {
    window.removeEventListener("mousemove", this._move);
    window.removeEventListener("mouseup", this._up);
  }

  // hooks
  extraTools() {}
  keyForFocus() { return undefined; }
  onWindow() {}
  onViewbox() {}
  redraw() { this.rebuild(); }
  reveal() {}
  get notHere() { return "not shown in this view"; }
}

// --- graph ---------------------------------------------------------------------------

class GraphView extends View {
  get kind() { return "graph"; }
  get searchHint() { return "search nodes…"; }
  get emptyPanel() { return "Click a node (or search) to see its spec. Double-click a group to expand it."; }

  extraTools(tools) {
    this.expandButton = this.button("expand", "expand the selected group in place", () => this.toggleExpand(this.groupOf(this.model.get("selected"))));
    this.expandButton.disabled = true;
  }

  build(scene) {
    this.hideTip(); // the node under the pointer may be gone (a group expanded in place)
    this.svg.replaceChildren();
    this.nodes = new Map();
    this.edges = [];
    this.k = this.k || 1;
    const [ew, eh] = scene.extent || [100, 100];
    this.sizeStage();
    const defs = s("defs", null, this.svg);
    const marker = s("marker", { id: this.markerId("arrow"), viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
    s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a8a8a" }, marker);
    const markerSel = s("marker", { id: this.markerId("arrow-sel"), viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
    s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#111" }, markerSel);
    this.vp = s("g", { class: "wbv-vp" }, this.svg);
    const boxes = s("g", { class: "wbv-boxes" }, this.vp);
    for (const b of scene.boxes || []) {
      const g = s("g", { class: "wbv-box wbv-box-" + b.kind }, boxes);
      s("rect", { x: b.x0, y: b.y0, width: b.x1 - b.x0, height: b.y1 - b.y0, rx: 6, fill: b.fill, stroke: b.stroke }, g);
      stext(g, b.x0 + 6, b.y0 + 12, b.label, { class: "wbv-box-label" });
    }
    const edgeLayer = s("g", { class: "wbv-edges" }, this.vp);
    for (const e of scene.edges || []) {
      const path = s("path", { d: edgePath(e.p), "marker-end": `url(#${this.markerId("arrow")})`, class: "wbv-edge" }, edgeLayer);
      const rec = { el: path, s: e.s, d: e.d, m: e.m || [e.s], n: e.n || [e.d] };
      this.edges.push(rec);
    }
    const nodeLayer = s("g", { class: "wbv-nodes" }, this.vp);
    for (const n of scene.nodes || []) {
      const g = drawNode(nodeLayer, n);
      this.nodes.set(n.id, { el: g, n });
    }
    this.svg.onmousemove = (e) => {
      const t = e.target.closest && e.target.closest(".wbv-node");
      if (!t) return this.hideTip();
      const item = this.nodes.get(t.dataset.id);
      if (item) this.showTip(e, item.n.title, item.n.rows);
    };
    this.svg.onmouseleave = () => this.hideTip();
    this.svg.onclick = (e) => {
      if (this.suppressClick) return;
      const t = e.target.closest && e.target.closest(".wbv-node");
      if (!t) return;
      const id = t.dataset.id;
      this.choose(id, id);
    };
    this.svg.ondblclick = (e) => {
      const t = e.target.closest && e.target.closest(".wbv-node");
      if (t && this.nodes.get(t.dataset.id)?.n.group) this.toggleExpand(t.dataset.id);
    };
    const vb = this.model.get("viewbox");
    if (this.pendingReveal) {
      // expanded or collapsed in place: same zoom, centred on the group
      const id = this.pendingReveal;
      this.pendingReveal = null;
      this.reveal(id, true);
    } else if (vb && vb.length === 4 && !this.fitted) {
      this.applyViewbox(vb);
    } else if (!this.fitted) {
      this.open();
    } else {
      this.fit(false);
    }
    this.fitted = true;
    this.buildOverview(scene);
  }

  // no taller than the drawing at the zoom that fits its width (no empty half)
  sizeStage() {
    const [ew, eh] = this.scene.extent || [100, 100];
    const wide = (this.stage.clientWidth || 800) - 16;
    this.stage.style.height = Math.max(240, Math.min(640, eh * Math.min(1.4, wide / Math.max(1, ew)) + 24)) + "px";
  }

  // the first view: everything when it fits at a readable zoom, else the first copies
  // (what the view is for) at a readable zoom; the overview shows the rest
  open() {
    const scene = this.scene;
    const [w, hgt] = [this.stage.clientWidth || 800, this.stage.clientHeight || 400];
    const fitK = this.fitScale();
    if (!scene.initial || fitK >= READABLE) return this.fit(false);
    const r = scene.initial.region;
    const c = scene.initial.copies;
    let k = Math.min(1.2, Math.max(fitK, (w - 32) / (r[2] - r[0])));
    if (k >= MIN_OPEN) {
      this.tx = w / 2 - ((r[0] + r[2]) / 2) * k; // the copies and what they serve
    } else {
      // too wide to read whole: the copies at a readable zoom, right of what they serve
      k = Math.max(k, Math.min(MIN_OPEN, (w - 32) / (c[2] - c[0])));
      this.tx = Math.max(w - 16 - c[2] * k, 16 - c[0] * k); // right-aligned when they fit, else their left first
    }
    this.k = k;
    this.ty = 16 - (r[1] - 60) * k; // at the top, a rank of context above
    this.applyTransform(false);
  }

  fitScale() {
    const [ew, eh] = this.scene.extent || [100, 100];
    const w = this.stage.clientWidth || 800;
    const hgt = this.stage.clientHeight || 400;
    return Math.min((w - 16) / Math.max(1, ew), (hgt - 16) / Math.max(1, eh), 1.4);
  }

  // overview: the whole graph in the corner, the visible part outlined; click or drag
  // in it to move there
  buildOverview(scene) {
    if (this.overview) this.overview.remove();
    const [ew, eh] = scene.extent || [100, 100];
    const size = 150;
    const f = size / Math.max(ew, eh, 1);
    const ov = (this.overview = h("div", "wbv-overview", this.stage));
    const svg = s("svg", { width: Math.max(20, ew * f), height: Math.max(20, eh * f), class: "wbv-overview-svg" }, ov);
    for (const n of scene.nodes || []) {
      s("rect", { x: (n.x - n.w / 2) * f, y: (n.y - n.h / 2) * f, width: Math.max(1, n.w * f), height: Math.max(1, n.h * f), fill: n.kind === "copy" ? n.fill : n.stroke || "#999", class: "wbv-ov-node" + (n.kind === "copy" ? " wbv-ov-copy" : "") }, svg);
    }
    this.ovView = s("rect", { class: "wbv-ov-view" }, svg);
    this.ovScale = f;
    const move = (e) => {
      const box = svg.getBoundingClientRect();
      const x = (e.clientX - box.left) / f;
      const y = (e.clientY - box.top) / f;
      const w = this.stage.clientWidth || 800;
      const hgt = this.stage.clientHeight || 400;
      this.tx = w / 2 - x * this.k;
      this.ty = hgt / 2 - y * this.k;
      this.applyTransform(true);
    };
    let dragging = false;
    ov.addEventListener("mousedown", (e) => { e.stopPropagation(); e.preventDefault(); dragging = true; move(e); });
    ov.addEventListener("mousemove", (e) => { if (dragging) move(e); });
    ov.addEventListener("mouseup", () => { dragging = false; });
    ov.addEventListener("mouseleave", () => { dragging = false; });
    ov.addEventListener("wheel", (e) => e.stopPropagation());
    this.updateOverview();
  }

  updateOverview() {
    if (!this.ovView) return;
    const f = this.ovScale;
    const w = this.stage.clientWidth || 800;
    const hgt = this.stage.clientHeight || 400;
    this.ovView.setAttribute("x", ((-this.tx / this.k) * f).toFixed(1));
    this.ovView.setAttribute("y", ((-this.ty / this.k) * f).toFixed(1));
    this.ovView.setAttribute("width", ((w / this.k) * f).toFixed(1));
    this.ovView.setAttribute("height", ((hgt / this.k) * f).toFixed(1));
  }

  markerId(name) {
    if (!this.uid) this.uid = "wbv" + Math.random().toString(36).slice(2, 9);
    return this.uid + "-" + name;
  }

  // the drawn id of a graph value (itself when it is drawn, else its collapsed group)
  drawnId(name) {
    if (name === null || name === undefined) return null;
    if (this.nodes && this.nodes.has(name)) return name;
    const of = this.scene.node_of || {};
    return of[name] || null;
  }

  groupOf(name) {
    const id = this.drawnId(name);
    const item = id && this.nodes.get(id);
    return item && item.n.group ? id : null;
  }

  keyForFocus(focus) {
    return this.drawnId(focus) ? focus : null;
  }

  searchIndex() {
    if (!this._index || this._indexScene !== this.scene) {
      const scene = this.scene;
      const out = [];
      const terms = scene.terms || {};
      for (const n of scene.nodes || []) out.push([n.id, n.id, n.id, n.group ? "group" : "", terms[n.id] || ""]);
      for (const [name, id] of Object.entries(scene.node_of || {})) out.push([name, name, name, "in " + id, terms[name] || ""]);
      this._index = out;
      this._indexScene = scene;
    }
    return this._index;
  }

  itemInfo(key) {
    const item = this.nodes && this.nodes.get(key);
    if (!item) return null;
    const info = { title: item.n.title, rows: item.n.rows };
    if (item.n.group) info.actions = [["expand in place", () => this.toggleExpand(key)]];
    if (item.n.expanded_from) info.actions = [["collapse " + item.n.expanded_from, () => this.toggleExpand(item.n.expanded_from)]];
    return info;
  }

  renderPanel() {
    super.renderPanel();
    const group = this.groupOf(this.model.get("selected"));
    this.expandButton.disabled = !group;
    const focus = this.model.get("focus");
    const id = this.drawnId(focus);
    if (focus && id && id !== focus) {
      const note = h("div", "wbv-side-note", this.side, `drawn inside ${id}`);
      const b = h("button", "wbv-button wbv-action", note, "expand " + id);
      b.type = "button";
      b.addEventListener("click", () => this.toggleExpand(id));
    }
  }

  toggleExpand(id) {
    if (!id) return;
    const now = (this.model.get("expanded") || []).slice();
    const i = now.indexOf(id);
    if (i >= 0) now.splice(i, 1);
    else now.push(id);
    this.pendingReveal = id;
    this.set({ expanded: now });
  }

  highlight() {
    if (!this.nodes) return;
    const t0 = performance.now();
    const focus = this.model.get("focus");
    const id = this.drawnId(focus);
    for (const el of this.vp.querySelectorAll(".wbv-sel, .wbv-inside")) el.classList.remove("wbv-sel", "wbv-inside");
    for (const e of this.edges) {
      if (e.own) {
        e.el.classList.remove("wbv-own");
        e.el.setAttribute("marker-end", `url(#${this.markerId("arrow")})`);
        e.own = false;
      }
    }
    if (!id) return;
    const item = this.nodes.get(id);
    item.el.classList.add(id === focus ? "wbv-sel" : "wbv-inside");
    for (const e of this.edges) {
      const own = id === focus ? e.s === id || e.d === id : e.m.includes(focus) || e.n.includes(focus);
      if (own) {
        e.el.classList.add("wbv-own");
        e.el.setAttribute("marker-end", `url(#${this.markerId("arrow-sel")})`);
        e.own = true;
        e.el.parentNode.appendChild(e.el);
      }
    }
    timing("graph:highlight", t0);
  }

  // --- zoom: a transform on the viewport group ---------------------------------------
  // every node inside the stage, centred (the overview and the zoom buttons get back detail)
  fit(save) {
    const [ew, eh] = this.scene.extent || [100, 100];
    const w = this.stage.clientWidth || 800;
    const hgt = this.stage.clientHeight || 400;
    const k = this.fitScale();
    this.k = k;
    this.tx = (w - ew * k) / 2;
    this.ty = (hgt - eh * k) / 2;
    this.applyTransform(save);
  }

  zoomBy(f) {
    this.zoomAt(f, (this.stage.clientWidth || 800) / 2, (this.stage.clientHeight || 400) / 2);
  }

  zoomAt(f, cx, cy) {
    const k = Math.min(6, Math.max(0.03, this.k * f));
    f = k / this.k;
    this.tx = cx - (cx - this.tx) * f;
    this.ty = cy - (cy - this.ty) * f;
    this.k = k;
    this.applyTransform(true);
  }

  panBy(dx, dy) {
    this.tx += dx;
    this.ty += dy;
    this.applyTransform(true);
  }

  applyTransform(save) {
    this.vp.setAttribute("transform", `translate(${this.tx.toFixed(2)},${this.ty.toFixed(2)}) scale(${this.k.toFixed(4)})`);
    this.root.dataset.zoom = this.k.toFixed(4);
    if (this.updateOverview) this.updateOverview();
    if (save) this.saveViewbox();
  }

  saveViewbox = debounce(() => {
    const w = this.stage.clientWidth || 800;
    const hgt = this.stage.clientHeight || 400;
    const vb = [-this.tx / this.k, -this.ty / this.k, w / this.k, hgt / this.k].map((v) => Math.round(v * 10) / 10);
    this.lastViewbox = JSON.stringify(vb);
    this.set({ viewbox: vb });
  }, 250);

  onViewbox() {
    const vb = this.model.get("viewbox");
    if (JSON.stringify(vb) === this.lastViewbox) return;
    if (vb && vb.length === 4) this.applyViewbox(vb);
    else this.fit(false);
  }

  applyViewbox(vb) {
    const w = this.stage.clientWidth || 800;
    this.k = w / vb[2];
    this.tx = -vb[0] * this.k;
    this.ty = -vb[1] * this.k;
    this.applyTransform(false);
  }

  reveal(key, keepZoom, onlyIfHidden) {
    const id = this.drawnId(key) || key;
    let item = this.nodes && this.nodes.get(id);
    const box = (this.scene.boxes || []).find((b) => b.id === id);
    if (!item && box) item = { n: { x: (box.x0 + box.x1) / 2, y: box.y0 + Math.min(160, (box.y1 - box.y0) / 2) } };
    if (!item) return;
    const w = this.stage.clientWidth || 800;
    const hgt = this.stage.clientHeight || 400;
    if (onlyIfHidden) {
      const x = item.n.x * this.k + this.tx;
      const y = item.n.y * this.k + this.ty;
      if (x > 20 && x < w - 20 && y > 20 && y < hgt - 20) return;
    }
    if (!keepZoom && this.k < 0.8) this.k = 1;
    this.tx = w / 2 - item.n.x * this.k;
    this.ty = hgt / 2 - item.n.y * this.k;
    this.applyTransform(true);
  }
}

function edgePath(p) {
  if (!p || p.length < 4) return "";
  const pts = [];
  for (let i = 0; i < p.length; i += 2) pts.push([p[i], p[i + 1]]);
  // dot: 1 + 3k spline points, then maybe the arrow tip
  const spline = (pts.length - 1) % 3 === 0 ? pts : pts.slice(0, pts.length - 1);
  const tip = spline.length === pts.length ? null : pts[pts.length - 1];
  let d = `M${spline[0][0]},${spline[0][1]}`;
  if (spline.length >= 4 && (spline.length - 1) % 3 === 0) {
    for (let i = 1; i + 2 < spline.length; i += 3) d += ` C${spline[i][0]},${spline[i][1]} ${spline[i + 1][0]},${spline[i + 1][1]} ${spline[i + 2][0]},${spline[i + 2][1]}`;
  } else {
    for (let i = 1; i < spline.length; i++) d += ` L${spline[i][0]},${spline[i][1]}`;
  }
  if (tip) d += ` L${tip[0]},${tip[1]}`;
  return d;
}

function drawNode(parent, n) {
  const x = n.x - n.w / 2;
  const y = n.y - n.h / 2;
  const g = s("g", { class: "wbv-node wbv-node-" + n.kind, "data-id": n.id, transform: `translate(${x},${y})` }, parent);
  if (n.shape === "ellipse") {
    s("ellipse", { class: "wbv-shape", cx: n.w / 2, cy: n.h / 2, rx: n.w / 2, ry: n.h / 2, fill: n.fill, stroke: n.stroke }, g);
  } else if (n.shape === "input") {
    s("path", { class: "wbv-shape", d: `M0,0 H${n.w} V${n.h - 6} L${n.w / 2},${n.h} L0,${n.h - 6} Z`, fill: n.fill, stroke: n.stroke }, g);
  } else {
    s("rect", { class: "wbv-shape", width: n.w, height: n.h, rx: n.group ? 7 : 4, fill: n.fill, stroke: n.stroke }, g);
  }
  const lines = n.lines || [];
  let ty = 14;
  lines.forEach((line, i) => {
    stext(g, n.w / 2, ty, line, { class: i === 0 ? "wbv-t0" : "wbv-t1", "text-anchor": "middle", fill: n.text || "#1d1d1d" });
    ty += 13;
  });
  if (n.bands && n.bands.length) {
    let bx = 6;
    const bw = n.w - 12;
    for (const [colour, frac] of n.bands) {
      s("rect", { x: bx, y: ty - 6, width: Math.max(0.5, bw * frac), height: 5, fill: colour }, g);
      bx += bw * frac;
    }
    ty += 5;
  }
  if (n.badges && n.badges.length) {
    let bx = 8;
    for (const b of n.badges) {
      const w = b.text.length * 5.5 + 10;
      s("rect", { x: bx, y: ty - 2, width: w, height: 14, rx: 7, fill: b.fill, class: "wbv-badge" }, g);
      stext(g, bx + w / 2, ty + 8, b.text, { class: "wbv-badge-text", "text-anchor": "middle" });
      bx += w + 4;
    }
  }
  return g;
}

// --- views with an x window (buffers: steps, timeline: µs) ---------------------------

class WindowView extends View {
  plotWidth() {
    return Math.max(300, (this.stage.clientWidth || 900) - 4) - this.left - RIGHT;
  }

  zoomBy(f) {
    const c = (this.win[0] + this.win[1]) / 2;
    this.setWindow(c - (c - this.win[0]) / f, c + (this.win[1] - c) / f);
  }

  zoomAt(f, cx) {
    const [w0, w1] = this.win;
    const at = w0 + ((cx - this.left) / this.plotWidth()) * (w1 - w0);
    this.setWindow(at - (at - w0) / f, at + (w1 - at) / f);
  }

  panBy(dx) {
    const d = (-dx / this.plotWidth()) * (this.win[1] - this.win[0]);
    this.setWindow(this.win[0] + d, this.win[1] + d);
  }

  fit(save) {
    this.win = this.extent();
    this.draw();
    if (save) this.set({ window: [] });
  }

  setWindow(a, b) {
    const [lo, hi] = this.extent();
    const span = Math.max(this.minSpan(), Math.min(hi - lo, b - a));
    a = Math.max(lo, Math.min(a, hi - span));
    this.win = [a, a + span];
    this.draw();
    this.saveWindow();
  }

  saveWindow = debounce(() => {
    this.lastWindow = JSON.stringify(this.win.map((v) => this.roundWindow(v)));
    this.set({ window: JSON.parse(this.lastWindow) });
  }, 250);

  onWindow() {
    const w = this.model.get("window");
    if (JSON.stringify(w) === this.lastWindow) return;
    this.win = w && w.length === 2 ? w.slice() : this.extent();
    this.draw();
  }

  // bring item ``key`` into the window (keeping the zoom when it fits)
  reveal(key) {
    const range = this.rangeOf(key);
    if (!range) return;
    const [w0, w1] = this.win;
    if (range[0] >= w0 && range[1] <= w1) return;
    const span = Math.max(w1 - w0, (range[1] - range[0]) * 4);
    const c = (range[0] + range[1]) / 2;
    this.setWindow(c - span / 2, c + span / 2);
  }
}

// --- buffers -------------------------------------------------------------------------

const LEFT = 76;
const RIGHT = 16;

class BufferView extends WindowView {
  get kind() { return "buffers"; }
  get searchHint() { return "search tensors…"; }
  get emptyPanel() { return "Click a tensor (or search) to see its allocation."; }
  get notHere() { return "no memory in these arenas (see its spec in the graph view)"; }

  build(scene) {
    this.rects = new Map();
    this.segments = new Map();
    const x = scene.x || { lo: 0, hi: 1 };
    const win = this.model.get("window");
    this.win = win && win.length === 2 ? win.slice() : [x.lo, x.hi];
    this.draw();
  }

  redraw() { this.draw(); }

  draw() {
    const scene = this.scene;
    this.svg.replaceChildren();
    this.rects = new Map();
    this.segments = new Map();
    const width = Math.max(300, (this.stage.clientWidth || 900) - 4);
    const plotW = width - LEFT - RIGHT;
    const [w0, w1] = this.win;
    const sx = (v) => LEFT + ((v - w0) / Math.max(1e-9, w1 - w0)) * plotW;
    this.sx = sx;
    let y = 6;
    const clipId = this.clipId();
    const defs = s("defs", null, this.svg);
    const clip = s("clipPath", { id: clipId }, defs);
    const clipRect = s("rect", { x: LEFT, y: 0, width: plotW, height: 10 }, clip);
    const empty = [];
    for (const p of scene.panels || []) {
      if (p.empty) { empty.push(p.title); continue; }
      stext(this.svg, 4, y + 11, p.title, { class: "wbv-panel-title" });
      y += 18;
      const top = y;
      const ph = p.h;
      const sy = (v) => top + ph - (v / p.ymax) * ph;
      s("rect", { x: LEFT, y: top, width: plotW, height: ph, class: "wbv-plot" }, this.svg);
      for (const [v, label] of p.yticks) {
        s("line", { x1: LEFT - 4, x2: LEFT + plotW, y1: sy(v), y2: sy(v), class: "wbv-grid" }, this.svg);
        stext(this.svg, LEFT - 6, sy(v) + 3, label, { class: "wbv-tick", "text-anchor": "end" });
      }
      const g = s("g", { "clip-path": `url(#${clipId}-${p.id})` }, this.svg);
      const pc = s("clipPath", { id: `${clipId}-${p.id}` }, defs);
      s("rect", { x: LEFT, y: top - 1, width: plotW, height: ph + 2 }, pc);
      for (const r of p.rects) {
        if (r.x1 < w0 || r.x0 > w1) continue;
        const x0 = sx(r.x0);
        const x1 = sx(r.x1);
        const el = s("rect", { x: x0, y: sy(r.y1), width: Math.max(0.8, x1 - x0), height: Math.max(0.8, sy(r.y0) - sy(r.y1)), fill: r.fill, class: "wbv-rect", "data-id": r.id }, g);
        this.rects.set(r.id, { el, r, p });
        if (x1 - x0 > r.label.length * 6 + 6 && sy(r.y0) - sy(r.y1) > 12) {
          stext(g, (x0 + x1) / 2, (sy(r.y0) + sy(r.y1)) / 2 + 3.5, r.label, { class: "wbv-rect-label", "text-anchor": "middle" });
        }
      }
      // the arena line, then the lower bound dashed on top of it, both labelled
      s("line", { x1: LEFT, x2: LEFT + plotW, y1: sy(p.arena_bytes), y2: sy(p.arena_bytes), class: "wbv-arena" }, this.svg);
      s("line", { x1: LEFT, x2: LEFT + plotW, y1: sy(p.lower_bound), y2: sy(p.lower_bound), class: "wbv-bound" }, this.svg);
      const equal = p.lower_bound === p.arena_bytes;
      stext(this.svg, LEFT + plotW - 4, sy(p.arena_bytes) - 4, equal ? "arena = lower bound " + fmtBytes(p.arena_bytes) : "arena " + fmtBytes(p.arena_bytes), { class: "wbv-line-label", "text-anchor": "end" });
      if (!equal) stext(this.svg, LEFT + plotW - 4, sy(p.lower_bound) + 11, "lower bound " + fmtBytes(p.lower_bound), { class: "wbv-line-label wbv-bound-label", "text-anchor": "end" });
      y = top + ph + 4;
    }
    clipRect.setAttribute("height", y);
    // the step axis, shared
    const ticks = niceTicks(w0, w1, Math.max(2, Math.floor(plotW / 90))).filter((v) => Number.isInteger(v));
    for (const v of ticks) {
      s("line", { x1: sx(v), x2: sx(v), y1: y, y2: y + 4, class: "wbv-axis" }, this.svg);
      stext(this.svg, sx(v), y + 15, String(v), { class: "wbv-tick", "text-anchor": "middle" });
    }
    stext(this.svg, LEFT + plotW / 2, y + 29, "execution step", { class: "wbv-axis-label", "text-anchor": "middle" });
    y += 38;
    for (const t of empty) {
      stext(this.svg, 4, y + 10, t, { class: "wbv-empty-line" });
      y += 16;
    }
    if (scene.resident && scene.resident.length) {
      y += 6;
      stext(this.svg, 4, y + 10, "resident weights (loaded once, outside the arenas)", { class: "wbv-panel-title" });
      y += 16;
      const maxTotal = Math.max(1, ...scene.resident.map((r) => r.total));
      for (const r of scene.resident) {
        stext(this.svg, LEFT - 6, y + 12, r.device, { class: "wbv-tick", "text-anchor": "end" });
        const barW = (plotW * r.total) / maxTotal;
        let bx = LEFT;
        r.segments.forEach((seg, i) => {
          const w = (barW * seg[1]) / Math.max(1, r.total);
          const el = s("rect", { x: bx, y, width: Math.max(0.3, w), height: 16, class: "wbv-seg " + (i % 2 ? "wbv-seg-b" : "wbv-seg-a"), "data-id": seg[0] }, this.svg);
          this.segments.set(seg[0] + "@" + r.device, { el, seg, r });
          bx += w;
        });
        const inside = barW + 6 > plotW - 160;
        stext(this.svg, inside ? LEFT + 6 : LEFT + barW + 6, y + 12, r.label, { class: inside ? "wbv-seg-label wbv-halo" : "wbv-seg-label" });
        y += 22;
      }
    }
    this.svg.setAttribute("height", y + 4);
    this.svg.setAttribute("width", width);
    this.stage.style.height = y + 8 + "px";
    this.svg.onmousemove = (e) => {
      const id = e.target.dataset && e.target.dataset.id;
      if (!id) return this.hideTip();
      const info = this.itemInfo(id) || this.segmentInfo(id);
      if (info) this.showTip(e, info.title, info.rows);
    };
    this.svg.onmouseleave = () => this.hideTip();
    this.svg.onclick = (e) => {
      if (this.suppressClick) return;
      const id = e.target.dataset && e.target.dataset.id;
      if (id) this.choose(id, id);
    };
    this.highlight();
  }

  clipId() {
    if (!this.uid) this.uid = "wbb" + Math.random().toString(36).slice(2, 9);
    return this.uid;
  }

  storageOf(name) {
    if (name === null || name === undefined) return null;
    const of = this.scene.storage_of || {};
    return of[name] || name;
  }

  keyForFocus(focus) {
    if (focus === null || focus === undefined) return null;
    const st = this.storageOf(focus);
    if (this.rects.has(st)) return st;
    for (const key of this.segments.keys()) if (key.startsWith(focus + "@")) return focus;
    return null;
  }

  searchIndex() {
    const out = [];
    for (const p of this.scene.panels || []) for (const r of p.rects) out.push([r.id, r.id, r.id, p.device]);
    for (const [value, st] of Object.entries(this.scene.storage_of || {})) out.push([value, st, value, "in " + st]);
    for (const r of this.scene.resident || []) for (const seg of r.segments) out.push([seg[0], seg[0], seg[0], "weight on " + r.device]);
    return out;
  }

  itemInfo(key) {
    const item = this.rects && this.rects.get(key);
    if (item) return { title: item.r.title, rows: item.r.rows };
    return this.segmentInfo(key);
  }

  segmentInfo(name) {
    const rows = [];
    let found = false;
    for (const r of this.scene.resident || []) {
      for (const seg of r.segments) {
        if (seg[0] === name) {
          found = true;
          rows.push(["resident on", r.device], ["bytes", fmtBytes(seg[1]) + ` (${seg[1]})`]);
        }
      }
    }
    return found ? { title: name + " (weight)", rows } : null;
  }

  highlight() {
    if (!this.rects) return;
    for (const el of this.svg.querySelectorAll(".wbv-sel")) el.classList.remove("wbv-sel");
    const focus = this.model.get("focus");
    const sel = this.model.get("selected");
    const st = this.storageOf(sel) || this.storageOf(focus);
    const item = st && this.rects.get(st);
    if (item) item.el.classList.add("wbv-sel");
    for (const [key, seg] of this.segments) if (key.startsWith((sel || focus) + "@")) seg.el.classList.add("wbv-sel");
  }

  get left() { return LEFT; }
  extent() {
    const x = this.scene.x || { lo: 0, hi: 1 };
    return [x.lo, x.hi];
  }
  minSpan() { return 2; }
  roundWindow(v) { return Math.round(v * 100) / 100; }
  rangeOf(key) {
    const item = this.rects.get(this.storageOf(key));
    return item ? [item.r.x0, item.r.x1] : null;
  }
}

// --- timeline ------------------------------------------------------------------------

const READABLE = 0.75; // the zoom below which the graph opens on its copies instead of fitting
const MIN_OPEN = 0.6; // the least zoom it opens at on its copies

const LANE = 20;
const TL_LEFT = 128;
const FLOW_MAX = 400; // more arrows than this in the window: only the selection's are drawn

class TimelineView extends WindowView {
  get kind() { return "timeline"; }
  get searchHint() { return "search events…"; }
  get emptyPanel() { return "Click an event (or search) to see its bytes, duration and GB/s."; }
  get notHere() { return "no event of this value in the run"; }

  extraTools(tools) {
    this.filters = h("span", "wbv-filters", tools);
  }

  build(scene) {
    const win = this.model.get("window");
    this.win = win && win.length === 2 ? win.slice() : [scene.t0 || 0, scene.t1 || 1];
    this.filters.replaceChildren();
    const hidden = new Set(this.model.get("hidden_kinds") || []);
    for (const k of scene.present || []) {
      const label = h("label", "wbv-filter", this.filters);
      const box = h("input", null, label);
      box.type = "checkbox";
      box.checked = !hidden.has(k);
      box.dataset.kind = k;
      const sw = h("span", "wbv-swatch", label);
      sw.style.background = (scene.kind_colours || {})[k] || "#999";
      h("span", null, label, k);
      box.addEventListener("change", () => {
        const now = new Set(this.model.get("hidden_kinds") || []);
        if (box.checked) now.delete(k);
        else now.add(k);
        this.set({ hidden_kinds: (scene.kinds || []).filter((x) => now.has(x)) });
      });
    }
    if ((scene.runs || []).some((r) => (r.flows || []).length)) {
      // dependency arrows (a copy → what reads it; a prefetch → the layer it serves)
      const label = h("label", "wbv-filter wbv-flow-toggle", this.filters);
      const box = h("input", null, label);
      box.type = "checkbox";
      box.checked = this.showFlows !== false;
      box.dataset.kind = "arrows";
      h("span", null, label, "arrows");
      box.addEventListener("change", () => {
        this.showFlows = box.checked;
        this.draw();
      });
    }
    this.draw();
  }

  redraw() {
    const hidden = new Set(this.model.get("hidden_kinds") || []);
    for (const box of this.filters.querySelectorAll("input")) box.checked = !hidden.has(box.dataset.kind);
    this.draw();
  }

  draw() {
    const t0 = performance.now();
    const scene = this.scene;
    this.svg.replaceChildren();
    this.bars = [];
    this.byNode = new Map();
    this.byIndex = new Map();
    this.marked = [];
    this.flowEls = [];
    const hidden = new Set(this.model.get("hidden_kinds") || []);
    const width = Math.max(300, (this.stage.clientWidth || 900) - 4);
    const plotW = width - TL_LEFT - RIGHT;
    const [w0, w1] = this.win;
    const sx = (v) => TL_LEFT + ((v - w0) / Math.max(1e-12, w1 - w0)) * plotW;
    const palette = scene.palette || [];
    const kinds = scene.kinds || [];
    const copyKinds = new Set(scene.copy_kinds || []);
    const defs = s("defs", null, this.svg);
    const clipId = (this.uid = this.uid || "wbt" + Math.random().toString(36).slice(2, 9));
    let y = 4;
    // time axis
    const ticks = niceTicks(w0, w1, Math.max(2, Math.floor(plotW / 110)));
    const step = ticks.length > 1 ? ticks[1] - ticks[0] : Math.max(1e-9, w1 - w0);
    const axisY = y + 14;
    for (const v of ticks) {
      s("line", { x1: sx(v), x2: sx(v), y1: axisY + 2, y2: axisY + 6, class: "wbv-axis" }, this.svg);
      stext(this.svg, sx(v), axisY - 2, fmtTickUs(v, step), { class: "wbv-tick", "text-anchor": "middle" });
    }
    y = axisY + 8;
    const top = y;
    (scene.runs || []).forEach((run, ri) => {
      for (const line of wrapParts([run.label + (run.source ? " · " + run.source + ":" : ":")].concat(run.summary.split(" · ")), width - 8, 6.4)) {
        stext(this.svg, 4, y + 12, line, { class: "wbv-panel-title" });
        y += 15;
      }
      y += 3;
      const laneTop = y;
      run.lanes.forEach(([dev, stream], li) => {
        s("rect", { x: TL_LEFT, y: y + li * LANE, width: plotW, height: LANE, class: li % 2 ? "wbv-lane-b" : "wbv-lane-a" }, this.svg);
        stext(this.svg, TL_LEFT - 6, y + li * LANE + 14, dev + " · " + stream, { class: "wbv-tick", "text-anchor": "end" });
      });
      const clip = s("clipPath", { id: `${clipId}-${ri}` }, defs);
      s("rect", { x: TL_LEFT, y: laneTop, width: plotW, height: run.lanes.length * LANE }, clip);
      const g = s("g", { "clip-path": `url(#${clipId}-${ri})` }, this.svg);
      for (let i = 0; i < run.bars.length; i++) {
        const b = run.bars[i];
        const [lane, x0, x1, ki, node, , , ci] = b;
        if (x1 < w0 || x0 > w1 || hidden.has(kinds[ki])) continue;
        const px0 = sx(x0);
        const px1 = sx(x1);
        // a border only where the bar is wide enough to keep its colour inside it
        const cls = px1 - px0 >= 5 ? "wbv-bar" : "wbv-bar wbv-bar-thin";
        const el = s("rect", { x: px0, y: laneTop + lane * LANE + 2, width: Math.max(1, px1 - px0), height: LANE - 4, fill: palette[ci], class: cls, "data-run": ri, "data-i": i }, g);
        const rec = { el, b, ri, i };
        this.bars.push(rec);
        this.byIndex.set(ri + ":" + i, rec);
        if (!this.byNode.has(node)) this.byNode.set(node, []);
        this.byNode.get(node).push(rec);
        const label = copyKinds.has(kinds[ki]) && b[5] ? fmtBytes(b[5]) : node;
        if (px1 - px0 > label.length * 6 + 6) {
          stext(g, Math.max(px0, TL_LEFT) + 3, laneTop + lane * LANE + 14, label, { class: "wbv-bar-label" });
        }
      }
      this.drawFlows(g, run, ri, laneTop);
      y = laneTop + run.lanes.length * LANE + 8;
    });
    this.carets = s("g", { class: "wbv-carets" }, this.svg);
    for (const st of scene.steps || []) {
      if (st.t < w0 || st.t > w1) continue;
      s("line", { x1: sx(st.t), x2: sx(st.t), y1: top, y2: y - 6, class: "wbv-step" }, this.svg);
      stext(this.svg, sx(st.t) + 3, top + 9, st.label, { class: "wbv-step-label" });
    }
    this.svg.setAttribute("height", y + 4);
    this.svg.setAttribute("width", width);
    this.stage.style.height = y + 8 + "px";
    this.svg.onmousemove = (e) => {
      const el = e.target;
      if (!el.dataset || el.dataset.i === undefined) return this.hideTip();
      const info = this.barInfo(Number(el.dataset.run), Number(el.dataset.i));
      this.showTip(e, info.title, info.rows);
    };
    this.svg.onmouseleave = () => this.hideTip();
    this.svg.onclick = (e) => {
      if (this.suppressClick) return;
      const el = e.target;
      if (!el.dataset || el.dataset.i === undefined) return;
      const ri = Number(el.dataset.run);
      const i = Number(el.dataset.i);
      const node = scene.runs[ri].bars[i][4];
      this.choose(ri === 0 ? i : `${ri}:${i}`, node);
    };
    this.highlight();
    timing("timeline:draw", t0);
  }

  // arrows between drawn bars: all of them while few enough to read, else only those of
  // the selection (drawn by highlight)
  drawFlows(g, run, ri, laneTop) {
    const flows = run.flows || [];
    if (!flows.length || this.showFlows === false) return;
    if (!this.flowMarkers) this.flowMarkers = {};
    const defs = this.svg.querySelector("defs");
    const colours = this.scene.flow_colours || ["#555", "#7b3fa0"];
    colours.forEach((c, k) => {
      const id = `${this.uid}-flow-${k}`;
      const m = s("marker", { id, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "6", markerHeight: "6", orient: "auto-start-reverse" }, defs);
      s("path", { d: "M0,0 L10,5 L0,10 z", fill: c }, m);
    });
    const layer = s("g", { class: "wbv-flows" }, g);
    const visible = [];
    for (const f of flows) {
      const a = this.byIndex.get(ri + ":" + f[0]);
      const b = this.byIndex.get(ri + ":" + f[1]);
      if (a && b) visible.push([f, a, b]);
    }
    const all = visible.length <= FLOW_MAX;
    for (const [f, a, b] of visible) {
      const x0 = Number(a.el.getAttribute("x")) + Number(a.el.getAttribute("width"));
      const y0 = laneTop + a.b[0] * LANE + LANE / 2;
      const x1 = Number(b.el.getAttribute("x"));
      const y1 = laneTop + b.b[0] * LANE + LANE / 2;
      const dx = Math.max(12, (x1 - x0) / 2);
      const el = s("path", {
        d: `M${x0},${y0} C${x0 + dx},${y0} ${x1 - dx},${y1} ${x1},${y1}`,
        class: "wbv-flow wbv-flow-" + (this.scene.flow_kinds || [])[f[2]],
        stroke: colours[f[2]] || "#555",
        "marker-end": `url(#${this.uid}-flow-${f[2]})`,
        "data-src": ri + ":" + f[0],
        "data-dst": ri + ":" + f[1],
      }, layer);
      if (!all) el.style.display = "none";
      this.flowEls.push({ el, a, b, all });
    }
    this.root.dataset.flows = String(this.flowEls.filter((x) => x.all).length);
  }

  barInfo(ri, i) {
    const scene = this.scene;
    const run = scene.runs[ri];
    const [lane, x0, x1, ki, node, nbytes, flops, , activity] = run.bars[i];
    const kind = scene.kinds[ki];
    const [dev, stream] = run.lanes[lane];
    const dur = x1 - x0;
    const rows = [["kind", kind], ["node", node], ["lane", dev + " · " + stream], ["start", fmtUs(x0)], ["end", fmtUs(x1)], ["duration", fmtUs(dur)], ["bytes", `${nbytes} (${fmtBytes(nbytes)})`]];
    if ((scene.copy_kinds || []).includes(kind)) rows.push(["bandwidth", (dur > 0 ? nbytes / (dur * 1e3) : 0).toFixed(2) + " GB/s"]);
    if (flops) rows.push(["flops", flops.toLocaleString("en-US")]);
    if (activity && activity !== "op") rows.push(["activity", activity.replace("_", " ") + " (the op's result copied into its planned slot)"]);
    if (scene.runs.length > 1) rows.push(["run", run.label]);
    return { title: `${kind} ${node} (#${i})`, rows };
  }

  parseKey(key) {
    if (key === null || key === undefined) return null;
    if (typeof key === "number") return [0, key];
    const m = String(key).match(/^(\d+):(\d+)$/);
    return m ? [Number(m[1]), Number(m[2])] : null;
  }

  keyForFocus(focus) {
    if (focus === null || focus === undefined) return null;
    const cur = this.parseKey(this.model.get("selected"));
    const runs = this.scene.runs || [];
    if (cur && runs[cur[0]] && runs[cur[0]].bars[cur[1]] && runs[cur[0]].bars[cur[1]][4] === focus) return this.model.get("selected");
    const bars = runs.length ? runs[0].bars : [];
    for (let i = 0; i < bars.length; i++) if (bars[i][4] === focus) return i;
    return null;
  }

  searchIndex() {
    const out = [];
    const seen = new Set();
    const runs = this.scene.runs || [];
    if (!runs.length) return out;
    runs[0].bars.forEach((b, i) => {
      if (seen.has(b[4])) return;
      seen.add(b[4]);
      out.push([b[4], i, b[4], this.scene.kinds[b[3]]]);
    });
    return out;
  }

  itemInfo(key) {
    const k = this.parseKey(key);
    if (!k || !this.scene.runs || !this.scene.runs[k[0]] || !this.scene.runs[k[0]].bars[k[1]]) return null;
    return this.barInfo(k[0], k[1]);
  }

  highlight() {
    if (!this.bars) return;
    // touch only the bars that change: a timeline can hold thousands
    for (const el of this.marked || []) el.classList.remove("wbv-linked", "wbv-sel");
    this.marked = [];
    const focus = this.model.get("focus");
    const k = this.parseKey(this.model.get("selected"));
    for (const bar of (focus !== null && focus !== undefined && this.byNode.get(focus)) || []) {
      bar.el.classList.add("wbv-linked");
      this.marked.push(bar.el);
    }
    const sel = k && this.byIndex.get(k[0] + ":" + k[1]);
    if (sel) {
      sel.el.classList.remove("wbv-linked");
      sel.el.classList.add("wbv-sel");
      this.marked.push(sel.el);
    }
    const marked = new Set(this.marked);
    for (const f of this.flowEls || []) {
      const on = marked.has(f.a.el) || marked.has(f.b.el);
      f.el.classList.toggle("wbv-flow-sel", on);
      f.el.style.display = on || f.all ? "" : "none";
    }
    // a bar a few pixels wide hides its outline: mark it with a caret above its lane too
    this.carets.replaceChildren();
    for (const el of this.marked) {
      const x = Number(el.getAttribute("x")) + Number(el.getAttribute("width")) / 2;
      const y = Number(el.getAttribute("y")) - 1;
      s("path", { d: `M${x - 4},${y - 5} L${x + 4},${y - 5} L${x},${y} z`, class: el.classList.contains("wbv-sel") ? "wbv-caret wbv-caret-sel" : "wbv-caret" }, this.carets);
    }
  }

  get left() { return TL_LEFT; }
  extent() { return [this.scene.t0 || 0, this.scene.t1 || 1]; }
  minSpan() {
    const [lo, hi] = this.extent();
    return (hi - lo) * 1e-5;
  }
  roundWindow(v) { return Number(v.toPrecision(9)); }
  rangeOf(key) {
    const k = this.parseKey(key);
    if (!k) return null;
    const b = this.scene.runs[k[0]].bars[k[1]];
    return [b[1], b[2]];
  }
}

const VIEWS = { graph: GraphView, buffers: BufferView, timeline: TimelineView };

export default {
  render({ model, el }) {
    const kind = model.get("kind");
    const View_ = VIEWS[kind];
    if (!View_) {
      el.textContent = `unknown view kind ${kind}`;
      return;
    }
    const t0 = performance.now();
    const view = new View_(model, el);
    view.rebuild();
    view.lastWidth = view.stage.clientWidth; // drawn for this width already
    afterPaint(() => {
      timing(kind + ":first-paint", t0);
      el.dataset.firstPaintMs = (performance.now() - t0).toFixed(1);
    });
    // the stage width is known only once attached: draw again when it changes
    const ro = new ResizeObserver(() => {
      const w = view.stage.clientWidth;
      if (w && w !== view.lastWidth) {
        const first = !view.lastWidth; // not attached when first drawn (a hidden tab …)
        view.lastWidth = w;
        if (kind === "graph") {
          if (first) {
            view.sizeStage();
            view.open();
          }
          view.updateOverview();
        } else view.draw();
      }
    });
    ro.observe(view.stage);
    return () => {
      ro.disconnect();
      view.destroy();
      view.destroyWindowListeners();
    };
  },
};
