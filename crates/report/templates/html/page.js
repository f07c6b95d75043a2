// Tooltips for chart points (hover or keyboard focus) and sortable tables. No network, no
// library: the page works from file:// and any static host.
(function () {
  "use strict";
  var tip = document.getElementById("tip");
  function show(el) {
    var t = el.querySelector("title");
    var text = t ? t.textContent : "";
    if (!tip || !text) return;
    tip.textContent = text;
    tip.hidden = false;
    var r = el.getBoundingClientRect();
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var x = r.right + 10 + window.scrollX, y = r.top + window.scrollY - h - 6;
    if (x + w > window.scrollX + document.documentElement.clientWidth - 4) x = Math.max(window.scrollX + 4, r.left + window.scrollX - w - 10);
    if (y < window.scrollY + 4) y = r.bottom + window.scrollY + 6;
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hide() { if (tip) tip.hidden = true; }
  // A chart's point, a link around one, a box or a change point: each carries a <title>.
  function target(e) { return e.target && e.target.closest ? e.target.closest(".pt-link, .pt, .box, .shift-mark") : null; }
  document.addEventListener("mouseover", function (e) { var t = target(e); if (t) show(t); });
  document.addEventListener("mouseout", function (e) { if (target(e)) hide(); });
  document.addEventListener("focusin", function (e) { var t = target(e); if (t) show(t); else hide(); });
  document.addEventListener("focusout", hide);
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") hide(); });

  function key(cell) {
    var v = cell.getAttribute("data-sort");
    if (v === null) v = cell.textContent.trim();
    var n = parseFloat(v);
    return v !== "" && isFinite(n) && /^[-+0-9.eE]+$/.test(v) ? { n: n } : { s: v.toLowerCase() };
  }
  function compare(a, b) {
    if (a.n !== undefined && b.n !== undefined) return a.n - b.n;
    if (a.n !== undefined) return -1;
    if (b.n !== undefined) return 1;
    return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    if (!body) return;
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) heads[i].removeAttribute("aria-sort");
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var c1 = r1.cells[col], c2 = r2.cells[col];
      if (!c1 || !c2) return 0;
      return dir * compare(key(c1), key(c2));
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    if (!table.tHead) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      var b = document.createElement("button");
      b.type = "button";
      while (th.firstChild) b.appendChild(th.firstChild);
      b.setAttribute("aria-label", "sort by " + b.textContent);
      th.appendChild(b);
      b.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
  document.documentElement.setAttribute("data-ready", "1");
})();
