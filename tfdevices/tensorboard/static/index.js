// The Placement dashboard (TensorBoard plugin frontend). Plain ES module: no build, no network
// beyond this plugin's own data routes (relative URLs: the page's <base> is /data/plugin/placement/).

const ROW = 22;          // px per row in the virtual lists
const LANE = 30;         // px per device lane in the timeline
const LABEL = 90;        // px of lane labels
const PALETTE = ['#4e79a7', '#59a14f', '#9c755f', '#af7aa1', '#76b7b2', '#edc948', '#b07aa1', '#86bcb6',
                 '#8cd17d', '#a0cbe8', '#d4a6c8', '#79706e'];

const state = {runs: [], current: null, view: null, tree: null, expanded: new Set(), query: ''};

// ----------------------------------------------------------------------------- helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function formatBytes(n) {
  if (n === null || n === undefined) return '?';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

export function formatUs(us) {
  if (us === null || us === undefined) return '—';
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${us.toFixed(us < 10 ? 1 : 0)} µs`;
}

async function getJson(route, params) {
  const query = new URLSearchParams(params || {}).toString();
  const response = await fetch(query ? `${route}?${query}` : route);
  if (!response.ok) throw new Error(`${route}: ${response.status} ${await response.text()}`);
  return response.json();
}

function section(id, title, ...body) {
  return el('section', {id, class: 'card'}, el('h2', {text: title}), ...body);
}

function colorOf(index) { return PALETTE[index % PALETTE.length]; }

// ----------------------------------------------------------------------------- virtual list

// A scrolling list that only builds the rows in view: 10^5 rows stay as fast as 10.
function virtualList(className, maxHeight) {
  const outer = el('div', {class: `vlist ${className}`});
  let height = maxHeight;
  outer.style.height = `${height}px`;
  const inner = el('div', {class: 'vlist-inner'});
  outer.append(inner);
  const list = {outer, rows: [], renderRow: null};
  const paint = () => {
    const first = Math.max(0, Math.floor(outer.scrollTop / ROW) - 5);
    const last = Math.min(list.rows.length, first + Math.ceil(height / ROW) + 10);
    inner.style.height = `${list.rows.length * ROW}px`;
    inner.replaceChildren();
    for (let i = first; i < last; i++) {
      const row = list.renderRow(list.rows[i], i);
      row.classList.add('vrow');
      row.style.top = `${i * ROW}px`;
      inner.append(row);
    }
  };
  let pending = false;
  outer.addEventListener('scroll', () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; paint(); });
  });
  list.set = (rows) => {
    list.rows = rows;
    height = Math.max(ROW, Math.min(maxHeight, rows.length * ROW + 2));
    outer.style.height = `${height}px`;
    paint();
  };
  return list;
}

// ----------------------------------------------------------------------------- page

export async function render() {
  document.head.append(el('link', {rel: 'stylesheet', href: 'static/style.css'}));
  window.addEventListener('resize', () => drawTimeline());
  const root = el('div', {id: 'placement'});
  document.body.append(root);
  try {
    state.runs = (await getJson('runs')).runs;
  } catch (error) {
    root.append(el('p', {class: 'error', text: `Could not list the runs: ${error.message}`}));
    return;
  }
  if (!state.runs.length) {
    root.append(el('p', {class: 'empty',
      text: 'No placement report or profile in this log directory. Write one with ' +
            'tfdevices.tensorboard.write_placement or the PlacementLogger Keras callback, or profile a few steps ' +
            'with keras.callbacks.TensorBoard(profile_batch=...).'}));
    return;
  }
  root.append(toolbar(), el('div', {id: 'view'}));
  await show(state.runs[0], null);
}

function runKey(entry) { return `${entry.run}\u0000${entry.tag}`; }

function runSelect(id, onChange) {
  const select = el('select', {id, onchange: onChange});
  state.runs.forEach((entry, i) => select.append(el('option', {value: i, text: `${entry.run} · ${entry.tag}`})));
  return select;
}

function fillSteps(select, entry, chosen) {
  const label = (s) => (entry.kind === 'profile' ? 'the whole profile' : `step ${s}`);
  select.replaceChildren(...entry.steps.map((s) => el('option', {value: s, text: label(s)})));
  select.value = String(chosen ?? entry.steps[entry.steps.length - 1]);
}

function toolbar() {
  const steps = el('select', {id: 'step', onchange: () => show(state.current, steps.value)});
  const runs = runSelect('run', () => show(state.runs[Number(runs.value)], null));
  return el('div', {class: 'toolbar'}, el('label', {}, 'Run ', runs), el('label', {}, 'Step ', steps),
            el('a', {id: 'trace-link', class: 'button', text: 'Chrome trace'}),
            el('span', {id: 'summary'}));
}

async function show(entry, step) {
  // A later show() (another run or step picked while this one loads) wins: this one stops at its next await.
  const token = (state.shown = (state.shown || 0) + 1);
  state.current = entry;
  const steps = document.getElementById('step');
  fillSteps(steps, entry, step);
  const params = {run: entry.run, tag: entry.tag, step: steps.value};
  const view = document.getElementById('view');
  view.replaceChildren(el('p', {class: 'loading', text: 'Loading…'}));
  let shown;
  try {
    shown = await getJson('view', params);
  } catch (error) {
    if (token === state.shown) view.replaceChildren(el('p', {class: 'error', text: error.message}));
    return;
  }
  const changes = await changesSection(entry);
  if (token !== state.shown) return;
  state.view = shown;
  const link = document.getElementById('trace-link');
  link.href = `trace?${new URLSearchParams(params)}`;
  link.style.display = state.view.summary.timed ? '' : 'none';
  document.getElementById('summary').textContent = summaryLine(state.view.summary);
  const notes = state.view.summary.notes || [];
  const noteList = el('div', {id: 'notes', class: 'notes'}, ...notes.map((n) => el('p', {class: 'note', text: n})));
  state.tree = scopeTree(state.view.scopes);
  state.expanded = initialExpansion(state.tree);
  state.query = '';
  view.replaceChildren(noteList, changes, devices(state.view), matrix(state.view.matrix),
                       timelineSection(state.view.timeline), xlaSection(state.view.xla),
                       criticalPath(state.view.critical_path), layers(state.tree), weights(state.view.weights),
                       diffSection());
  drawTimeline();
}

// What changed over the run (PlacementLogger's drift), on the axis of the captured steps; a mark opens its step.
async function changesSection(entry) {
  if (entry.kind === 'profile') return '';
  let changes = [];
  try {
    changes = (await getJson('changes', {run: entry.run, tag: entry.tag})).changes;
  } catch (error) {
    return el('p', {class: 'error', text: `Could not read the changes: ${error.message}`});
  }
  if (!changes.length) return '';
  const steps = entry.steps.concat(changes.map((c) => c.step));
  const first = Math.min(...steps), last = Math.max(...steps);
  const at = (step) => `${last > first ? (100 * (step - first)) / (last - first) : 50}%`;
  const open = (step) => () => { if (entry.steps.includes(step)) show(entry, step); };
  const axis = el('div', {class: 'step-axis'},
    ...entry.steps.map((s) => el('span', {class: 'tick', style: `left:${at(s)}`, title: `captured: step ${s}`})),
    ...changes.map((c) => el('span', {class: 'change-mark', style: `left:${at(c.step)}`, title: c.summary,
                                      onclick: open(c.step)})));
  const rows = changes.map((c) => el('div', {class: 'change', onclick: open(c.step)},
    el('a', {class: 'button', text: `step ${c.step}`}), el('span', {text: c.summary})));
  return section('changes', `Changes over the run: ${changes.length} capture(s) whose placement changed`,
    el('div', {class: 'axis-labels'}, el('span', {text: `step ${first}`}), el('span', {text: `step ${last}`})),
    axis, el('div', {class: 'change-list'}, ...rows));
}

function summaryLine(s) {
  const parts = [`${s.ops} ops on ${s.devices} device(s)`, `${s.transfers} transfers (${formatBytes(s.bytes)})`];
  if (s.timed) parts.push(`step ${formatUs(s.step_us)}`, `busy ${formatUs(s.busy_us)}`,
                          `in transfers ${formatUs(s.transfer_us)}`);
  else parts.push('no op times in this report');
  return parts.join(' · ');
}

// ----------------------------------------------------------------------------- devices

function devices(view) {
  const most = Math.max(1, ...view.devices.map((d) => d.busy_us || 0));
  const cards = view.devices.map((d) => {
    const bar = el('div', {class: 'bar'});
    bar.style.width = `${Math.round(100 * (d.busy_us || 0) / most)}%`;
    const memory = d.memory ? `${formatBytes(d.memory.peak_bytes)} peak, ${formatBytes(d.memory.current_bytes)} now`
                              + (d.memory.shared ? ' (the host allocator, shared by every CPU)' : '')
                            : 'not reported';
    return el('div', {class: 'device', 'data-device': d.name},
      el('h3', {class: 'device-name', text: d.name}),
      el('dl', {},
        el('dt', {text: 'model ops'}), el('dd', {class: 'ops', text: d.ops}),
        el('dt', {text: 'kernels'}), el('dd', {text: d.kernels}),
        el('dt', {text: 'busy'}), el('dd', {class: 'busy', text: formatUs(d.busy_us)}),
        el('dt', {text: 'transfers in / out'}), el('dd', {text: `${d.transfers_in} / ${d.transfers_out}`}),
        el('dt', {text: 'memory'}), el('dd', {text: memory})),
      el('div', {class: 'bar-track', title: 'busy time, relative to the busiest device'}, bar),
      el('p', {class: 'types', text: d.kernel_types.map(([t, n]) => `${t} ×${n}`).join(', ')}));
  });
  return section('devices', 'Devices', el('div', {class: 'device-row'}, ...cards));
}

// ----------------------------------------------------------------------------- transfer matrix

function matrix(m) {
  const detail = el('div', {id: 'matrix-detail', class: 'detail'});
  const byPair = new Map(m.cells.map((c) => [`${c.src}\u0000${c.dst}`, c]));
  const head = el('tr', {}, el('th', {text: 'from \\ to'}), ...m.devices.map((d) => el('th', {text: d})));
  const rows = m.devices.map((src) => el('tr', {}, el('th', {text: src}), ...m.devices.map((dst) => {
    const cell = byPair.get(`${src}\u0000${dst}`);
    if (!cell) return el('td', {class: src === dst ? 'self' : 'none', text: src === dst ? '' : '·'});
    const time = cell.us === null ? '' : ` · ${formatUs(cell.us)}`;
    return el('td', {class: 'pair', 'data-src': src, 'data-dst': dst, title: 'click for the tensors',
                     onclick: () => showTensors(detail, cell)},
      el('b', {text: `${cell.count} transfer${cell.count === 1 ? '' : 's'}`}),
      el('br'), `${formatBytes(cell.bytes)}${cell.unknown_bytes ? ` + ${cell.unknown_bytes} unknown` : ''}${time}`);
  })));
  const body = m.cells.length ? el('table', {class: 'matrix'}, el('thead', {}, head), el('tbody', {}, ...rows))
                              : el('p', {class: 'empty', text: 'No tensor was copied between devices.'});
  return section('matrix', 'Transfers (source × destination)', body, detail);
}

function showTensors(detail, cell) {
  const list = virtualList('tensors', Math.min(300, ROW * (cell.tensors.length + 1)));
  list.renderRow = (t) => el('div', {class: 'row'}, el('code', {text: t.tensor}),
    el('span', {text: `${t.dtype || '?'}[${t.shape ? t.shape.join(',') : '?'}]`}),
    el('span', {text: formatBytes(t.bytes)}), el('span', {text: formatUs(t.us)}));
  detail.replaceChildren(el('h3', {text: `${cell.src} → ${cell.dst}: ${cell.count} tensor(s)`}), list.outer);
  list.set(cell.tensors);
}

// ----------------------------------------------------------------------------- layers / scopes

// The scope tree arrives flat, in display order: node = [name, parent, ops, asked, ran, mismatch, busy, op].
function scopeTree(scopes) {
  const nodes = scopes.nodes;
  const children = nodes.map(() => []);
  const roots = [];
  const depth = new Array(nodes.length).fill(0);
  nodes.forEach((n, i) => {
    if (n[1] < 0) roots.push(i);
    else { children[n[1]].push(i); depth[i] = depth[n[1]] + 1; }
  });
  const paths = new Array(nodes.length);
  const pathOf = (i) => {
    if (paths[i] === undefined) paths[i] = nodes[i][1] < 0 ? nodes[i][0] : `${pathOf(nodes[i][1])}/${nodes[i][0]}`;
    return paths[i];
  };
  const names = (indices) => indices.map((k) => scopes.devices[k]).join(', ');
  return {nodes, children, roots, depth, pathOf, names};
}

function initialExpansion(tree) {
  const open = new Set();
  tree.nodes.forEach((n, i) => { if (n[5] && tree.depth[i] < 4) open.add(i); });
  if (tree.roots.length === 1) open.add(tree.roots[0]);
  return open;
}

function visibleRows(tree) {
  const rows = [];
  const walk = (i, depth) => {
    rows.push({i, depth});
    if (state.expanded.has(i)) tree.children[i].forEach((c) => walk(c, depth + 1));
  };
  tree.roots.forEach((r) => walk(r, 0));
  return rows;
}

function searchRows(tree, query) {
  const q = query.toLowerCase();
  const rows = [];
  for (let i = 0; i < tree.nodes.length && rows.length < 5000; i++) {
    if (tree.pathOf(i).toLowerCase().includes(q)) rows.push({i, depth: 0, full: true});
  }
  rows.sort((a, b) => tree.nodes[b.i][5] - tree.nodes[a.i][5]);
  return rows;
}

function layers(tree) {
  const count = el('span', {class: 'count'});
  const list = virtualList('layers', 420);
  const refresh = () => {
    const rows = state.query ? searchRows(tree, state.query) : visibleRows(tree);
    count.textContent = state.query ? `${rows.length} match(es)` : `${rows.length} row(s) shown`;
    list.set(rows);
  };
  list.renderRow = ({i, depth, full}) => {
    const [name, , ops, asked, ran, mismatch, busy, op] = tree.nodes[i];
    const kids = tree.children[i].length;
    const open = state.expanded.has(i);
    const row = el('div', {class: `row scope${mismatch ? ' mismatch' : ''}`, 'data-path': tree.pathOf(i),
                           onclick: () => {
                             if (!kids) return;
                             if (open) state.expanded.delete(i); else state.expanded.add(i);
                             refresh();
                           }},
      el('span', {class: 'name', title: tree.pathOf(i)},
         el('span', {class: 'toggle', text: kids ? (open ? '▾' : '▸') : ''}), full ? tree.pathOf(i) : name),
      el('span', {class: 'ops', text: op ? (op[1] || op[0]) : `${ops} ops`}),
      el('span', {class: 'asked', text: tree.names(asked) || '—'}),
      el('span', {class: 'ran', text: tree.names(ran)}),
      el('span', {class: 'time', text: formatUs(busy)}),
      el('span', {class: 'flag', text: mismatch ? 'ran elsewhere' : ''}));
    row.querySelector('.name').style.paddingLeft = `${depth * 14}px`;
    return row;
  };
  let timer = null;
  const search = el('input', {id: 'layer-search', type: 'search', placeholder: 'search scopes and ops…',
    oninput: () => { clearTimeout(timer); timer = setTimeout(() => { state.query = search.value.trim(); refresh(); }, 150); }});
  const mismatches = tree.nodes.filter((n) => n[5]).length;
  const header = el('div', {class: 'row scope head'}, el('span', {class: 'name', text: 'scope / op'}),
    el('span', {class: 'ops', text: 'ops'}), el('span', {class: 'asked', text: 'asked for'}),
    el('span', {class: 'ran', text: 'ran on'}), el('span', {class: 'time', text: 'time'}),
    el('span', {class: 'flag', text: ''}));
  const card = section('layers', 'Layers and name scopes: device asked for and device run on',
    el('div', {class: 'toolbar'}, search, count,
       el('span', {class: 'hint', text: mismatches ? `${mismatches} scope(s) ran elsewhere than asked, shown first`
                                                   : 'every scope ran where it asked'})),
    header, list.outer);
  queueMicrotask(refresh);
  return card;
}

// ----------------------------------------------------------------------------- where the time went

function criticalPath(path) {
  const title = 'Critical path: the chain of kernels and transfers that ends the step';
  if (!path || path.us === null || path.us === undefined) {
    return section('critical', title, el('p', {class: 'empty', text: 'No op times in this report.'}));
  }
  const shares = Object.entries(path.by_device).map(([d, us]) => `${d} ${formatUs(us)}`);
  if (path.transfers_us) shares.push(`transfers ${formatUs(path.transfers_us)}`);
  const longest = [...path.events].sort((a, b) => b[4] - a[4]).slice(0, 12);
  const list = el('div', {class: 'critical-list'}, ...longest.map(([kind, name, lane, , dur]) =>
    el('div', {class: `row ${kind}`}, el('code', {class: 'name', text: name}), el('span', {text: lane}),
       el('span', {text: formatUs(dur)}))));
  return section('critical', title,
    el('p', {class: 'hint', text: `${path.count} event(s), ${formatUs(path.us)} from first to last: ` +
                                  `${shares.join(', ')}; the longest on it:`}), list);
}

// ----------------------------------------------------------------------------- XLA: clusters, modules, instructions

function percent(share) { return share === null || share === undefined ? '—' : `${(100 * share).toFixed(1)}%`; }

// One card per XLA cluster (a module on a GPU): its runs, its time and share of the device; its instructions.
function xlaSection(rows) {
  const title = 'XLA: compiled clusters and modules, and how much of the device\'s time each took';
  if (!rows || !rows.length) return '';
  return section('xla', title, ...rows.map((m) => {
    const inGraphs = m.graph_us ? `; ${percent(m.graph_us / m.us)} of it inside command buffers (CUDA graphs)` : '';
    const head = el('p', {class: 'xla-module', 'data-module': m.module, 'data-device': m.device},
      el('b', {text: m.module}), ` on ${m.device}: ${m.runs} run(s) (${m.kernel_runs} kernel runs), ` +
      `${formatUs(m.us)}, ${percent(m.share)} of ${m.device}'s busy time${inGraphs}`);
    if (!m.instructions.length) return el('div', {class: 'xla-card'}, head);
    const list = virtualList('xla-instructions', Math.min(330, ROW * m.instructions.length + 2));
    list.renderRow = (i) => el('div', {class: 'row xla', 'data-fusion': i.fusion},
      el('code', {class: 'name', text: i.fusion}), el('span', {class: 'graph', text: i.graph || '—'}),
      el('span', {class: 'runs', text: `${i.runs}×`}), el('span', {class: 'time', text: formatUs(i.us)}),
      el('span', {class: 'share'},
         el('span', {class: 'share-bar', style: `width:${Math.round(100 * (i.share || 0))}%`}),
         el('span', {class: 'share-text', text: percent(i.share)})),
      el('span', {class: 'types', text: i.types.join(', ')}));
    queueMicrotask(() => list.set(m.instructions));
    const more = m.more ? el('p', {class: 'hint', text: `… and ${m.more} shorter instruction(s) not listed`}) : '';
    const header = el('div', {class: 'row xla head'},
      el('span', {class: 'name', text: 'instruction (fusion or call)'}),
      el('span', {class: 'graph', text: 'command buffer'}), el('span', {class: 'runs', text: 'runs'}),
      el('span', {class: 'time', text: 'time'}), el('span', {class: 'share', text: `of ${m.device}'s busy time`}),
      el('span', {class: 'types', text: 'op types it came from'}));
    return el('div', {class: 'xla-card'}, head, header, list.outer, more);
  }));
}

// ----------------------------------------------------------------------------- weights read across devices

function weights(rows) {
  if (!rows.length) {
    return section('weights', 'Weights read from another device every step',
                   el('p', {class: 'empty', text: 'None: every weight is read on the device that holds it.'}));
  }
  const list = virtualList('weights', Math.min(300, ROW * rows.length + 4));
  list.renderRow = (r) => el('div', {class: 'row weight'}, el('code', {class: 'name', text: r.op}),
    el('span', {text: `${r.stored_on} → ${r.read_on.join(', ')}`}),
    el('span', {text: formatBytes(r.bytes)}), el('span', {text: formatUs(r.us)}));
  const total = rows.reduce((sum, r) => sum + (r.bytes || 0), 0);
  const card = section('weights', 'Weights read from another device every step',
    el('p', {class: 'hint', text: `${rows.length} read(s), ${formatBytes(total)} copied on every call`}), list.outer);
  queueMicrotask(() => list.set(rows));
  return card;
}

// ----------------------------------------------------------------------------- timeline

let zoom = 1;

function timelineSection(line) {
  const canvas = el('canvas', {id: 'timeline-canvas', 'data-lanes': line.lanes.join(','),
                               'data-ops': line.ops.length, 'data-transfers': line.transfers.length,
                               'data-runs': (line.runs || []).length});
  const tip = el('div', {id: 'timeline-tip', class: 'tip'});
  const scroller = el('div', {class: 'timeline-scroll'}, canvas);
  canvas.addEventListener('mousemove', (event) => hover(event, canvas, tip));
  canvas.addEventListener('mouseleave', () => { tip.textContent = ''; });
  const setZoom = (z) => { zoom = Math.min(256, Math.max(1, z)); drawTimeline(); };
  scroller.addEventListener('wheel', (event) => {  // ctrl + wheel: zoom around the pointer
    if (!event.ctrlKey && !event.metaKey) return;
    event.preventDefault();
    const at = event.clientX - scroller.getBoundingClientRect().left;
    const before = canvas.clientWidth;
    const t = (at + scroller.scrollLeft - LABEL) / (before - LABEL - 8);
    setZoom(zoom * (event.deltaY < 0 ? 2 : 0.5));
    scroller.scrollLeft = Math.max(0, LABEL + t * (canvas.clientWidth - LABEL - 8) - at);
  }, {passive: false});
  const note = (line.timed ? 'time from the first op; orange lines are transfers between devices'
                           : 'this report has no op times: ops are shown in execution order') +
               ((line.runs || []).length ? '; a framed bar is one run of a compiled XLA step, its ops inside ' +
                                           'it (a dark band along its top: inside a command buffer, a CUDA graph)'
                                         : '') +
               '; ctrl + wheel zooms';
  return section('timeline', 'Timeline of the step',
    el('div', {class: 'toolbar'},
       el('button', {text: '−', onclick: () => setZoom(zoom / 2)}),
       el('button', {text: '+', onclick: () => setZoom(zoom * 2)}),
       el('button', {text: 'fit', onclick: () => setZoom(1)}),
       el('span', {class: 'hint', text: note})),
    scroller, tip);
}

function drawTimeline() {
  const canvas = document.getElementById('timeline-canvas');
  if (!canvas || !state.view) return;
  const line = state.view.timeline;
  const visible = canvas.parentElement.clientWidth || 900;
  const width = Math.min(32000, Math.max(visible, Math.floor(visible * zoom)));
  const height = LANE * line.lanes.length + 24;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const g = canvas.getContext('2d');
  g.scale(ratio, ratio);
  g.fillStyle = '#fff';
  g.fillRect(0, 0, width, height);
  const span = Math.max(line.end, 1e-9);
  const x = (t) => LABEL + (width - LABEL - 8) * t / span;
  line.lanes.forEach((name, i) => {
    g.fillStyle = i % 2 ? '#f6f7f9' : '#eef1f5';
    g.fillRect(0, i * LANE, width, LANE);
    g.fillStyle = '#222';
    g.font = '12px sans-serif';
    g.fillText(name, 6, i * LANE + LANE / 2 + 4);
  });
  for (const [lane, start, duration, , parent] of line.runs || []) {  // a compiled step: one bar, its ops inside
    const left = Math.floor(x(start));
    const wide = Math.max(4, Math.round(x(start + duration)) - left);  // steps back to back still show apart
    if (parent < 0) {
      g.fillStyle = '#e3e9f3';
      g.fillRect(left, lane * LANE + 2, wide - 1, LANE - 4);
      g.strokeStyle = '#4e79a7';
      g.lineWidth = 1;
      g.strokeRect(left + 0.5, lane * LANE + 2.5, wide - 2, LANE - 5);
    } else {  // a command buffer's run inside it: a dark band along its top
      g.fillStyle = '#333';
      g.fillRect(left + 2, lane * LANE + 4, wide - 4, 3);
    }
  }
  let last = null;
  for (const [lane, start, duration, , type, run] of line.ops) {  // whole pixels, 2 at least: short ops stay visible
    if (last && last[0] === lane && last[1] === start && last[2] === duration) continue;  // one kernel's ops: once
    last = [lane, start, duration];
    const left = Math.floor(x(start));
    const inside = run !== undefined && run >= 0;
    g.fillStyle = colorOf(type);
    g.fillRect(left, lane * LANE + (inside ? 9 : 5), Math.max(2, Math.round(x(start + duration)) - left),
               inside ? LANE - 15 : LANE - 10);
  }
  g.strokeStyle = '#f28e2b';
  g.lineWidth = 1.5;
  for (const [src, dst, start, duration] of line.transfers) {
    g.beginPath();
    g.moveTo(x(start), src * LANE + LANE / 2);
    g.lineTo(x(start + duration), dst * LANE + LANE / 2);
    g.stroke();
  }
  g.fillStyle = '#555';
  g.font = '11px sans-serif';
  const axis = LANE * line.lanes.length + 16;
  for (let k = 0; k <= 4; k++) {
    const t = span * k / 4;
    g.fillText(line.timed ? formatUs(t) : `#${Math.round(t)}`, x(t) - (k === 4 ? 40 : 0), axis);
  }
}

function hover(event, canvas, tip) {
  const line = state.view.timeline;
  const box = canvas.getBoundingClientRect();
  const px = event.clientX - box.left;
  const lane = Math.floor((event.clientY - box.top) / LANE);
  const width = box.width;
  const span = Math.max(line.end, 1e-9);
  const t = (px - LABEL) * span / (width - LABEL - 8);
  const slack = 3 * span / (width - LABEL - 8);
  const hit = line.ops.find(([l, start, duration]) => l === lane && start - slack <= t && t <= start + duration + slack);
  tip.textContent = hit ? describeHit(line, hit) : '';
}

// What the pointer is on: the op (every op of its kernel), and the compiled step and command buffer it ran in.
function describeHit(line, hit) {
  const [lane, start, duration, node, type, run] = hit;
  const time = line.timed ? formatUs(duration) : 'no time recorded';
  if (run === undefined || run < 0) {
    return `${line.lanes[lane]} · ${state.tree.pathOf(node)} (${line.types[type]}) · ${time}`;
  }
  const same = line.ops.filter((o) => o[0] === lane && o[1] === start && o[2] === duration && o[5] === run);
  const names = same.slice(0, 6).map((o) => `${state.tree.pathOf(o[3])} (${line.types[o[4]]})`).join(', ') +
                (same.length > 6 ? `, … ${same.length - 6} more` : '');
  const inner = line.runs[run];
  const step = inner[4] >= 0 ? line.runs[inner[4]] : inner;
  const graph = inner[4] >= 0 ? ` in command buffer ${inner[3]}` : '';
  return `${line.lanes[lane]} · XLA ${step[3]} (a run of ${step[5]} ops, ${formatUs(step[2])})${graph} · ` +
         `${same.length} op(s) of one kernel: ${names} · ${time}`;
}

// ----------------------------------------------------------------------------- diff

function diffSection() {
  const pick = (suffix) => {
    const steps = el('select', {id: `diff-step${suffix}`});
    const runs = runSelect(`diff-run${suffix}`, () => fillSteps(steps, state.runs[Number(runs.value)]));
    runs.value = String(state.runs.indexOf(state.current));
    fillSteps(steps, state.current, suffix ? undefined : state.current.steps[0]);
    return [runs, steps];
  };
  const [runA, stepA] = pick('');
  const [runB, stepB] = pick('2');
  const out = el('div', {id: 'diff-out'});
  const go = async () => {
    const a = state.runs[Number(runA.value)];
    const b = state.runs[Number(runB.value)];
    out.replaceChildren(el('p', {class: 'loading', text: 'Comparing…'}));
    try {
      const d = await getJson('diff', {run: a.run, tag: a.tag, step: stepA.value,
                                       run2: b.run, tag2: b.tag, step2: stepB.value});
      out.replaceChildren(...diffBody(d));
    } catch (error) {
      out.replaceChildren(el('p', {class: 'error', text: error.message}));
    }
  };
  return section('diff', 'Compare two runs or two steps',
    el('div', {class: 'toolbar'}, el('label', {}, 'A ', runA, stepA), el('label', {}, 'B ', runB, stepB),
       el('button', {id: 'diff-go', text: 'Compare', onclick: go})), out);
}

function diffBody(d) {
  if (d.unchanged) return [el('p', {class: 'same', text: 'Placement unchanged: every op ran on the same device.'})];
  const devices = el('table', {class: 'plain'}, el('tr', {}, ...['device', 'ops A', 'ops B', 'busy A', 'busy B']
    .map((h) => el('th', {text: h}))), ...d.devices.map((r) => el('tr', {},
      el('td', {text: r.name}), el('td', {text: r.ops_before}), el('td', {text: r.ops_after}),
      el('td', {text: formatUs(r.busy_before)}), el('td', {text: formatUs(r.busy_after)}))));
  const pairs = el('table', {class: 'plain'}, el('tr', {}, ...['transfers', 'A', 'B'].map((h) => el('th', {text: h}))),
    ...d.transfers.map((r) => el('tr', {}, el('td', {text: r.pair}), el('td', {text: r.before}),
                                 el('td', {text: r.after}))));
  const moved = virtualList('moved', Math.min(300, ROW * Math.max(1, d.moved.length) + 4));
  moved.renderRow = ([name, a, b]) => el('div', {class: 'row'}, el('code', {class: 'name', text: name}),
                                         el('span', {text: `${a} → ${b}`}));
  queueMicrotask(() => moved.set(d.moved));
  return [el('p', {text: `${d.moved.length} op(s) moved, ${d.added.length} added, ${d.removed.length} removed`}),
          el('div', {class: 'device-row'}, devices, pairs), moved.outer];
}
