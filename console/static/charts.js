// The console's charts: inline SVG drawn from a JSON spec the page carries, no library, nothing inline (the CSP
// admits only this origin's scripts and styles, so colours are classes in console.css, never style attributes).
//
// <figure class="chart" data-chart='SPEC'> is drawn once, on load and whenever htmx swaps one in. SPEC, as
// console/charts.py writes it:
//   {"kind": "line", "title": "…", "unit": "req/s", "x": [unix seconds…],
//    "series": [{"name": "…", "values": [number or null…], "tone": "accent"}, …]}   a time series; null: a gap
//   {"kind": "bar", "title": "…", "unit": "GPUs", "categories": ["node-1", …],
//    "series": [{"name": "…", "values": [number…]}, …]}                stacked bars, one per category
// Up to six series; a series' colour is its tone (accent, bad, ok, warn, muted, violet: classes in console.css),
// by default the next in that order. Every point and bar has a <title> (the browser's tooltip); the figures are
// also in the page's table, which is what a screen reader should read: the SVG is one labelled image.
"use strict";
(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 640, HEIGHT = 240;
  const LEFT = 52, RIGHT = 12, TOP = 30, BOTTOM = 30;
  const PLOT_W = WIDTH - LEFT - RIGHT, PLOT_H = HEIGHT - TOP - BOTTOM;
  const TICKS = 4;
  const TONES = ["accent", "bad", "ok", "warn", "muted", "violet"];
  const tone = (series, index) => "tone-" + (TONES.includes(series.tone) ? series.tone : TONES[index % TONES.length]);

  function node(parent, name, attributes, text) {
    const element = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, String(value));
    if (text !== undefined) element.textContent = text;
    parent.appendChild(element);
    return element;
  }

  function figure(value) {
    if (value === null || value === undefined) return "—";
    const size = Math.abs(value);
    if (size >= 1e6) return (value / 1e6).toFixed(size >= 1e7 ? 0 : 1) + "M";
    if (size >= 1e3) return (value / 1e3).toFixed(size >= 1e4 ? 0 : 1) + "k";
    return String(Number.isInteger(value) ? value : Number(value.toFixed(size >= 10 ? 1 : 2)));
  }

  // The axis: TICKS equal steps of 1, 2, 2.5 or 5 times a power of ten (whole steps for whole figures, such as
  // GPUs or copies), the top at least the largest value; 0…TICKS when all are 0.
  function axisTop(values) {
    const largest = Math.max(0, ...values);
    if (!(largest > 0)) return TICKS;
    const wanted = largest / TICKS;
    const power = Math.pow(10, Math.floor(Math.log10(wanted)));
    let step = 10 * power;
    for (const factor of [1, 2, 2.5, 5]) {
      if (factor * power >= wanted) { step = factor * power; break; }
    }
    if (values.every(Number.isInteger)) step = Math.max(1, Math.ceil(step));
    return step * TICKS;
  }

  function clock(seconds) {
    return new Date(seconds * 1000).toISOString().slice(11, 16);
  }

  function frame(svg, spec, top) {
    for (let tick = 0; tick <= TICKS; tick++) {
      const y = TOP + PLOT_H - (PLOT_H * tick) / TICKS;
      node(svg, "line", { class: "gridline", x1: LEFT, x2: LEFT + PLOT_W, y1: y, y2: y });
      node(svg, "text", { class: "tick", x: LEFT - 6, y: y + 4, "text-anchor": "end" }, figure((top * tick) / TICKS));
    }
    node(svg, "text", { class: "unit", x: 4, y: TOP - 12 }, spec.unit || "");
    // The legend, in the series' order, right-aligned above the plot: labels measured first, then placed.
    const labels = spec.series.map((series) => node(svg, "text", { class: "legend", y: TOP - 12 }, series.name));
    const widths = labels.map((label) => (label.getComputedTextLength ? label.getComputedTextLength() : 0)
                                          || 6 * label.textContent.length);
    let x = LEFT + PLOT_W - widths.reduce((sum, width) => sum + width + 26, -12);
    spec.series.forEach((series, index) => {
      node(svg, "rect", { class: tone(series, index), x: x, y: TOP - 21, width: 10, height: 10 });
      labels[index].setAttribute("x", String(x + 14));
      x += widths[index] + 26;
    });
  }

  function drawLine(svg, spec) {
    const count = spec.x.length;
    const values = spec.series.flatMap((series) => series.values.filter((v) => v !== null));
    const top = axisTop(values);
    frame(svg, spec, top);
    const xAt = (index) => LEFT + (count > 1 ? (PLOT_W * index) / (count - 1) : PLOT_W / 2);
    const yAt = (value) => TOP + PLOT_H - (PLOT_H * value) / top;
    const every = Math.max(1, Math.ceil(count / 6));
    for (let index = 0; index < count; index += every) {
      node(svg, "text", { class: "tick", x: xAt(index), y: HEIGHT - 10, "text-anchor": "middle" }, clock(spec.x[index]));
    }
    spec.series.forEach((series, which) => {
      let path = "", pen = "M";
      series.values.forEach((value, index) => {
        if (value === null) { pen = "M"; return; }
        path += pen + xAt(index).toFixed(1) + " " + yAt(value).toFixed(1) + " ";
        pen = "L";
      });
      if (path) node(svg, "path", { class: "line " + tone(series, which), d: path.trim() });
      series.values.forEach((value, index) => {
        if (value === null) return;
        const dot = node(svg, "circle", { class: "dot " + tone(series, which), cx: xAt(index), cy: yAt(value), r: 2.5 });
        node(dot, "title", {}, clock(spec.x[index]) + " UTC · " + series.name + ": " + figure(value) + " " + spec.unit);
      });
    });
    if (!values.length) {
      node(svg, "text", { class: "empty", x: LEFT + PLOT_W / 2, y: TOP + PLOT_H / 2, "text-anchor": "middle" },
           "nothing recorded in this window");
    }
  }

  function drawBars(svg, spec) {
    const count = spec.categories.length;
    const sums = spec.categories.map((_, index) => spec.series.reduce((sum, s) => sum + (s.values[index] || 0), 0));
    const top = axisTop(sums);
    frame(svg, spec, top);
    const band = PLOT_W / Math.max(1, count), width = Math.max(1, band * 0.7);
    const every = Math.max(1, Math.ceil(count / Math.floor(PLOT_W / 56)));  // labels ~56 px apart at least
    spec.categories.forEach((category, index) => {
      const x = LEFT + band * index + (band - width) / 2;
      let base = TOP + PLOT_H;
      spec.series.forEach((series, which) => {
        const value = series.values[index] || 0;
        const height = (PLOT_H * value) / top;
        if (value > 0) {
          const bar = node(svg, "rect", { class: "bar " + tone(series, which), x: x, y: base - height, width: width, height: height });
          node(bar, "title", {}, category + " · " + series.name + ": " + figure(value) + " " + spec.unit);
        }
        base -= height;
      });
      if (index % every === 0) {
        const room = Math.max(3, Math.floor((band * every * 0.9) / 6.5));  // characters of ~6.5 px
        const short = category.length > room ? category.slice(0, room - 1) + "…" : category;
        const label = node(svg, "text", { class: "tick", x: x + width / 2, y: HEIGHT - 10, "text-anchor": "middle" }, short);
        node(label, "title", {}, category);
      }
    });
    if (!count) {
      node(svg, "text", { class: "empty", x: LEFT + PLOT_W / 2, y: TOP + PLOT_H / 2, "text-anchor": "middle" },
           "nothing to show");
    }
  }

  function draw(holder) {
    let spec;
    try {
      spec = JSON.parse(holder.dataset.chart);
    } catch (_error) {
      return;  // the page's table still has the figures
    }
    holder.querySelectorAll("svg").forEach((old) => old.remove());
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", spec.title);
    svg.setAttribute("class", "chart-" + spec.kind);
    holder.insertBefore(svg, holder.firstChild);  // in the document first: legend widths are measured
    node(svg, "title", {}, spec.title);
    (spec.kind === "bar" ? drawBars : drawLine)(svg, spec);
    holder.dataset.drawn = "true";
  }

  function drawWithin(root) {
    if (root.matches && root.matches("[data-chart]")) draw(root);
    if (root.querySelectorAll) root.querySelectorAll("[data-chart]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", () => drawWithin(document));
  // A live part htmx swapped in: its charts are new elements with their own specs.
  document.addEventListener("htmx:load", (event) => { if (event.target !== document.body) drawWithin(event.target); });
})();
