// seda dashboard: polls /_seda/stats (the document that also feeds the experiments;
// Prometheus text comes from the same runtime snapshot), keeps a bounded history in
// the browser, and draws the stage graph and per-stage charts. No libraries.
//
// Rates are counter differences over the server's own clock (`uptime_ms`), so a late
// or skipped poll never distorts them. Polls never overlap: the next one is scheduled
// when the previous one ends. History is bounded (MAX_SAMPLES); a server restart
// (uptime going backwards) clears it.
'use strict';
(() => {
  const params = new URLSearchParams(location.search);
  const POLL_MS = clamp(Number(params.get('interval')) || 1000, 250, 10000);
  const FETCH_TIMEOUT_MS = 4000;
  const MAX_SAMPLES = 900;
  const MIN_SPAN_S = 30;
  const SVGNS = 'http://www.w3.org/2000/svg';
  const CLASS_COLORS = ['c-blue', 'c-pink', 'c-amber', 'c-cyan', 'c-purple', 'c-green'];

  const st = {
    samples: [], // {t: server seconds, doc, d: Map(stage -> derived)}
    windowS: 120,
    paused: false,
    timer: null,
    lastOk: 0,
    lastError: '',
    graphKey: '',
    layout: null,
    rows: new Map(), // stage -> row record
    rowKey: '',
    hoverT: null,
    selected: null,
    sectionCells: new Map(),
  };

  const $ = (id) => document.getElementById(id);

  function clamp(v, lo, hi) { return Math.min(hi, Math.max(lo, v)); }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svg(tag, attrs, parent) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  // ---- number formatting ----------------------------------------------------------

  function fmt(v, digits) {
    if (v === null || v === undefined || !Number.isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100 || Number.isInteger(v)) return Math.round(v).toString();
    return v.toFixed(digits === undefined ? (a >= 10 ? 1 : 2) : digits);
  }

  function fmtMs(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return '–';
    if (v >= 10000) return (v / 1000).toFixed(1) + ' s';
    if (v >= 100) return Math.round(v) + ' ms';
    if (v >= 1) return v.toFixed(1) + ' ms';
    return Math.round(v * 1000) + ' µs';
  }

  function fmtUptime(s) {
    s = Math.floor(s);
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60), sec = s % 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${sec}s`;
    return `${sec}s`;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // ---- derived values per sample --------------------------------------------------

  const refusedOf = (s) => (s.rejected || 0) + (s.full || 0);

  function derive(prev, doc) {
    const dt = prev ? (doc.uptime_ms - prev.doc.uptime_ms) / 1000 : 0;
    const before = new Map();
    if (prev) for (const s of prev.doc.stages) before.set(s.name, s);
    const out = new Map();
    for (const s of doc.stages) {
      const p = before.get(s.name);
      const rate = (f) => (p && dt > 0 ? Math.max(0, (f(s) - f(p)) / dt) : null);
      const a = s.admission || {};
      const pcls = new Map(((p && p.classes) || []).map((c) => [c.class, c]));
      const targets = new Map((a.classes || []).map((c) => [c.class, c]));
      const classes = [];
      const seen = new Set();
      for (const c of s.classes || []) {
        seen.add(c.class);
        const pc = pcls.get(c.class);
        const t = targets.get(c.class) || {};
        classes.push({
          cls: c.class,
          adm: pc && dt > 0 ? Math.max(0, (c.admitted - pc.admitted) / dt) : null,
          rej: pc && dt > 0 ? Math.max(0, (c.rejected - pc.rejected) / dt) : null,
          p90: t.p90_ms ?? null,
          target: t.target_ms ?? null,
          rate: t.rate ?? null,
        });
      }
      for (const [k, t] of targets) {
        if (!seen.has(k)) classes.push({ cls: k, adm: null, rej: null, p90: t.p90_ms ?? null, target: t.target_ms ?? null, rate: t.rate ?? null });
      }
      classes.sort((x, y) => x.cls - y.cls);
      out.set(s.name, {
        queue: s.queue_len,
        capacity: s.capacity,
        busy: s.threads_busy,
        idle: s.threads_idle,
        threads: s.threads,
        enq: rate((x) => x.enqueued),
        adm: rate((x) => x.admitted),
        rej: rate(refusedOf),
        proc: rate((x) => x.processed),
        p90: s.rt_p90_ms ?? (s.response_time && s.response_time.count ? s.response_time.p90_ms : null),
        ctlP90: a.p90_ms ?? null,
        target: s.rt_target_ms ?? a.target_ms ?? null,
        arate: a.rate ?? s.admission_rate ?? null,
        limit: a.limit ?? null,
        batch: s.batch_size,
        quality: s.quality ?? null,
        policy: a.policy || 'none',
        enabled: !!(a.enabled || s.admission_enabled),
        state: s.state,
        model: s.thread_model,
        everUsed: (s.enqueued || 0) + (s.processed || 0) > 0,
        classes,
      });
    }
    return out;
  }

  function health(d) {
    if (!d) return 'idle';
    if ((d.rej || 0) > 0 || (d.p90 && d.target && d.p90 > d.target)) return 'over';
    if ((d.capacity && d.queue > 0.5 * d.capacity) || (d.p90 && d.target && d.p90 > 0.8 * d.target)) return 'warn';
    if (!d.everUsed && !d.busy) return 'idle';
    return 'ok';
  }

  // ---- polling --------------------------------------------------------------------

  async function poll() {
    st.timer = null;
    if (st.paused) return;
    const started = performance.now();
    const ctl = new AbortController();
    const abort = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const r = await fetch('/_seda/stats', { cache: 'no-store', signal: ctl.signal });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      ingest(await r.json());
      st.lastOk = Date.now();
      st.lastError = '';
    } catch (e) {
      st.lastError = e.name === 'AbortError' ? 'no answer' : String(e.message || e);
    } finally {
      clearTimeout(abort);
    }
    renderStatus();
    if (!st.paused) st.timer = setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
  }

  function ingest(doc) {
    if (!doc || !Array.isArray(doc.stages)) throw new Error('not a stats document');
    doc.edges = Array.isArray(doc.edges) ? doc.edges : [];
    let prev = st.samples[st.samples.length - 1];
    if (prev && doc.uptime_ms < prev.doc.uptime_ms) {
      st.samples = []; // the server restarted: its counters start again
      prev = undefined;
    }
    if (prev && doc.uptime_ms === prev.doc.uptime_ms) return;
    st.samples.push({ t: doc.uptime_ms / 1000, doc, d: derive(prev, doc) });
    if (st.samples.length > MAX_SAMPLES) st.samples.splice(0, st.samples.length - MAX_SAMPLES);
    // Keep only the newest full document (and the one before it for section rates).
    const n = st.samples.length;
    if (n > 2) st.samples[n - 3].doc = { uptime_ms: st.samples[n - 3].doc.uptime_ms, stages: [], edges: [] };
    render();
  }

  function renderStatus() {
    const s = $('status');
    let state, text;
    if (st.paused) { state = 'paused'; text = 'paused'; }
    else if (st.lastError && (!st.lastOk || Date.now() - st.lastOk > 3 * POLL_MS)) {
      state = 'error';
      text = st.lastOk ? `no data for ${Math.round((Date.now() - st.lastOk) / 1000)} s: ${st.lastError}` : `error: ${st.lastError}`;
    } else if (st.lastOk && Date.now() - st.lastOk > 2.5 * POLL_MS) {
      state = 'stale'; text = `stale ${Math.round((Date.now() - st.lastOk) / 1000)} s`;
    } else if (st.lastOk) { state = 'live'; text = `live · every ${POLL_MS / 1000} s`; }
    else { state = 'connecting'; text = 'connecting'; }
    s.dataset.state = state;
    s.lastChild.textContent = text;
  }

  // ---- rendering: header ----------------------------------------------------------

  function render() {
    const last = st.samples[st.samples.length - 1];
    if (!last) return;
    document.body.dataset.samples = String(st.samples.length);
    document.body.dataset.uptimeMs = String(last.doc.uptime_ms);
    renderGraph(last);
    renderHeader(last);
    renderStages();
    renderSections();
  }

  function tile(parent, key, value, cls) {
    const t = el('div', 'tile' + (cls ? ' ' + cls : ''));
    t.appendChild(el('div', 'k', key));
    t.appendChild(el('div', 'v', value));
    t.dataset.key = key;
    parent.appendChild(t);
  }

  function renderHeader(last) {
    const doc = last.doc;
    const names = Object.keys(doc).filter((k) => doc[k] && typeof doc[k] === 'object' && !Array.isArray(doc[k]));
    $('service').textContent = names.join(' · ');
    document.title = `seda · ${names.join(' · ') || 'dashboard'}`;
    const inRate = entryRate(last);
    let refused = null, busy = 0, threads = 0, worst = null;
    for (const s of doc.stages) {
      const d = last.d.get(s.name);
      if (!d) continue;
      if (d.rej !== null) refused = (refused || 0) + d.rej;
      busy += d.busy || 0;
      threads += d.threads || 0;
      if (d.p90 && d.target) worst = Math.max(worst || 0, d.p90 / d.target);
    }
    const box = $('summary');
    box.textContent = '';
    tile(box, 'uptime', fmtUptime(doc.uptime_ms / 1000));
    tile(box, 'stages', String(doc.stages.length));
    tile(box, 'threads busy', doc.thread_model === 'shared' && doc.shared_workers
      ? `${busy} / ${doc.shared_workers}+` : `${busy} / ${threads}`);
    tile(box, 'in / s', fmt(inRate));
    tile(box, 'refused / s', fmt(refused), refused > 0 ? 'bad' : 'good');
    tile(box, 'worst p90 / target', worst === null ? '–' : Math.round(100 * worst) + ' %',
      worst === null ? '' : worst > 1 ? 'bad' : worst > 0.8 ? 'warn' : 'good');
  }

  // Events entering the graph per second: the enqueue rate of the first layer of the
  // layout that has any (an I/O stage that feeds the graph from outside the runtime's
  // queues enqueues nothing itself).
  function entryRate(last) {
    const L = st.layout;
    if (!L) return null;
    const byLayer = new Map();
    L.nodes.forEach((nd) => {
      const d = last.d.get(nd.name);
      if (nd.layer < 0 || !d || d.enq === null) return;
      byLayer.set(nd.layer, (byLayer.get(nd.layer) || 0) + d.enq);
    });
    const layers = [...byLayer.keys()].sort((a, b) => a - b);
    for (const l of layers) if (byLayer.get(l) > 0) return byLayer.get(l);
    return layers.length ? 0 : null;
  }

  // ---- the stage graph ------------------------------------------------------------

  // Layered (Sugiyama-style) layout, left to right: cycles broken by a DFS from the
  // entry stages, layers by longest path, order in a layer by barycentre sweeps.
  function layoutGraph(names, edges, width) {
    const n = names.length;
    const idx = new Map(names.map((x, i) => [x, i]));
    const E = [];
    for (const [f, t] of edges) if (idx.has(f) && idx.has(t)) E.push([idx.get(f), idx.get(t)]);
    const out = names.map(() => []), inn = names.map(() => []);
    for (const [f, t] of E) if (f !== t) { out[f].push(t); inn[t].push(f); }
    const back = new Set();
    const mark = new Array(n).fill(0);
    const dfs = (u) => {
      mark[u] = 1;
      for (const v of out[u]) {
        if (mark[v] === 1) back.add(u + '>' + v);
        else if (mark[v] === 0) dfs(v);
      }
      mark[u] = 2;
    };
    for (let i = 0; i < n; i++) if (!inn[i].length && mark[i] === 0) dfs(i);
    for (let i = 0; i < n; i++) if (mark[i] === 0) dfs(i);
    const fwd = E.filter(([f, t]) => f !== t && !back.has(f + '>' + t));
    const preds = names.map(() => []), succs = names.map(() => []);
    for (const [f, t] of fwd) { preds[t].push(f); succs[f].push(t); }
    // Longest-path layering over the acyclic edges (Kahn's order).
    const layer = new Array(n).fill(0);
    const indeg = preds.map((p) => p.length);
    const queue = [];
    for (let i = 0; i < n; i++) if (!indeg[i]) queue.push(i);
    while (queue.length) {
      const u = queue.shift();
      for (const v of succs[u]) {
        layer[v] = Math.max(layer[v], layer[u] + 1);
        if (--indeg[v] === 0) queue.push(v);
      }
    }
    const connected = names.map((_, i) => out[i].length + inn[i].length > 0);
    const nl = Math.max(0, ...layer.filter((_, i) => connected[i])) + 1;
    const layers = Array.from({ length: nl }, () => []);
    const isolated = [];
    for (let i = 0; i < n; i++) (connected[i] ? layers[layer[i]] : isolated).push(i);
    const pos = new Array(n).fill(0);
    const setPos = () => layers.forEach((L) => L.forEach((v, k) => { pos[v] = (k + 0.5) / L.length; }));
    setPos();
    const sweep = (L, nbrs) => {
      const key = new Map(L.map((v) => {
        const ns = nbrs[v];
        return [v, ns.length ? ns.reduce((a, u) => a + pos[u], 0) / ns.length : pos[v]];
      }));
      L.sort((a, b) => key.get(a) - key.get(b));
    };
    for (let it = 0; it < 6; it++) {
      for (let l = 1; l < nl; l++) { sweep(layers[l], preds); setPos(); }
      for (let l = nl - 2; l >= 0; l--) { sweep(layers[l], succs); setPos(); }
    }
    // Coordinates.
    const nodeW = 176, nodeH = 44, rowH = 74, padX = 54, padTop = 16;
    const maxRows = Math.max(1, ...layers.map((L) => L.length));
    const colGap = nl > 1 ? Math.max(nodeW + 40, (width - 2 * padX - nodeW) / (nl - 1)) : 0;
    const bodyH = maxRows * rowH;
    const nodes = new Array(n);
    layers.forEach((L, l) => {
      const off = (bodyH - L.length * rowH) / 2;
      L.forEach((v, k) => {
        nodes[v] = { name: names[v], x: padX + l * colGap, y: padTop + off + k * rowH + (rowH - nodeH) / 2, w: nodeW, h: nodeH, layer: l };
      });
    });
    let h = padTop + bodyH + 8;
    const hasBack = E.some(([f, t]) => f !== t && (back.has(f + '>' + t) || layer[t] <= layer[f]));
    if (hasBack) h += 34;
    let stripY = null;
    if (isolated.length) {
      stripY = h + 10;
      const perRow = Math.max(1, Math.floor((Math.max(width, 400) - 2 * padX + 14) / (nodeW + 14)));
      isolated.forEach((v, k) => {
        nodes[v] = { name: names[v], x: padX + (k % perRow) * (nodeW + 14), y: stripY + 18 + Math.floor(k / perRow) * (nodeH + 12), w: nodeW, h: nodeH, layer: -1 };
      });
      h = stripY + 18 + Math.ceil(isolated.length / perRow) * (nodeH + 12);
    }
    const w = Math.max(width, padX * 2 + (nl - 1) * colGap + nodeW);
    return { nodes, edges: E, back, layer, width: w, height: h + 6, stripY, bodyBottom: padTop + bodyH, idx };
  }

  // Traffic of each edge, events/s. The runtime counts events per stage, not per edge:
  // a stage's enqueue rate is split across the stages that called it, in proportion to
  // their processing rates.
  function edgeRates(layout, d) {
    const rates = new Map();
    const callers = new Map();
    for (const [f, t] of layout.edges) {
      if (!callers.has(t)) callers.set(t, []);
      callers.get(t).push(f);
    }
    for (const [t, fs] of callers) {
      const dt = d.get(layout.nodes[t].name);
      const total = dt ? dt.enq : null;
      const w = fs.map((f) => { const df = d.get(layout.nodes[f].name); return df && df.proc ? df.proc : 0; });
      const sum = w.reduce((a, b) => a + b, 0);
      fs.forEach((f, k) => {
        rates.set(f + '>' + t, total === null ? null : sum > 0 ? total * w[k] / sum : total / fs.length);
      });
    }
    return rates;
  }

  function renderGraph(last) {
    const doc = last.doc;
    const box = $('graph-box');
    const width = Math.max(600, box.clientWidth);
    const names = doc.stages.map((s) => s.name);
    const key = JSON.stringify([names, doc.edges, Math.round(width / 40)]);
    const g = $('graph');
    if (key !== st.graphKey) {
      st.graphKey = key;
      st.layout = layoutGraph(names, doc.edges, width);
      drawGraphSkeleton(g, st.layout);
    }
    updateGraph(g, st.layout, last.d);
  }

  function edgePath(a, b, layout, isBack) {
    if (a === b) {
      const x = a.x + a.w - 26, y = a.y;
      return `M${x},${y} C${x - 8},${y - 26} ${x + 34},${y - 26} ${x + 22},${y}`;
    }
    if (!isBack && b.x > a.x) {
      const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x - 7, y2 = b.y + b.h / 2;
      const c = Math.max(30, (x2 - x1) / 2);
      return `M${x1},${y1} C${x1 + c},${y1} ${x2 - c},${y2} ${x2},${y2}`;
    }
    // Back edge (a cycle) or within a layer: an arc below the graph.
    const y = layout.bodyBottom + 26;
    const x1 = a.x + a.w / 2 + 12, y1 = a.y + a.h, x2 = b.x + b.w / 2 - 12, y2 = b.y + b.h + 6;
    return `M${x1},${y1} C${x1},${y} ${x2},${y} ${x2},${y2}`;
  }

  // Where on its path an edge's label goes: the point nearest the middle whose label
  // box (sized for "9999/s") overlaps no node and no label placed before.
  function labelSpot(p, layout, placed) {
    const len = p.getTotalLength();
    const w = 46, h = 14;
    const hits = (x, y) => {
      const box = { x0: x - w / 2, x1: x + w / 2, y0: y - h / 2, y1: y + h / 2 };
      const over = (o) => box.x0 < o.x1 && o.x0 < box.x1 && box.y0 < o.y1 && o.y0 < box.y1;
      return layout.nodes.some((n) => n && over({ x0: n.x - 2, x1: n.x + n.w + 2, y0: n.y - 2, y1: n.y + n.h + 2 })) || placed.some(over);
    };
    let best = null;
    for (const f of [0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78]) {
      const pt = p.getPointAtLength(len * f);
      for (const dy of [-9, 9]) {
        if (!hits(pt.x, pt.y + dy)) { best = { x: pt.x, y: pt.y + dy }; break; }
      }
      if (best) break;
    }
    if (!best) { const pt = p.getPointAtLength(len / 2); best = { x: pt.x, y: pt.y - 9 }; }
    placed.push({ x0: best.x - w / 2, x1: best.x + w / 2, y0: best.y - h / 2, y1: best.y + h / 2 });
    return best;
  }

  function drawGraphSkeleton(g, layout) {
    g.textContent = '';
    g.setAttribute('width', layout.width);
    g.setAttribute('height', layout.height);
    g.setAttribute('viewBox', `0 0 ${layout.width} ${layout.height}`);
    const defs = svg('defs', {}, g);
    const m = svg('marker', { id: 'graph-arrow', viewBox: '0 0 10 10', refX: '2', refY: '5', markerWidth: '9', markerHeight: '9', markerUnits: 'userSpaceOnUse', orient: 'auto' }, defs);
    svg('path', { d: 'M0,0 L10,5 L0,10 z' }, m);
    const eg = svg('g', { class: 'edges' }, g);
    const lg = svg('g', { class: 'labels' }, g);
    const ng = svg('g', { class: 'nodes' }, g);
    layout.edgeEls = [];
    const placed = [];
    for (const [f, t] of layout.edges) {
      const a = layout.nodes[f], b = layout.nodes[t];
      const isBack = f === t || layout.back.has(f + '>' + t) || b.x <= a.x;
      const p = svg('path', { class: 'edge' + (isBack ? ' back' : ''), d: edgePath(a, b, layout, isBack), 'marker-end': 'url(#graph-arrow)' }, eg);
      p.dataset.from = a.name;
      p.dataset.to = b.name;
      const label = svg('text', { class: 'edge-label', 'text-anchor': 'middle' }, lg);
      const at = labelSpot(p, layout, placed);
      label.setAttribute('x', at.x);
      label.setAttribute('y', at.y + 4);
      layout.edgeEls.push({ f, t, p, label });
    }
    // Entry arrows for stages that events enter from outside the runtime.
    layout.entryEls = [];
    const hasIn = new Set(layout.edges.filter(([f, t]) => f !== t).map(([, t]) => t));
    layout.nodes.forEach((nd, i) => {
      if (hasIn.has(i) || nd.layer < 0) return;
      const y = nd.y + nd.h / 2;
      svg('path', { class: 'entry', d: `M${nd.x - 44},${y} L${nd.x - 7},${y}`, 'marker-end': 'url(#graph-arrow)' }, eg);
      const label = svg('text', { class: 'entry-label', x: nd.x - 46, y: y - 6 }, lg);
      layout.entryEls.push({ i, label });
    });
    if (layout.stripY !== null) {
      const t = svg('text', { class: 'strip-label', x: 54, y: layout.stripY + 8 }, g);
      t.textContent = 'no edges observed yet';
    }
    layout.nodeEls = layout.nodes.map((nd) => {
      const gr = svg('g', { class: 'node', transform: `translate(${nd.x},${nd.y})` }, ng);
      gr.dataset.stage = nd.name;
      svg('title', {}, gr).textContent = nd.name;
      svg('rect', { width: nd.w, height: nd.h, rx: 7 }, gr);
      const title = svg('text', { class: 'title', x: 10, y: 17 }, gr);
      title.textContent = nd.name.length > 24 ? nd.name.slice(0, 23) + '…' : nd.name;
      const sub = svg('text', { class: 'sub', x: 10, y: 34 }, gr);
      gr.addEventListener('click', () => select(nd.name));
      return { gr, sub };
    });
  }

  function updateGraph(g, layout, d) {
    const rates = edgeRates(layout, d);
    const max = Math.max(1, ...[...rates.values()].filter((v) => v !== null));
    for (const e of layout.edgeEls) {
      const r = rates.get(e.f + '>' + e.t);
      const w = r ? 1.4 + 9 * Math.sqrt(r / max) : 1.4;
      e.p.setAttribute('stroke-width', w.toFixed(2));
      const callee = d.get(layout.nodes[e.t].name);
      e.p.classList.toggle('hot', !!r && r > 0);
      e.p.classList.toggle('refusing', !!callee && (callee.rej || 0) > 0);
      e.p.dataset.rate = r === null || r === undefined ? '' : r.toFixed(3);
      e.label.textContent = r >= 0.05 ? `${fmt(r)}/s` : '';
    }
    for (const { i, label } of layout.entryEls) {
      const dn = d.get(layout.nodes[i].name);
      label.setAttribute('text-anchor', 'end');
      label.textContent = dn && dn.enq >= 0.05 ? `${fmt(dn.enq)}/s` : '';
    }
    layout.nodes.forEach((nd, i) => {
      const dn = d.get(nd.name);
      const { gr, sub } = layout.nodeEls[i];
      const hs = health(dn);
      gr.setAttribute('class', `node ${hs}${st.selected === nd.name ? ' selected' : ''}`);
      if (!dn) { sub.textContent = ''; return; }
      const parts = [`${fmt(dn.proc)}/s`, `q ${dn.queue}`];
      if (dn.target) parts.push(`p90 ${fmtMs(dn.p90)}`);
      else if (dn.busy) parts.push(`busy ${dn.busy}`);
      sub.textContent = parts.join(' · ');
    });
  }

  // ---- per-stage charts -----------------------------------------------------------

  // Each column: what it draws, from a derived stage record `d`.
  const COLUMNS = [
    {
      key: 'queue', title: 'queue length',
      series: (d) => [{ v: d.queue, c: 'c-blue', area: true, label: 'waiting' }],
      value: (d) => `${fmt(d.queue)}<dim> / ${fmt(d.capacity)}</dim>`,
    },
    {
      key: 'threads', title: 'threads busy / idle',
      series: (d) => [
        { v: d.busy, c: 'c-amber', area: true, label: 'busy' },
        { v: d.idle, c: 'c-gray', label: 'idle' },
      ],
      value: (d) => `${fmt(d.busy)}<dim> busy · ${fmt(d.idle)} idle</dim>`,
    },
    {
      key: 'flow', title: 'admitted / rejected per s',
      series: (d) => [
        { v: d.adm, c: 'c-green', area: true, label: 'admitted' },
        { v: d.rej, c: 'c-red', label: 'rejected' },
      ],
      value: (d) => `${fmt(d.adm)}<dim> ok · </dim>${d.rej ? `<bad>${fmt(d.rej)}</bad>` : fmt(d.rej)}<dim> rej</dim>`,
      cls: (c) => [
        { v: c.adm, c: CLASS_COLORS[c.cls % CLASS_COLORS.length], label: `class ${c.cls} admitted` },
        { v: c.rej, c: 'c-red', label: `class ${c.cls} rejected` },
      ],
      clsValue: (c) => `${fmt(c.adm)}<dim> ok · </dim>${c.rej ? `<bad>${fmt(c.rej)}</bad>` : fmt(c.rej)}<dim> rej</dim>`,
    },
    {
      key: 'p90', title: 'p90 vs target',
      series: (d) => [
        { v: d.p90, c: 'c-purple', area: true, label: 'p90' },
        { v: d.ctlP90, c: 'c-cyan', label: 'controller p90' },
      ],
      target: (d) => d.target,
      value: (d) => d.target
        ? `${d.p90 > d.target ? `<bad>${fmtMs(d.p90)}</bad>` : `<ok>${fmtMs(d.p90)}</ok>`}<dim> / ${fmtMs(d.target)}</dim>`
        : fmtMs(d.p90),
      cls: (c) => [{ v: c.p90, c: CLASS_COLORS[c.cls % CLASS_COLORS.length], label: `class ${c.cls} p90` }],
      clsTarget: (c) => c.target,
      clsValue: (c) => `${fmtMs(c.p90)}<dim> / ${fmtMs(c.target)}</dim>`,
    },
    {
      key: 'admission', title: 'admission rate',
      series: (d) => [
        d.arate !== null
          ? { v: d.arate, c: 'c-cyan', area: true, label: 'tokens/s' }
          : { v: d.limit, c: 'c-cyan', area: true, label: 'limit' },
      ],
      value: (d) => d.arate !== null ? `${fmt(d.arate)}<dim>/s ${d.enabled ? '' : '(off)'}</dim>`
        : d.limit !== null ? `${fmt(d.limit)}<dim> limit</dim>` : `<dim>${d.policy}</dim>`,
      cls: (c) => [{ v: c.rate, c: CLASS_COLORS[c.cls % CLASS_COLORS.length], label: `class ${c.cls} tokens/s` }],
      clsValue: (c) => `${fmt(c.rate)}<dim>/s</dim>`,
    },
    {
      key: 'batch', title: 'batch size',
      series: (d) => [{ v: d.batch, c: 'c-blue', label: 'events per batch' }],
      value: (d) => `${fmt(d.batch)}${d.quality !== null ? `<dim> · quality ${fmt(d.quality, 2)}</dim>` : ''}`,
    },
  ];

  // Inline markup of value labels: only these three tags, built from our own strings.
  function setValue(node, markup) {
    node.textContent = '';
    const re = /<(dim|bad|ok)>(.*?)<\/\1>/g;
    let at = 0, m;
    while ((m = re.exec(markup))) {
      if (m.index > at) node.appendChild(document.createTextNode(markup.slice(at, m.index)));
      node.appendChild(el('span', m[1], m[2]));
      at = re.lastIndex;
    }
    if (at < markup.length) node.appendChild(document.createTextNode(markup.slice(at)));
  }

  function stageOrder(last) {
    const names = last.doc.stages.map((s) => s.name);
    if (!st.layout) return names;
    const L = st.layout;
    return names.slice().sort((a, b) => {
      const na = L.nodes[L.idx.get(a)], nb = L.nodes[L.idx.get(b)];
      if (!na || !nb) return 0;
      const la = na.layer < 0 ? 1e9 : na.layer, lb = nb.layer < 0 ? 1e9 : nb.layer;
      return la - lb || na.y - nb.y || na.x - nb.x;
    });
  }

  function buildRows(order, last) {
    const grid = $('stages');
    grid.textContent = '';
    st.rows = new Map();
    grid.style.gridTemplateColumns = `minmax(150px, 210px) repeat(${COLUMNS.length}, minmax(130px, 1fr))`;
    const head = el('div', 'head', 'stage');
    grid.appendChild(head);
    for (const c of COLUMNS) {
      const h = el('div', 'head', c.title);
      const sample = last.d.values().next().value;
      const legend = el('span', 'legend');
      if (sample) {
        for (const s of c.series(sample)) {
          if (!s.label) continue;
          legend.appendChild(el('span', 'sw ' + s.c));
          legend.appendChild(document.createTextNode(s.label));
        }
        if (c.target) { legend.appendChild(el('span', 'sw c-red')); legend.appendChild(document.createTextNode('target')); }
      }
      h.appendChild(legend);
      grid.appendChild(h);
    }
    for (const name of order) {
      const d = last.d.get(name);
      const row = { name, cells: [], classRows: new Map(), nameEl: null, els: [] };
      const ne = el('div', 'stage-name');
      ne.dataset.stage = name;
      ne.appendChild(el('div', 'n', name)).title = name;
      const b = el('div', 'b');
      ne.appendChild(b);
      row.nameEl = ne;
      row.badges = b;
      grid.appendChild(ne);
      row.els.push(ne);
      for (const c of COLUMNS) {
        const cell = makeCell(name, c.key);
        grid.appendChild(cell.root);
        row.els.push(cell.root);
        row.cells.push(cell);
      }
      for (const k of (d && d.classes.length > 1 ? d.classes : [])) {
        const cr = { els: [], cells: [] };
        const cn = el('div', 'stage-name class-row');
        cn.appendChild(el('div', 'n', `class ${k.cls}`));
        grid.appendChild(cn);
        cr.els.push(cn);
        for (const c of COLUMNS) {
          const cell = makeCell(`${name}#${k.cls}`, c.key);
          if (!c.cls) cell.root.classList.add('empty');
          grid.appendChild(cell.root);
          cr.els.push(cell.root);
          cr.cells.push(cell);
        }
        row.classRows.set(k.cls, cr);
      }
      st.rows.set(name, row);
    }
  }

  function makeCell(id, metric) {
    const root = el('div', 'cell');
    root.dataset.stage = id;
    root.dataset.metric = metric;
    const val = el('div', 'val');
    const max = el('div', 'max');
    const s = svg('svg', { viewBox: '0 0 200 44', preserveAspectRatio: 'none' });
    svg('line', { class: 'grid', x1: 0, x2: 200, y1: 22, y2: 22, 'vector-effect': 'non-scaling-stroke' }, s);
    const layer = svg('g', {}, s);
    const cross = svg('line', { class: 'cross', y1: 0, y2: 44, x1: 0, x2: 0, visibility: 'hidden', 'vector-effect': 'non-scaling-stroke' }, s);
    root.append(val, max, s);
    s.addEventListener('mousemove', (ev) => hover(ev, s));
    s.addEventListener('mouseleave', () => { st.hoverT = null; scheduleHoverRender(); });
    return { root, val, max, s, layer, cross };
  }

  let hoverPending = false;
  function scheduleHoverRender() {
    if (hoverPending) return;
    hoverPending = true;
    requestAnimationFrame(() => { hoverPending = false; renderStages(); });
  }

  function hover(ev, s) {
    const last = st.samples[st.samples.length - 1];
    if (!last) return;
    const r = s.getBoundingClientRect();
    const f = clamp((ev.clientX - r.left) / Math.max(1, r.width), 0, 1);
    const [t0, t1] = st.span || [last.t - st.windowS, last.t];
    st.hoverT = t0 + f * (t1 - t0);
    scheduleHoverRender();
  }

  // One chart: series of [t, v] with gaps at nulls; y from 0 to a nice maximum.
  function drawCell(cell, lines, target, t0, t1, valueMarkup) {
    let vmax = 0;
    for (const l of lines) for (const [, v] of l.pts) if (v !== null && v > vmax) vmax = v;
    if (target) for (const [, v] of target) if (v !== null && v > vmax) vmax = v;
    const ymax = niceMax(vmax);
    const X = (t) => ((t - t0) / (t1 - t0)) * 200;
    const Y = (v) => 44 - (v / ymax) * 42 - 1;
    cell.layer.textContent = '';
    for (const l of lines) {
      let d = '', area = '', runStart = null, prevX = null;
      for (const [t, v] of l.pts) {
        if (v === null || v === undefined || !Number.isFinite(v)) {
          if (runStart !== null && l.area) area += `L${prevX.toFixed(1)},44 L${runStart.toFixed(1)},44 Z`;
          runStart = null;
          continue;
        }
        const x = X(t), y = Y(v);
        if (runStart === null) { d += `M${x.toFixed(1)},${y.toFixed(1)}`; area += `M${x.toFixed(1)},44 L${x.toFixed(1)},${y.toFixed(1)}`; runStart = x; }
        else { d += `L${x.toFixed(1)},${y.toFixed(1)}`; area += `L${x.toFixed(1)},${y.toFixed(1)}`; }
        prevX = x;
      }
      if (runStart !== null && l.area) area += `L${prevX.toFixed(1)},44 L${runStart.toFixed(1)},44 Z`;
      if (l.area && area) svg('path', { class: 'a ' + l.c, d: area }, cell.layer);
      if (d) svg('path', { class: 's ' + l.c, d, 'vector-effect': 'non-scaling-stroke' }, cell.layer);
    }
    if (target) {
      let d = '';
      let open = false;
      for (const [t, v] of target) {
        if (v === null || v === undefined) { open = false; continue; }
        d += `${open ? 'L' : 'M'}${X(t).toFixed(1)},${Y(v).toFixed(1)}`;
        open = true;
      }
      if (d) svg('path', { class: 'target', d, 'vector-effect': 'non-scaling-stroke' }, cell.layer);
    }
    const hx = st.hoverT === null ? 0 : X(st.hoverT);
    cell.cross.setAttribute('x1', hx);
    cell.cross.setAttribute('x2', hx);
    cell.cross.setAttribute('visibility', st.hoverT === null ? 'hidden' : 'visible');
    cell.max.textContent = vmax > 0 ? fmt(ymax) : '';
    setValue(cell.val, valueMarkup);
  }

  function renderStages() {
    const last = st.samples[st.samples.length - 1];
    if (!last) return;
    const order = stageOrder(last);
    const classKey = order.map((n) => { const d = last.d.get(n); return d && d.classes.length > 1 ? d.classes.map((c) => c.cls).join('.') : ''; });
    const rowKey = JSON.stringify([order, classKey]);
    if (rowKey !== st.rowKey) { st.rowKey = rowKey; buildRows(order, last); }
    // The charts span the window, or the history so far (at least MIN_SPAN) while it
    // is shorter, so that a freshly opened page is not a row of empty charts.
    const t1 = last.t;
    const t0 = t1 - clamp(t1 - st.samples[0].t, MIN_SPAN_S, st.windowS);
    st.span = [t0, t1];
    const win = st.samples.filter((s) => s.t >= t0 - 1);
    // The sample shown in the value labels: the newest, or the one under the cursor.
    let shown = last;
    if (st.hoverT !== null) {
      let best = Infinity;
      for (const s of win) { const e = Math.abs(s.t - st.hoverT); if (e < best) { best = e; shown = s; } }
    }
    $('stages').classList.toggle('hide-idle', $('hide-idle').checked);
    for (const [name, row] of st.rows) {
      const d = last.d.get(name);
      const ds = shown.d.get(name);
      const hs = health(d);
      const idle = hs === 'idle';
      for (const e of row.els) {
        e.classList.toggle('idle-row', idle);
        e.classList.toggle('row-selected', st.selected === name);
      }
      for (const cr of row.classRows.values()) for (const e of cr.els) e.classList.toggle('idle-row', idle);
      renderBadges(row, d, hs);
      if (!d) continue;
      COLUMNS.forEach((c, k) => {
        const lines = c.series(d).map((s, j) => ({
          c: s.c, area: s.area,
          pts: win.map((w) => { const x = w.d.get(name); return [w.t, x ? c.series(x)[j].v : null]; }),
        }));
        const target = c.target ? win.map((w) => { const x = w.d.get(name); return [w.t, x ? c.target(x) : null]; }) : null;
        const cell = row.cells[k];
        cell.root.dataset.value = String(c.series(d)[0].v ?? '');
        drawCell(cell, lines, target, t0, t1, ds ? c.value(ds) : '–');
      });
      for (const [cls, cr] of row.classRows) {
        const pick = (w) => { const x = w.d.get(name); return x ? x.classes.find((q) => q.cls === cls) : null; };
        const cur = pick(shown);
        COLUMNS.forEach((c, k) => {
          const cell = cr.cells[k];
          if (!c.cls) return;
          const tmpl = c.cls(cur || { cls });
          const lines = tmpl.map((s, j) => ({ c: s.c, area: false, pts: win.map((w) => { const q = pick(w); return [w.t, q ? c.cls(q)[j].v : null]; }) }));
          const target = c.clsTarget ? win.map((w) => { const q = pick(w); return [w.t, q ? c.clsTarget(q) : null]; }) : null;
          // A stage may count classes without per-class admission state: leave it blank.
          const none = lines.every((l) => l.pts.every(([, v]) => v === null || v === undefined));
          cell.root.classList.toggle('empty', none);
          if (none) { cell.layer.textContent = ''; cell.val.textContent = ''; cell.max.textContent = ''; return; }
          drawCell(cell, lines, target, t0, t1, cur ? c.clsValue(cur) : '–');
        });
      }
    }
  }

  function renderBadges(row, d, hs) {
    const b = row.badges;
    b.textContent = '';
    if (!d) return;
    const badge = (text, cls) => { const x = el('span', 'badge' + (cls ? ' ' + cls : ''), text); b.appendChild(x); };
    if (d.policy && d.policy !== 'none') badge(d.enabled ? d.policy : `${d.policy} (off)`, hs === 'over' ? 'over' : hs === 'warn' ? 'warn' : '');
    badge(d.model === 'shared' ? 'shared pool' : `${d.threads} thr`);
    if (d.state && d.state !== 'running') badge(d.state, 'warn');
  }

  // ---- application sections -------------------------------------------------------

  function flatten(obj, prefix, out, depth) {
    for (const k of Object.keys(obj)) {
      const v = obj[k];
      const name = prefix ? `${prefix}.${k}` : k;
      if (typeof v === 'number') out.push([name, v]);
      else if (typeof v === 'boolean') out.push([name, v ? 'yes' : 'no']);
      else if (typeof v === 'string' && v.length < 40) out.push([name, v]);
      else if (v && typeof v === 'object' && !Array.isArray(v) && depth < 2) flatten(v, name, out, depth + 1);
    }
    return out;
  }

  function renderSections() {
    const n = st.samples.length;
    const cur = st.samples[n - 1].doc;
    const prev = n > 1 ? st.samples[n - 2].doc : null;
    const dt = prev ? (cur.uptime_ms - prev.uptime_ms) / 1000 : 0;
    const skip = new Set(['uptime_ms', 'thread_model', 'shared_workers', 'timers_pending', 'stages', 'edges']);
    const rows = [];
    for (const k of Object.keys(cur)) {
      if (skip.has(k) || !cur[k] || typeof cur[k] !== 'object' || Array.isArray(cur[k])) continue;
      const now = flatten(cur[k], k, [], 0);
      const then = prev && prev[k] && typeof prev[k] === 'object' ? new Map(flatten(prev[k], k, [], 0)) : new Map();
      for (const [name, v] of now) {
        const p = then.get(name);
        const rate = typeof v === 'number' && typeof p === 'number' && dt > 0 && v > p ? (v - p) / dt : null;
        rows.push([name, v, rate]);
      }
    }
    rows.push(['runtime.timers_pending', cur.timers_pending, null]);
    const panel = $('sections-panel');
    panel.hidden = rows.length <= 1;
    const box = $('sections');
    box.textContent = '';
    for (const [name, v, rate] of rows) {
      const kv = el('div', 'kv');
      kv.appendChild(el('span', 'k', name)).title = name;
      const val = el('span', 'v', typeof v === 'number' ? fmt(v) : String(v));
      if (rate !== null) { val.appendChild(document.createTextNode(' ')); val.appendChild(el('span', 'r', `${fmt(rate)}/s`)); }
      kv.appendChild(val);
      box.appendChild(kv);
    }
  }

  // ---- interaction ----------------------------------------------------------------

  function select(name) {
    st.selected = st.selected === name ? null : name;
    const row = st.rows.get(name);
    if (st.selected && row) row.nameEl.scrollIntoView({ behavior: 'smooth', block: 'center' });
    render();
  }

  function init() {
    $('edge-note').textContent =
      'Edge traffic is estimated: the runtime counts events per stage, not per edge, so each stage\u2019s ' +
      'enqueue rate is split across the stages that call it in proportion to their processing rates. ' +
      'Dashed arcs are edges back to an earlier stage; arrows from the left mark where events enter from outside the runtime.';
    $('window').addEventListener('change', (e) => {
      st.windowS = Number(e.target.value) || 120;
      $('window-label').textContent = e.target.selectedOptions[0].textContent;
      renderStages();
    });
    $('hide-idle').addEventListener('change', renderStages);
    $('pause').addEventListener('click', (e) => {
      st.paused = !st.paused;
      e.target.setAttribute('aria-pressed', String(st.paused));
      e.target.textContent = st.paused ? 'Resume' : 'Pause';
      if (st.timer) { clearTimeout(st.timer); st.timer = null; }
      if (!st.paused) poll();
      renderStatus();
    });
    let resize = null;
    window.addEventListener('resize', () => {
      clearTimeout(resize);
      resize = setTimeout(() => { if (st.samples.length) renderGraph(st.samples[st.samples.length - 1]); }, 150);
    });
    setInterval(renderStatus, 1000);
    poll();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
