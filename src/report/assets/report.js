// The interactive part of the reshard plan report: tooltips for the
// drawings rendered into the page, and the tensor explorer drawn from the
// embedded data (#plan-data). Strings from the plan reach the page only
// through textContent and setAttribute, never as markup.
(function () {
  'use strict';
  const SVG = 'http://www.w3.org/2000/svg';
  const data = JSON.parse(document.getElementById('plan-data').textContent);
  const report = { ready: false, data: data };
  window.reshardReport = report;

  // Control characters, C1 controls and bidirectional overrides made
  // visible, as the CLI prints them.
  function printable(s) {
    return s.replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, function (c) {
      const code = c.charCodeAt(0);
      if (code === 10) return '\\n';
      if (code === 13) return '\\r';
      if (code === 9) return '\\t';
      if (code === 27) return '\\e';
      if (code < 0x20 || code === 0x7f) return '\\x' + code.toString(16).padStart(2, '0');
      return '\\u{' + code.toString(16).padStart(4, '0') + '}';
    });
  }
  function grouped(n) { return Number(n).toLocaleString('en-US'); }
  function human(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let v = Number(n), u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
    return u === 0 ? v + ' B' : v.toFixed(2) + ' ' + units[u];
  }
  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, text, parent) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function color(position) {
    return 'hsl(' + ((position * 137.508) % 360).toFixed(1) + ',58%,52%)';
  }

  // ---- Tooltips --------------------------------------------------------
  const tip = document.getElementById('tip');
  function showTip(ev, text) {
    tip.textContent = text;
    tip.hidden = false;
    const pad = 14;
    let x = ev.clientX + pad, y = ev.clientY + pad;
    const r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - r.width - pad);
    if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - r.height - pad);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTip() { tip.hidden = true; }
  function hover(root, selector, text) {
    if (!root) return;
    root.addEventListener('mousemove', function (ev) {
      const t = ev.target.closest ? ev.target.closest(selector) : null;
      if (t) showTip(ev, text(t)); else hideTip();
    });
    root.addEventListener('mouseleave', hideTip);
  }
  const participants = data.participants;
  function binText(side, i) {
    const bin = data.bins[side][i];
    const label = printable(bin[2]);
    return bin[1] === 1 ? label : label + ' (' + bin[1] + ' participants)';
  }
  const total = data.summary.bytes;
  hover(document.getElementById('heatmap-svg'), 'rect.cell', function (c) {
    const b = Number(c.getAttribute('data-b'));
    return 'source  ' + binText('source', +c.getAttribute('data-s')) +
      '\ntarget  ' + binText('target', +c.getAttribute('data-t')) +
      '\n' + grouped(b) + ' bytes (' + human(b) + ', ' + (100 * b / total).toFixed(2) + '% of all)' +
      '\n' + grouped(c.getAttribute('data-r')) + ' regions';
  });
  for (const side of ['source', 'target']) {
    const mean = data.summary['mean_' + side + '_bytes'];
    hover(document.getElementById('load-' + side), 'rect.bar', function (bar) {
      const b = Number(bar.getAttribute('data-b'));
      return printable(bar.getAttribute('data-id')) + '\n' + grouped(b) + ' bytes (' + human(b) + ')' +
        (mean > 0 ? ', ' + (b / mean).toFixed(3) + 'x mean' : '') +
        '\n' + grouped(bar.getAttribute('data-r')) + ' regions ' + (side === 'source' ? 'served' : 'received');
    });
  }
  hover(document.getElementById('routes-svg'), 'path.route', function (p) {
    const b = Number(p.getAttribute('data-b'));
    return p.getAttribute('data-src') + ' -> ' + p.getAttribute('data-dst') + '\n' +
      grouped(b) + ' bytes (' + human(b) + ')\n' + grouped(p.getAttribute('data-o')) + ' operations';
  });

  // ---- Tensor explorer -------------------------------------------------
  const ex = data.explorer;
  const byName = new Map();
  ex.tensors.forEach(function (t, i) { byName.set(t[0], i); });
  const list = document.getElementById('tx-list');
  const filter = document.getElementById('tx-filter');
  const sortBy = document.getElementById('tx-sort');
  const dimX = document.getElementById('tx-dimx');
  const dimY = document.getElementById('tx-dimy');
  const info = document.getElementById('tx-info');
  const table = document.getElementById('tx-table');
  const MAX_LIST = 3000, MAX_ROWS = 300;
  let current = null;

  function fillList() {
    const needle = filter.value.toLowerCase();
    const order = ex.tensors.map(function (t, i) { return i; }).filter(function (i) {
      return needle === '' || ex.tensors[i][0].toLowerCase().indexOf(needle) >= 0;
    });
    if (sortBy.value === 'bytes') order.sort(function (a, b) { return ex.tensors[b][4] - ex.tensors[a][4] || a - b; });
    list.textContent = '';
    for (const i of order.slice(0, MAX_LIST)) {
      const t = ex.tensors[i];
      const o = html('option', printable(t[0]) + '  [' + t[1].join(', ') + ']  ' + human(t[4]), list);
      o.value = String(i);
      if (current !== null && current.index === i) o.selected = true;
    }
    document.getElementById('tx-count').textContent = order.length > MAX_LIST
      ? 'first ' + MAX_LIST + ' of ' + order.length + ' matches' : order.length + ' tensors';
  }

  // The fragments of one side of a record: {p, off, shape}.
  function fragments(flat, ndim) {
    const out = [], stride = 1 + 2 * ndim;
    for (let i = 0; i < flat.length; i += stride) {
      out.push({ p: flat[i], off: flat.slice(i + 1, i + 1 + ndim), shape: flat.slice(i + 1 + ndim, i + stride) });
    }
    return out;
  }
  function intersect(a, b) {
    const off = [], shape = [];
    for (let d = 0; d < a.off.length; ++d) {
      const lo = Math.max(a.off[d], b.off[d]);
      const hi = Math.min(a.off[d] + a.shape[d], b.off[d] + b.shape[d]);
      off.push(lo); shape.push(hi - lo);
    }
    return { off: off, shape: shape };
  }
  function volume(shape) { return shape.reduce(function (a, b) { return a * b; }, 1); }
  function boxText(b) {
    return '[' + b.off.map(function (o, d) { return o + ':' + (o + b.shape[d]); }).join(', ') + ']';
  }
  // Dimensions along which fragments of either side differ, most split first.
  function splitDims(shape, sides) {
    const distinct = shape.map(function () { return new Set(); });
    for (const side of sides) for (const f of side) f.off.forEach(function (o, d) { distinct[d].add(o); });
    return shape.map(function (n, d) { return d; }).filter(function (d) { return distinct[d].size > 1; });
  }
  function defaultDims(shape, split) {
    const chosen = split.slice(0, 2);
    const rest = shape.map(function (n, d) { return d; }).filter(function (d) { return chosen.indexOf(d) < 0; })
      .sort(function (a, b) { return shape[b] - shape[a] || a - b; });
    while (chosen.length < Math.min(2, shape.length)) chosen.push(rest.shift());
    chosen.sort(function (a, b) { return a - b; });
    return chosen.length === 1 ? { x: chosen[0], y: -1 } : { x: chosen[1], y: chosen[0] };
  }
  function fillDims(shape, dims) {
    for (const [select, value, allowNone] of [[dimX, dims.x, false], [dimY, dims.y, true]]) {
      select.textContent = '';
      if (allowNone) { const o = html('option', '(none)', select); o.value = '-1'; }
      shape.forEach(function (n, d) {
        const o = html('option', 'dim ' + d + ' (' + n + ')', select);
        o.value = String(d);
      });
      select.value = String(value);
    }
  }

  // Draws boxes projected on (dims.x, dims.y) into `svg`.
  function drawPanel(svg, shape, boxes, dims, cls, attrs) {
    svg.textContent = '';
    const W = 380, H = 280, M = 26;
    const nx = shape[dims.x], ny = dims.y >= 0 ? shape[dims.y] : 1;
    // Stretched past 3:1 either way so that thin tensors stay readable.
    const aspect = dims.y >= 0 ? Math.min(3, Math.max(1 / 3, ny / nx)) : 0.08;
    let w = W, h = Math.min(H, Math.max(24, W * aspect));
    if (W * aspect > H) { h = H; w = Math.min(W, Math.max(24, H / aspect)); }
    svg.setAttribute('viewBox', '0 0 ' + (W + M + 8) + ' ' + (H + M + 8));
    svg.setAttribute('width', W + M + 8);
    svg.setAttribute('height', H + M + 8);
    const sx = w / nx, sy = h / ny;
    el('rect', { class: 'outline', x: M, y: M, width: w, height: h }, svg);
    const tx = el('text', { x: M, y: M - 8, 'font-size': 11 }, svg);
    tx.textContent = 'dim ' + dims.x + ': 0..' + nx;
    if (dims.y >= 0) {
      const ty = el('text', { x: M - 6, y: M + h, 'font-size': 11, transform: 'rotate(-90 ' + (M - 6) + ' ' + (M + h) + ')' }, svg);
      ty.textContent = 'dim ' + dims.y + ': 0..' + ny;
    }
    boxes.forEach(function (b, i) {
      const oy = dims.y >= 0 ? b.off[dims.y] : 0, ey = dims.y >= 0 ? b.shape[dims.y] : 1;
      const r = el('rect', {
        class: cls, x: M + b.off[dims.x] * sx, y: M + oy * sy,
        width: Math.max(0.8, b.shape[dims.x] * sx), height: Math.max(0.8, ey * sy),
        fill: color(b.p), 'data-k': i, 'data-box': boxText(b)
      }, svg);
      attrs(r, b, i);
    });
    // Boxes drawn on top of each other (replicas, or boxes that differ only
    // in a dimension not drawn): how many.
    const stacked = new Map();
    boxes.forEach(function (b) {
      const oy = dims.y >= 0 ? b.off[dims.y] : 0, ey = dims.y >= 0 ? b.shape[dims.y] : 1;
      const key = [b.off[dims.x], b.shape[dims.x], oy, ey].join(',');
      const e = stacked.get(key) || { n: 0, x: M + (b.off[dims.x] + b.shape[dims.x] / 2) * sx, y: M + (oy + ey / 2) * sy, w: b.shape[dims.x] * sx, h: ey * sy };
      e.n += 1;
      stacked.set(key, e);
    });
    for (const e of stacked.values()) {
      if (e.n < 2 || e.w < 22 || e.h < 12) continue;
      const t = el('text', { class: 'stack', x: e.x, y: e.y + 4, 'text-anchor': 'middle', 'font-size': 11 }, svg);
      t.textContent = 'x' + e.n;
    }
  }

  function participantId(side, position) { return participants[side].ids[position]; }

  function renderTable(t, view) {
    table.textContent = '';
    const head = html('tr', undefined, table);
    for (const h of ['source participant', 'source box', 'target participant', 'target box', 'region box', 'bytes']) html('th', h, head).className = 'l';
    const shown = view.filter === null ? view.regions : view.regions.filter(view.filter);
    for (const r of shown.slice(0, MAX_ROWS)) {
      const tr = html('tr', undefined, table);
      const s = view.sources[r.s], g = view.targets[r.t];
      html('td', printable(participantId('source', s.p)), tr).className = 'id';
      html('td', boxText(s), tr).className = 'l';
      html('td', printable(participantId('target', g.p)), tr).className = 'id';
      html('td', boxText(g), tr).className = 'l';
      html('td', boxText(r.box), tr).className = 'l';
      html('td', grouped(r.bytes), tr);
    }
    document.getElementById('tx-table-note').textContent = shown.length > MAX_ROWS
      ? 'first ' + MAX_ROWS + ' of ' + shown.length + ' regions' : shown.length + ' regions';
  }

  function highlight(view, side, k) {
    const related = { s: new Set(), t: new Set(), r: new Set() };
    view.regions.forEach(function (r, i) {
      if ((side === 's' && r.s === k) || (side === 't' && r.t === k) || (side === 'r' && i === k)) {
        related.s.add(r.s); related.t.add(r.t); related.r.add(i);
      }
    });
    for (const [id, key] of [['tx-source', 's'], ['tx-target', 't'], ['tx-regions', 'r']]) {
      for (const e of document.getElementById(id).querySelectorAll('rect[data-k]')) {
        const on = related[key].has(+e.getAttribute('data-k'));
        e.classList.toggle('hl', on);
        e.classList.toggle('dim', !on);
      }
    }
  }
  function clearHighlight() {
    for (const e of document.querySelectorAll('.panel rect[data-k]')) { e.classList.remove('hl'); e.classList.remove('dim'); }
  }

  function render() {
    if (current === null) return;
    const t = ex.tensors[current.index];
    const shape = t[1], itemsize = t[3];
    const dims = { x: +dimX.value, y: +dimY.value };
    if (dims.y === dims.x) dims.y = -1;
    const view = current.view;
    const side = function (name, key) {
      return function (r, b, i) {
        // Escaped like the attributes rendered into the page (charts.cc).
        r.setAttribute('data-p', printable(participantId(name, b.p)));
        r.addEventListener('mouseenter', function () { highlight(view, key, i); });
        r.addEventListener('mouseleave', clearHighlight);
        r.addEventListener('click', function () { view.filter = function (x) { return x[key] === i; }; renderTable(t, view); });
      };
    };
    drawPanel(document.getElementById('tx-source'), shape, view.sources, dims, 'frag', side('source', 's'));
    drawPanel(document.getElementById('tx-target'), shape, view.targets, dims, 'frag', side('target', 't'));
    const regionBoxes = view.regions.map(function (r) { return { p: view.sources[r.s].p, off: r.box.off, shape: r.box.shape }; });
    drawPanel(document.getElementById('tx-regions'), shape, regionBoxes, dims, 'region', function (r, b, i) {
      r.setAttribute('data-s', view.regions[i].s);
      r.setAttribute('data-t', view.regions[i].t);
      r.setAttribute('data-b', view.regions[i].bytes);
      r.addEventListener('mouseenter', function () { highlight(view, 'r', i); });
      r.addEventListener('mouseleave', clearHighlight);
    });
    renderTable(t, view);
    void itemsize;
  }
  for (const [id, side] of [['tx-source', 'source'], ['tx-target', 'target']]) {
    hover(document.getElementById(id), 'rect.frag', function (r) {
      return side + ' ' + r.getAttribute('data-p') + '\nbox ' + r.getAttribute('data-box');
    });
  }
  hover(document.getElementById('tx-regions'), 'rect.region', function (r) {
    return 'region ' + r.getAttribute('data-box') + '\n' + grouped(r.getAttribute('data-b')) + ' bytes';
  });

  function select(index) {
    const t = ex.tensors[index];
    const shape = t[1], ndim = shape.length;
    const view = { sources: [], targets: [], regions: [], filter: null };
    if (t[8] >= 0) {
      const rec = ex.records[t[8]];
      view.sources = fragments(rec.s, ndim);
      view.targets = fragments(rec.t, ndim);
      for (let i = 0; i < rec.r.length; i += 2) {
        const box = intersect(view.sources[rec.r[i]], view.targets[rec.r[i + 1]]);
        view.regions.push({ s: rec.r[i], t: rec.r[i + 1], box: box, bytes: volume(box.shape) * t[3] });
      }
    }
    current = { index: index, view: view };
    const split = splitDims(shape, [view.sources, view.targets]);
    fillDims(shape, defaultDims(shape, split));
    info.textContent = printable(t[0]) + '\nshape [' + shape.join(', ') + ']  ' + ex.dtypes[t[2]] +
      '  split dims ' + (split.length ? split.join(', ') : 'none') +
      '\n' + grouped(t[4]) + ' bytes moved (' + human(t[4]) + ') in ' + grouped(t[5]) + ' regions; ' +
      t[6] + ' source fragments, ' + t[7] + ' target fragments' +
      (t[8] < 0 ? '\nboxes not embedded: the report\'s explorer budget is spent (max_explorer_items)' : '');
    info.setAttribute('data-tensor', printable(t[0]));
    render();
  }
  report.selectTensor = function (name) {
    if (!byName.has(name)) return false;
    select(byName.get(name));
    for (const o of list.options) o.selected = (+o.value === current.index);
    return true;
  };
  list.addEventListener('change', function () { if (list.value !== '') select(+list.value); });
  filter.addEventListener('input', fillList);
  sortBy.addEventListener('change', fillList);
  dimX.addEventListener('change', render);
  dimY.addEventListener('change', render);
  document.getElementById('tx-all').addEventListener('click', function () {
    if (current) { current.view.filter = null; renderTable(null, current.view); }
  });

  fillList();
  if (ex.tensors.length > 0) {
    let best = 0;
    ex.tensors.forEach(function (t, i) { if (t[4] > ex.tensors[best][4]) best = i; });
    report.selectTensor(ex.tensors[best][0]);
  }
  report.readyMs = performance.now();
  report.ready = true;
  document.body.setAttribute('data-ready', '1');
})();
