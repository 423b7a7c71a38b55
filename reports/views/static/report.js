
(function () {
  "use strict";
  var META = JSON.parse(document.getElementById("meta").textContent);
  var MAX_ROWS = 20000;          // diff rows rendered before a "show all" button
  var cache = new Map();         // blob id -> Promise(decoded object)
  var state = new Map();         // schedule index -> {stage, view, mode, seq, shown}

  function decode(id) {
    if (cache.has(id)) return cache.get(id);
    var p = (async function () {
      if (typeof DecompressionStream === "undefined") throw new Error("this browser has no DecompressionStream");
      var el = document.getElementById(id);
      var bin = atob(el.textContent.trim());
      var bytes = new Uint8Array(bin.length);
      for (var k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      return JSON.parse(await new Response(stream).text());
    })();
    cache.set(id, p);
    return p;
  }

  function msg(text) { var d = document.createElement("div"); d.className = "msg"; d.textContent = text; return d; }

  function stOf(i) {
    if (!state.has(i)) {
      var stages = Object.keys(META.schedules[i].stages);
      state.set(i, {stage: stages[0], view: "ir", mode: "unified", seq: 0, shown: null});
    }
    return state.get(i);
  }

  // IR as a <pre> of chunks of CHUNK lines; chunks off screen are neither laid out nor painted
  // (content-visibility), so a 10k-line stage stays smooth. Line numbers are CSS counters.
  var CHUNK = 200, LINE_PX = 17.4;
  function codeView(lines) {
    var pre = document.createElement("pre");
    pre.className = "code";
    for (var c = 0; c < lines.length; c += CHUNK) {
      var end = Math.min(lines.length, c + CHUNK), parts = [];
      for (var k = c; k < end; k++) parts.push('<span class="x-l">' + lines[k] + "\n</span>");
      var ck = document.createElement("div");
      ck.className = "x-ck";
      ck.style.counterReset = "ln " + c;
      ck.style.containIntrinsicSize = "auto " + Math.ceil((end - c) * LINE_PX) + "px";
      ck.innerHTML = parts.join("");
      pre.appendChild(ck);
    }
    return pre;
  }

  function range(a, b) { return (b - a === 1) ? String(a + 1) : (a + (b > a ? 1 : 0)) + "," + (b - a); }

  // rows of a diff: {t: "hunk"|"eq"|"del"|"add"|"rep", ...}
  function diffRows(hunks, split) {
    var rows = [];
    hunks.forEach(function (g) {
      rows.push({t: "hunk", text: "@@ -" + range(g[0][1], g[g.length - 1][2]) + " +" + range(g[0][3], g[g.length - 1][4]) + " @@"});
      g.forEach(function (op) {
        var tag = op[0], i1 = op[1], i2 = op[2], j1 = op[3], j2 = op[4], k;
        if (tag === "equal") { for (k = 0; k < i2 - i1; k++) rows.push({t: "eq", i: i1 + k, j: j1 + k}); return; }
        if (split && tag === "replace") {
          for (k = 0; k < Math.max(i2 - i1, j2 - j1); k++)
            rows.push({t: "rep", i: (i1 + k < i2) ? i1 + k : -1, j: (j1 + k < j2) ? j1 + k : -1});
          return;
        }
        for (k = i1; k < i2; k++) rows.push(split ? {t: "rep", i: k, j: -1} : {t: "del", i: k});
        for (k = j1; k < j2; k++) rows.push(split ? {t: "rep", i: -1, j: k} : {t: "add", j: k});
      });
    });
    return rows;
  }

  function rowHTML(r, a, b, split) {
    if (r.t === "hunk") return '<tr class="hunk"><td colspan="' + (split ? 4 : 3) + '">' + r.text + "</td></tr>";
    if (split) {
      if (r.t === "eq")
        return '<tr class="eq"><td class="x-n">' + (r.i + 1) + '</td><td class="x-c">' + a[r.i] + '</td><td class="x-n">' + (r.j + 1) + '</td><td class="x-c">' + b[r.j] + "</td></tr>";
      return "<tr>" + (r.i >= 0 ? '<td class="x-n del">' + (r.i + 1) + '</td><td class="x-c del">' + a[r.i] + "</td>" : '<td class="x-n empty"></td><td class="x-c empty"></td>')
        + (r.j >= 0 ? '<td class="x-n add">' + (r.j + 1) + '</td><td class="x-c add">' + b[r.j] + "</td>" : '<td class="x-n empty"></td><td class="x-c empty"></td>') + "</tr>";
    }
    if (r.t === "eq")
      return '<tr class="eq"><td class="x-n">' + (r.i + 1) + '</td><td class="x-n">' + (r.j + 1) + '</td><td class="x-c"><span class="x-s"> </span>' + a[r.i] + "</td></tr>";
    if (r.t === "del")
      return '<tr class="del"><td class="x-n">' + (r.i + 1) + '</td><td class="x-n"></td><td class="x-c"><span class="x-s">-</span>' + a[r.i] + "</td></tr>";
    return '<tr class="add"><td class="x-n"></td><td class="x-n">' + (r.j + 1) + '</td><td class="x-c"><span class="x-s">+</span>' + b[r.j] + "</td></tr>";
  }

  // a diff as chunks of CHUNK rows, each its own fixed-layout table (same columns), so that
  // chunks off screen are skipped by layout (content-visibility) and big diffs stay fast
  function diffView(hunks, a, b, split) {
    var wrap = document.createElement("div");
    wrap.className = "diffview code " + (split ? "split" : "unified");  // .code: the pygments colors
    if (!hunks || hunks.length === 0) { wrap.appendChild(msg("no changes at this stage")); return wrap; }
    var rows = diffRows(hunks, split);
    var cols = split ? '<col class="x-cn"><col><col class="x-cn"><col>' : '<col class="x-cn"><col class="x-cn"><col>';
    var body = document.createElement("div");
    var draw = function (from, to) {
      for (var c = from; c < to; c += CHUNK) {
        var end = Math.min(to, c + CHUNK), h = [];
        for (var x = c; x < end; x++) h.push(rowHTML(rows[x], a, b, split));
        var ck = document.createElement("div");
        ck.className = "x-ck";
        ck.style.containIntrinsicSize = "auto " + Math.ceil((end - c) * LINE_PX) + "px";
        ck.innerHTML = '<table class="diff ' + (split ? "split" : "unified") + '"><colgroup>' + cols + "</colgroup><tbody>" + h.join("") + "</tbody></table>";
        body.appendChild(ck);
      }
    };
    draw(0, Math.min(rows.length, MAX_ROWS));
    wrap.appendChild(body);
    if (rows.length > MAX_ROWS) {
      var more = document.createElement("button");
      more.type = "button"; more.className = "more";
      more.textContent = "show all " + rows.length + " diff rows (" + (rows.length - MAX_ROWS) + " more)";
      more.addEventListener("click", function () { draw(MAX_ROWS, rows.length); more.remove(); });
      wrap.appendChild(more);
    }
    return wrap;
  }

  async function render(panel) {
    var i = +panel.dataset.s, s = META.schedules[i], st = stOf(i);
    var out = panel.querySelector(".out");
    if (!out || !st.stage) return;
    var key = st.stage + "|" + st.view + "|" + st.mode;
    if (st.shown === key) return;
    st.shown = key;
    var seq = ++st.seq;
    out.replaceChildren(msg("decoding " + st.stage + " …"));
    try {
      var info = s.stages[st.stage];
      var cur = await decode(info.blob);
      var node;
      if (st.view === "diff") {
        var prev = s.prev === null ? null : META.schedules[s.prev];
        if (!prev) node = msg("no previous schedule to diff against");
        else if (!prev.stages[st.stage]) node = msg(prev.name + " has no " + st.stage + " stage");
        else {
          var old = await decode(prev.stages[st.stage].blob);
          node = diffView(cur.diff, old.lines, cur.lines, st.mode === "split");
          node.prepend(msg("diff " + prev.name + " → " + s.name + " at stage " + st.stage + ": +" + info.added + " −" + info.removed + " lines"));
        }
      } else {
        node = codeView(cur.lines);
      }
      if (seq === st.seq) { out.replaceChildren(node); panel.dataset.rendered = key; }
    } catch (e) {
      if (seq === st.seq) { st.shown = null; out.replaceChildren(msg("could not show this stage: " + e.message)); }
    }
  }

  function setPressed(buttons, pred) {
    buttons.forEach(function (b) { var on = pred(b); b.classList.toggle("on", on); b.setAttribute("aria-pressed", on ? "true" : "false"); });
  }

  function syncBar(panel) {
    var st = stOf(+panel.dataset.s);
    setPressed(panel.querySelectorAll("button.tab"), function (b) { return b.dataset.stage === st.stage; });
    setPressed(panel.querySelectorAll("button.view"), function (b) { return b.dataset.view === st.view; });
    var modes = panel.querySelectorAll("button.mode");
    setPressed(modes, function (b) { return b.dataset.mode === st.mode; });
    modes.forEach(function (b) { b.disabled = st.view !== "diff"; });
  }

  function openSchedule(i) {
    var panel = document.getElementById("sched-" + i);
    if (!panel) return;
    panel.open = true;
    panel.scrollIntoView({block: "start"});
    // once the IR is in, the page may have grown: scroll again so the panel is at the top
    render(panel).then(function () { panel.scrollIntoView({block: "start"}); });
    panel.classList.add("flash");
    setTimeout(function () { panel.classList.remove("flash"); }, 1200);
  }

  document.querySelectorAll("details.sched").forEach(function (panel) {
    panel.addEventListener("toggle", function () { if (panel.open) render(panel); });
    panel.addEventListener("click", function (ev) {
      var b = ev.target.closest("button");
      var st = stOf(+panel.dataset.s);
      if (b && !b.disabled) {
        if (b.classList.contains("tab")) st.stage = b.dataset.stage;
        else if (b.classList.contains("view")) st.view = b.dataset.view;
        else if (b.classList.contains("mode")) st.mode = b.dataset.mode;
        else return;
        syncBar(panel);
        render(panel);
        return;
      }
      var a = ev.target.closest("a.prevlink");
      if (a) { ev.preventDefault(); openSchedule(+a.dataset.s); }
    });
  });

  var collapse = document.getElementById("collapse-all");
  if (collapse) collapse.addEventListener("click", function () {
    document.querySelectorAll("details.sched[open]").forEach(function (d) { d.open = false; });
  });

  // ---- tables: step rows open schedules; headers sort
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});

  function cellKey(row, col) {
    var c = row.cells[col];
    if (!c) return {k: 2};
    var raw = c.hasAttribute("data-v") ? c.getAttribute("data-v") : c.textContent.trim();
    if (raw === "") return {k: 2};
    var n = Number(raw);
    if (!Number.isNaN(n)) return {k: 0, v: n};
    return {k: 1, v: raw};
  }

  function sortBy(table, th) {
    var col = +th.dataset.col;
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    table.querySelectorAll("thead th").forEach(function (h) {
      h.setAttribute("aria-sort", "none");
      h.querySelector(".arrow").textContent = "";
    });
    th.setAttribute("aria-sort", dir);
    th.querySelector(".arrow").textContent = dir === "ascending" ? "▲" : "▼";
    var sign = dir === "ascending" ? 1 : -1;
    var tbody = table.tBodies[0];
    var rows = Array.from(tbody.rows).map(function (r) { return {r: r, key: cellKey(r, col), o: +r.dataset.o}; });
    rows.sort(function (x, y) {
      var a = x.key, b = y.key, c;
      if (a.k === 2 || b.k === 2) c = (a.k === 2 ? 1 : 0) - (b.k === 2 ? 1 : 0);   // blanks last, both ways
      else {
        if (a.k !== b.k) c = a.k - b.k;
        else if (a.k === 0) c = a.v < b.v ? -1 : a.v > b.v ? 1 : 0;
        else c = collator.compare(a.v, b.v);
        c *= sign;
      }
      return c || (x.o - y.o);
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (x) { frag.appendChild(x.r); });
    tbody.appendChild(frag);
  }

  document.querySelectorAll("table.data").forEach(function (table) {
    table.tHead.addEventListener("click", function (ev) {
      var th = ev.target.closest("th");
      if (th) sortBy(table, th);
    });
    table.tBodies[0].addEventListener("click", function (ev) {
      var tr = ev.target.closest("tr.link");
      if (tr) openSchedule(+tr.dataset.s);
    });
    table.tBodies[0].addEventListener("keydown", function (ev) {
      var tr = ev.target.closest("tr.link");
      if (tr && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); openSchedule(+tr.dataset.s); }
    });
  });

  function fromHash() {
    var m = /^#sched-(\d+)$/.exec(location.hash);
    if (m) openSchedule(+m[1]);
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
