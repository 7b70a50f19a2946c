// Live updates by polling: every data-refresh seconds the page is fetched again and its <main>
// replaced (the same HTML the server renders; no front-end build). Paused while the tab is hidden
// or a filter field has focus.
(function () {
  var seconds = parseFloat(document.body.dataset.refresh || "5");
  var live = document.getElementById("live");
  function busy() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT");
  }
  function tick() {
    if (document.hidden || busy()) return;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        var open = Array.prototype.map.call(document.querySelectorAll("details[open] summary"), function (s) { return s.textContent; });
        if (fresh) document.getElementById("main").innerHTML = fresh.innerHTML;
        document.querySelectorAll("details summary").forEach(function (s) { if (open.indexOf(s.textContent) >= 0) s.parentNode.open = true; });
        live.className = ""; live.textContent = "live · " + new Date().toISOString().slice(11, 19) + " UTC";
        document.body.dataset.updated = String(Date.now());
      })
      .catch(function () { live.className = "stale"; live.textContent = "not updating"; });
  }
  setInterval(tick, seconds * 1000);
})();
