// Live updates: the page listens to /events (server-sent events off the activity stream) and, when
// something happened, fetches itself again and replaces its <main> (the same HTML the server renders; no
// front-end build). Without the stream (refused, or gone) it polls every data-refresh seconds. Paused
// while the tab is hidden or a form field has focus or holds text a person typed.
(function () {
  var seconds = parseFloat(document.body.dataset.refresh || "5");
  var live = document.getElementById("live");
  var pending = null, streaming = false, poller = null;
  function busy() {
    var el = document.activeElement;
    if (el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA")) return true;
    return Array.prototype.some.call(document.querySelectorAll("form.action input:not([type=hidden]), form.action textarea"),
      function (f) { return f.value !== ""; });
  }
  function stamp(how) {
    live.className = ""; live.textContent = how + " · " + new Date().toISOString().slice(11, 19) + " UTC";
  }
  function refresh() {
    if (document.hidden || busy()) return;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        var open = Array.prototype.map.call(document.querySelectorAll("details[open] summary"), function (s) { return s.textContent; });
        if (fresh) document.getElementById("main").innerHTML = fresh.innerHTML;
        document.querySelectorAll("details summary").forEach(function (s) { if (open.indexOf(s.textContent) >= 0) s.parentNode.open = true; });
        stamp(streaming ? "live" : "polling");
        document.body.dataset.updated = String(Date.now());
      })
      .catch(function () { live.className = "stale"; live.textContent = "not updating"; });
  }
  // many entries at once (a run's end is several) make one fetch
  function soon() { if (pending === null) pending = setTimeout(function () { pending = null; refresh(); }, 250); }
  function poll() { if (poller === null) poller = setInterval(refresh, seconds * 1000); }
  if (window.EventSource) {
    var events = new EventSource("/events");
    events.addEventListener("open", function () {
      streaming = true; document.body.dataset.live = "events"; stamp("live");
      if (poller !== null) { clearInterval(poller); poller = null; }
    });
    events.addEventListener("activity", soon);
    events.addEventListener("error", function () { streaming = false; document.body.dataset.live = "polling"; poll(); });
  } else {
    poll();
  }
})();
