/* pytest-gpuperf dashboard (gpuperf dashboard): the tables' filters and sorting, and each benchmark
   page's plots, drawn with Plotly (assets/plotly.min.js, written beside this file: nothing is
   loaded from the network). A benchmark page carries its series as JSON in <script id="gp-data">. */
(function () {
  "use strict";
  var ALL = "*";
  var SHORT = 9;

  function esc(s) {  // Plotly renders a small HTML subset in hover and annotation text: show names as text
    return String(s == null ? "" : s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function short(sha) { return sha ? String(sha).slice(0, SHORT) : "-"; }

  function fmt(v) { return v == null ? "-" : Number(v).toPrecision(4); }

  /* ---------------------------------------------------------------- filters and sorting */

  function setupFilters() {
    var inputs = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
    if (!inputs.length) { return; }
    var params = new URLSearchParams(location.search);
    inputs.forEach(function (el) {
      var v = params.get(el.dataset.filter);
      if (v !== null && (el.tagName !== "SELECT" || Array.prototype.some.call(el.options, function (o) { return o.value === v; }))) {
        el.value = v;
      }
      el.addEventListener("input", apply);
    });
    apply();

    function apply() {
      var want = {};
      inputs.forEach(function (el) { want[el.dataset.filter] = el.value; });
      document.querySelectorAll("table[data-filtered]").forEach(function (table) {
        var shown = 0, rows = table.tBodies[0] ? table.tBodies[0].rows : [];
        Array.prototype.forEach.call(rows, function (tr) {
          var ok = ["device", "branch"].every(function (k) {
            return want[k] === undefined || want[k] === ALL || tr.dataset[k] === want[k];
          });
          if (ok && want.text) { ok = (tr.dataset.name || "").indexOf(want.text.toLowerCase()) >= 0; }
          tr.hidden = !ok;
          shown += ok ? 1 : 0;
        });
        var count = document.querySelector('[data-count-for="' + table.id + '"]');
        if (count) { count.textContent = shown + " of " + rows.length + " shown"; }
      });
      var q = new URLSearchParams();
      inputs.forEach(function (el) { if (el.value && el.value !== ALL) { q.set(el.dataset.filter, el.value); } });
      try { history.replaceState(null, "", q.toString() ? "?" + q.toString() : location.pathname); } catch (e) { /* file:// may refuse */ }
      document.querySelectorAll("a[data-keep-branch]").forEach(function (a) {
        var base = a.getAttribute("href").split("?")[0];
        a.setAttribute("href", want.branch && want.branch !== ALL ? base + "?branch=" + encodeURIComponent(want.branch) : base);
      });
      document.dispatchEvent(new CustomEvent("gp-filter", { detail: want }));
    }
  }

  function setupSorting() {
    document.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () {
        var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
        var numeric = th.dataset.sort === "num", down = th.dataset.dir !== "down";
        th.dataset.dir = down ? "down" : "up";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col].dataset.v !== undefined ? a.cells[col].dataset.v : a.cells[col].textContent;
          var y = b.cells[col].dataset.v !== undefined ? b.cells[col].dataset.v : b.cells[col].textContent;
          var c = numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : String(x).localeCompare(String(y));
          return down ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  /* ---------------------------------------------------------------- a benchmark's plots */

  function benchPage() {
    var node = document.getElementById("gp-data");
    if (!node || typeof Plotly === "undefined") { return; }
    var d = JSON.parse(node.textContent);
    document.addEventListener("gp-filter", function (ev) { render(d, ev.detail.branch || ALL); });
    if (!document.querySelector('[data-filter="branch"]')) { render(d, ALL); }
  }

  function picked(d, branch) {
    var idx = [];
    for (var i = 0; i < d.runs.median.length; i++) {
      if (branch === ALL || d.runs.branch[i] === branch) { idx.push(i); }
    }
    return idx;
  }

  function verdictText(r, i) {  // the verdict with the clock that decided it, where CPU time did
    return (r.verdict[i] || "-") + (r.clock && r.clock[i] === "cpu" ? " on CPU time" : "");
  }

  function hoverData(d, idx) {
    var r = d.runs;
    return idx.map(function (i) {
      return [short(r.commit[i]), esc(d.subjects[r.commit[i]] || ""), esc(r.date[i]), esc(r.machine[i] || "-"),
              esc(r.branch[i] || "-"), esc(verdictText(r, i))];
    });
  }

  var HOVER = "<b>%{customdata[0]}</b> %{customdata[1]}<br>%{customdata[2]}<br>machine: %{customdata[3]}" +
              "<br>branch: %{customdata[4]} · verdict: %{customdata[5]}<br>";

  function axis(d, idx) {
    var step = Math.max(1, Math.ceil(idx.length / 14)), vals = [], text = [];
    idx.forEach(function (i, k) {
      if (k % step === 0) { vals.push(k); text.push(d.runs.commit[i] ? short(d.runs.commit[i]) : String(d.runs.date[i]).slice(0, 10)); }
    });
    return { title: { text: "run (oldest first), labelled by commit" }, tickmode: "array", tickvals: vals, ticktext: text,
             tickangle: -40, range: [-0.7, Math.max(idx.length - 0.3, 0.3)], zeroline: false };
  }

  function changeMarks(d, idx) {
    var where = {}, shapes = [], notes = [];
    idx.forEach(function (i, k) { where[i] = k; });
    d.changes.forEach(function (c, j) {
      if (c.pos == null || where[c.pos] === undefined) { return; }
      var x = where[c.pos] - 0.5, color = c.slower ? "#c0392b" : "#1e8449";
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color: color, width: 2, dash: "dash" } });
      notes.push({ x: x, xref: "x", y: j % 2 ? 1.11 : 1.02, yref: "paper", yanchor: "bottom", showarrow: false,
                   text: esc(c.range) + " " + (c.pct >= 0 ? "+" : "") + c.pct.toFixed(1) + "%" +
                         (c.p == null ? "" : " p=" + Number(c.p).toPrecision(2)),
                   hovertext: esc(c.bisect || c.range), font: { color: color, size: 12 }, bgcolor: "rgba(255,255,255,0.85)" });
    });
    return { shapes: shapes, annotations: notes };
  }

  function timeTraces(d, idx) {
    var r = d.runs, cd = hoverData(d, idx), x = idx.map(function (_, k) { return k; });
    var col = function (a) { return idx.map(function (i) { return a[i]; }); };
    var px = [], py = [], pcd = [];
    idx.forEach(function (i, k) {
      (r.pm[i] || []).forEach(function (v) { px.push(k); py.push(v); pcd.push(cd[k]); });
    });
    return [
      { x: x, y: col(r.hi), mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false },
      { x: x, y: col(r.lo), mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: "rgba(31,119,180,0.18)",
        name: "95% CI of the median", hoverinfo: "skip" },
      { x: px, y: py, mode: "markers", name: "process medians", customdata: pcd,
        marker: { size: 5, color: "rgba(90,90,90,0.5)" }, hovertemplate: HOVER + "process median: %{y:.4g} ms<extra></extra>" },
      { x: x, y: col(r.median), mode: "lines+markers", name: "median", customdata: cd, line: { color: "#1f77b4", width: 2 },
        marker: { size: 6 }, hovertemplate: HOVER + "median: %{y:.4g} ms<extra></extra>" }
    ];
  }

  var CONFIG = { responsive: true, displaylogo: false };

  function layout(d, idx, ytitle, marks) {
    return { margin: { l: 70, r: 20, t: marks ? 70 : 30, b: 90 }, height: marks ? 440 : 320, hovermode: "closest",
             xaxis: axis(d, idx), yaxis: { title: { text: ytitle }, rangemode: marks ? "normal" : "tozero" },
             legend: { orientation: "h", x: 0, y: -0.32 },
             shapes: marks ? marks.shapes : [], annotations: marks ? marks.annotations : [] };
  }

  function render(d, branch) {
    var idx = picked(d, branch), x = idx.map(function (_, k) { return k; });
    var col = function (a) { return idx.map(function (i) { return a[i]; }); };
    Plotly.react("gp-time", timeTraces(d, idx), layout(d, idx, "time per call (ms)", changeMarks(d, idx)), CONFIG);
    var cd = hoverData(d, idx);
    if (d.runs.mem && document.getElementById("gp-memory")) {
      Plotly.react("gp-memory", [{ x: x, y: col(d.runs.mem), mode: "lines+markers", name: "peak memory", customdata: cd,
                                   hovertemplate: HOVER + "peak memory: %{y:.4g} MiB<extra></extra>" }],
                   layout(d, idx, "peak memory (MiB)"), CONFIG);
    }
    countPlots(d, idx, x, cd);
    runsTable(d, idx);
  }

  /* one small plot per count (ops, syncs, FLOPs, bytes...): each on its own axis, so an op count
     that went 2 -> 4 is not flattened under 10 M bytes; a run where a count changed is marked */
  function countPlots(d, idx, x, cd) {
    var where = {};
    idx.forEach(function (i, k) { where[i] = k; });
    Object.keys(d.counts || {}).sort().forEach(function (n, k) {
      var el = document.getElementById("gp-count-" + k);
      if (!el) { return; }
      var steps = ((d.countSteps || {})[n] || []).filter(function (st) { return where[st.pos] !== undefined; });
      var up = steps.some(function (st) { return st.to > st.from; }), color = steps.length ? (up ? "#c0392b" : "#b9770e") : "#1f77b4";
      var trace = { x: x, y: idx.map(function (i) { return d.counts[n][i]; }), mode: "lines+markers", name: esc(n),
                    customdata: cd, line: { color: color, width: 2, shape: "hv" }, marker: { size: 5 },
                    hovertemplate: HOVER + esc(n) + ": %{y:.6g} per call<extra></extra>" };
      var lay = layout(d, idx, "per call");
      lay.height = 240; lay.margin = { l: 60, r: 12, t: 12, b: 70 }; lay.showlegend = false;
      lay.xaxis.title = { text: "" };
      lay.shapes = steps.map(function (st) {
        var xs = where[st.pos] - 0.5;
        return { type: "line", xref: "x", yref: "paper", x0: xs, x1: xs, y0: 0, y1: 1, line: { color: color, width: 1.5, dash: "dot" } };
      });
      Plotly.react(el, [trace], lay, CONFIG);
    });
  }

  function runsTable(d, idx) {
    var body = document.querySelector("#gp-runs tbody");
    if (!body) { return; }
    var r = d.runs, newest = idx.slice(-30).reverse();
    body.textContent = "";
    newest.forEach(function (i) {
      var tr = body.insertRow();
      [String(r.date[i]).replace("T", " ").slice(0, 19), short(r.commit[i]), d.subjects[r.commit[i]] || "", r.branch[i] || "-",
       r.machine[i] || "-", fmt(r.median[i]), r.lo[i] == null ? "-" : fmt(r.lo[i]) + " – " + fmt(r.hi[i]), verdictText(r, i)]
        .forEach(function (text, c) {
          var td = tr.insertCell();
          td.textContent = text;
          if (c === 1) { td.className = "mono"; }
          if (c === 5 || c === 6) { td.className = "num"; }
          if (c === 7) { td.className = "verdict-" + (r.verdict[i] || "-"); }
        });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    benchPage();
    setupSorting();
    setupFilters();
  });
}());
