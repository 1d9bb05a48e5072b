// Conveyor dashboard live updates: short polling, no framework, no build step.
// Every page's <main id="live"> is re-fetched from the same URL with "X-Dashboard-Live: 1";
// the server answers with that region's HTML only (rendered and escaped server-side), which
// replaces the old one when it differs. The poll pauses while the tab is hidden, the user is typing
// in it or has ticked tasks for a bulk action; an answer that arrives after the user started typing
// or ticking is dropped, so a slow poll never wipes what they entered.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  var offline = document.getElementById("offline");
  if (!live || !status) { return; }
  var every = parseInt(status.getAttribute("data-poll-ms"), 10) || 1500;
  var busy = false;
  var shown = null;  // the region's HTML as last applied: an unchanged answer leaves the DOM alone

  function typing() {
    var el = document.activeElement;
    return el && live.contains(el) && (el.tagName === "INPUT" || el.tagName === "SELECT");
  }

  function selecting() {
    // Ticked checkboxes (bulk selection) would be lost if the region were replaced.
    return live.querySelector("input[type=checkbox]:checked") !== null;
  }

  function tick() {
    if (busy || document.hidden || typing()) { return; }
    if (selecting()) {
      status.textContent = "paused · tasks selected";
      status.className = "live-status paused";
      return;
    }
    busy = true;
    fetch(window.location.href, {
      headers: { "X-Dashboard-Live": "1" }, credentials: "same-origin", cache: "no-store"
    }).then(function (resp) {
      if (resp.status === 401) { window.location.reload(); return null; }
      return resp.text();
    }).then(function (html) {
      if (html === null) { return; }
      offline.hidden = true;
      if (typing() || selecting()) { return; }
      if (html !== shown) {
        // Replacing an unchanged region would only detach the element under the user's pointer.
        live.innerHTML = html;
        shown = html;
      }
      status.textContent = "live · " + new Date().toLocaleTimeString();
      status.className = "live-status ok";
    }).catch(function () {
      offline.hidden = false;
      status.textContent = "offline";
      status.className = "live-status down";
    }).finally(function () { busy = false; });
  }

  status.textContent = "live";
  window.setInterval(tick, every);
})();
