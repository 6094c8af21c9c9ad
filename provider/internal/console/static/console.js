// The console's only script: it follows the page's live stream (server-sent events) and
// puts each re-rendered fragment in place. Without it every page still works; it just
// does not update by itself.
(function () {
  "use strict";

  var live = document.getElementById("live");
  if (!live || !live.dataset.live || !window.EventSource) {
    return;
  }

  var stream = new EventSource(live.dataset.live);

  stream.addEventListener("update", function (e) {
    live.innerHTML = e.data;
    document.body.dataset.updated = String(Date.now());
  });
  stream.onopen = function () {
    document.body.classList.remove("offline");
  };
  stream.onerror = function () {
    // EventSource reconnects by itself; say the page may be stale meanwhile.
    document.body.classList.add("offline");
  };
})();
