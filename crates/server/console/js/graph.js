// The why-graph drawn as a graph: nodes in columns by their distance from the conclusion,
// edges as curves styled by their kind, every node focusable and its details shown on demand.
// The SVG elements are made in the namespace of an <svg> the HTML parser made, so no namespace
// name needs writing here.

import {fill, h, when} from './dom.js';

const NODE_W = 230;
const NODE_H = 34;
const COL_GAP = 90;
const ROW_GAP = 12;
const PAD = 16;

function svgNamespace() {
  const t = document.createElement('template');
  t.innerHTML = '<svg></svg>';
  return t.content.firstChild.namespaceURI;
}

function s(ns, tag, attrs = {}, ...children) {
  const el = document.createElementNS(ns, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

/** The graph `g` (`{root, nodes, edges}` as GraphQL gives it) as an SVG with a detail panel. */
export function drawWhyGraph(g, citeLink) {
  const ns = svgNamespace();
  const depth = new Map([[g.root, 0]]);
  const queue = [g.root];
  while (queue.length) {
    const at = queue.shift();
    for (const e of g.edges) {
      if (e.from === at && !depth.has(e.to)) {
        depth.set(e.to, depth.get(at) + 1);
        queue.push(e.to);
      }
    }
  }
  const maxDepth = Math.max(0, ...depth.values());
  for (const n of g.nodes) if (!depth.has(n.id)) depth.set(n.id, maxDepth + 1);
  const columns = [];
  for (const n of g.nodes) {
    const d = depth.get(n.id);
    (columns[d] = columns[d] || []).push(n);
  }
  const pos = new Map();
  columns.forEach((col, c) => (col || []).forEach((n, r) => {
    pos.set(n.id, {x: PAD + c * (NODE_W + COL_GAP), y: PAD + r * (NODE_H + ROW_GAP)});
  }));
  const rows = Math.max(...columns.map((c) => (c ? c.length : 0)));
  const width = PAD * 2 + columns.length * NODE_W + (columns.length - 1) * COL_GAP;
  const height = PAD * 2 + rows * NODE_H + (rows - 1) * ROW_GAP;
  const detail = h('div', {class: 'graph-detail', 'aria-live': 'polite'}, h('p', {class: 'muted'}, 'Choose a node to see what it rests on.'));
  const svg = s(ns, 'svg', {viewBox: `0 0 ${width} ${height}`, width, height, role: 'group',
    'aria-label': `Why-graph of ${g.conclusionId}: ${g.nodes.length} nodes, ${g.edges.length} edges`});
  const edges = s(ns, 'g', {class: 'edges'});
  for (const e of g.edges) {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x;
    const y2 = b.y + NODE_H / 2;
    const mid = (x1 + x2) / 2;
    const path = s(ns, 'path', {d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, class: `edge e-${e.kind.toLowerCase()}`});
    path.append(s(ns, 'title', {}, `${e.from} → ${e.to}: ${e.kind.toLowerCase().replace(/_/g, ' ')}`));
    edges.append(path);
  }
  svg.append(edges);
  const show = (n) => {
    const out = g.edges.filter((e) => e.from === n.id).map((e) => `${e.kind.toLowerCase().replace(/_/g, ' ')} → ${e.to}`);
    fill(detail,
      h('h4', {}, n.label),
      h('p', {}, `${n.kind} · established by `, citeLink(n.cite), ` · ${n.actor} · `, when(n.recordedAt)),
      out.length ? h('ul', {}, out.map((t) => h('li', {}, t))) : null,
      h('details', {}, h('summary', {}, 'Values'), h('pre', {}, JSON.stringify(n.detail, null, 2))));
  };
  const nodes = s(ns, 'g', {class: 'nodes'});
  for (const n of g.nodes) {
    const p = pos.get(n.id);
    const group = s(ns, 'g', {class: `node k-${n.kind}`, transform: `translate(${p.x},${p.y})`, tabindex: 0, role: 'button',
      'aria-label': `${n.kind}: ${n.label}`, 'data-node': n.id});
    group.append(s(ns, 'rect', {width: NODE_W, height: NODE_H, rx: 6}));
    group.append(s(ns, 'text', {x: 8, y: NODE_H / 2 + 4}, clip(n.label, 34)));
    group.append(s(ns, 'title', {}, n.label));
    group.addEventListener('click', () => show(n));
    group.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        show(n);
      }
    });
    nodes.append(group);
  }
  svg.append(nodes);
  const legend = h('p', {class: 'legend'}, ['component', 'input', 'adjudication', 'upheld', 'overruled', 'stands', 'pending', 'decided_by', 'supersedes']
    .map((k) => h('span', {class: `key e-${k}`}, k.replace(/_/g, ' '))));
  return h('div', {class: 'why'}, h('div', {class: 'graph-scroll'}, svg), legend, detail);
}
