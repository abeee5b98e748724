// Refresh the page in place every data-refresh seconds while it is visible: fetch the
// same URL, swap the <main> element. No framework; the server renders everything.
(function () {
  "use strict";
  var secs = parseFloat(document.body.getAttribute("data-refresh") || "0");
  if (!(secs > 0)) { return; }
  function tick() {
    if (document.hidden) { return; }
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        var old = document.querySelector("main");
        if (fresh && old) { old.replaceWith(fresh); }
      })
      .catch(function () { /* the agent restarting: try again next tick */ });
  }
  window.setInterval(tick, secs * 1000);
}());
