/* drafthub registry: sorting and filtering the leaderboard, drawing the compare view. No dependencies. */
"use strict";

function sortValue(cell, type) {
  const raw = cell.dataset.sort;
  if (raw === undefined || raw === "") return null; // no figure: always last
  return type === "num" ? Number(raw) : raw.toLowerCase();
}

function setUpLeaderboard(table) {
  const body = table.tBodies[0];
  const headers = Array.from(table.tHead.rows[0].cells);
  headers.forEach((th, index) => {
    if (!th.classList.contains("sortable")) return;
    th.querySelector("button").addEventListener("click", () => {
      const type = th.dataset.type;
      const first = type === "num" ? "descending" : "ascending"; // bigger figures first, names A to Z
      const next = th.getAttribute("aria-sort") === first ? (first === "descending" ? "ascending" : "descending") : first;
      headers.forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", next);
      const sign = next === "descending" ? -1 : 1;
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const x = sortValue(a.cells[index], type);
        const y = sortValue(b.cells[index], type);
        if (x === null || y === null) return (x === null) - (y === null);
        return x < y ? -sign : x > y ? sign : 0;
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
  const filters = document.getElementById("filters");
  if (filters) {
    filters.addEventListener("change", () => {
      const shown = new Set(Array.from(filters.querySelectorAll("input:checked")).map((box) => box.value));
      Array.from(body.rows).forEach((row) => { row.hidden = !shown.has(row.dataset.family); });
    });
  }
  const button = document.getElementById("compare-selected");
  const picked = () => Array.from(body.querySelectorAll("input.pick:checked")).map((box) => box.value);
  body.addEventListener("change", () => {
    const n = picked().length;
    button.disabled = n < 2;
    button.textContent = n ? `Compare selected (${n})` : "Compare selected";
  });
  button.addEventListener("click", () => {
    const query = new URLSearchParams(picked().map((id) => ["v", id]));
    window.location.href = "compare.html#" + query.toString();
  });
}

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83", "#bf3989", "#6e7781", "#9a6700",
  "#0550ae"];

function svgNode(parent, name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  Object.entries(attributes).forEach(([key, value]) => node.setAttribute(key, value));
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}

function drawAcceptance(svg, drafters) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const width = 680, height = 320, left = 50, right = 190, top = 16, bottom = 40;
  const positions = Math.max(1, ...drafters.map((d) => d.acceptance.length));
  const x = (i) => left + (positions === 1 ? 0.5 : (i - 1) / (positions - 1)) * (width - left - right);
  const y = (v) => top + (1 - v) * (height - top - bottom);
  [0, 0.25, 0.5, 0.75, 1].forEach((v) => {
    svgNode(svg, "line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" });
    svgNode(svg, "text", { x: left - 8, y: y(v) + 4, "text-anchor": "end" }, v.toFixed(2));
  });
  for (let i = 1; i <= positions; i++) {
    svgNode(svg, "text", { x: x(i), y: height - bottom + 16, "text-anchor": "middle" }, String(i));
  }
  svgNode(svg, "text", { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle" }, "draft position i");
  svgNode(svg, "text", { x: 12, y: top + (height - top - bottom) / 2, transform: `rotate(-90 12 ${top + (height - top - bottom) / 2})`,
    "text-anchor": "middle" }, "P(accepted ≥ i)");
  drafters.forEach((d, k) => {
    const colour = COLOURS[k % COLOURS.length];
    const points = d.acceptance.map((v, i) => `${x(i + 1)},${y(v)}`).join(" ");
    svgNode(svg, "polyline", { points, fill: "none", stroke: colour, "stroke-width": 2, "data-id": d.id });
    d.acceptance.forEach((v, i) => svgNode(svg, "circle", { cx: x(i + 1), cy: y(v), r: 3, fill: colour }));
    svgNode(svg, "rect", { x: width - right + 14, y: top + 18 * k, width: 12, height: 12, fill: colour });
    svgNode(svg, "text", { x: width - right + 32, y: top + 18 * k + 10 }, d.label);
  });
}

function setUpCompare(data) {
  const byId = new Map(data.drafters.map((d) => [d.id, d]));
  const table = document.getElementById("compare-table");
  const note = document.getElementById("compare-note");
  const pick = document.getElementById("compare-pick");
  const render = () => {
    const asked = new URLSearchParams(window.location.hash.slice(1)).getAll("v");
    const missing = asked.filter((id) => !byId.has(id));
    let chosen = asked.filter((id) => byId.has(id)).map((id) => byId.get(id));
    if (!asked.length) chosen = data.drafters.slice(0, 3); // nothing asked: the three highest τ
    note.textContent = (asked.length ? "" : "The three drafters with the highest τ; tick others below. ") +
      (missing.length ? `Not in this registry: ${missing.join(", ")}.` : "");
    while (table.firstChild) table.removeChild(table.firstChild);
    const head = table.createTHead().insertRow();
    head.appendChild(document.createElement("th"));
    chosen.forEach((d) => {
      const th = document.createElement("th");
      th.scope = "col";
      const link = document.createElement("a");
      link.href = d.href;
      link.textContent = d.label + (d.best ? " ★" : "");
      th.appendChild(link);
      head.appendChild(th);
    });
    const body = table.createTBody();
    data.columns.forEach((name, c) => {
      if (c === 0) return; // the drafter's name heads its column
      const row = body.insertRow();
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = name;
      row.appendChild(th);
      chosen.forEach((d) => { row.insertCell().textContent = d.cells[c]; });
    });
    drawAcceptance(document.getElementById("acceptance-plot"), chosen);
    const ids = new Set(chosen.map((d) => d.id));
    pick.querySelectorAll("input").forEach((box) => { box.checked = ids.has(box.value); });
  };
  pick.addEventListener("change", () => {
    const ids = Array.from(pick.querySelectorAll("input:checked")).map((box) => box.value);
    window.location.hash = new URLSearchParams(ids.map((id) => ["v", id])).toString();
  });
  window.addEventListener("hashchange", render);
  render();
}

document.addEventListener("DOMContentLoaded", () => {
  const board = document.getElementById("leaderboard");
  if (board) setUpLeaderboard(board);
  const data = document.getElementById("drafters");
  if (data) setUpCompare(JSON.parse(data.textContent));
});
