// Cairn web UI: the little JavaScript it has. Pages work without it (links and
// forms); with it, the run page follows the run's events live, the step panel opens
// in place, and action buttons ask before acting.
"use strict";

(function () {
  // Buttons that ask first.
  document.addEventListener("click", function (e) {
    var b = e.target.closest("[data-confirm]");
    if (b && !window.confirm(b.getAttribute("data-confirm"))) e.preventDefault();
  });

  // The one-click login link of `cairn dev`: /ui/login#token=… (the fragment never
  // reaches the server or its logs). Fill the form, drop the fragment, submit.
  var form = document.getElementById("login-form");
  if (form && location.hash.indexOf("#token=") === 0) {
    document.getElementById("token").value = decodeURIComponent(location.hash.slice(7));
    history.replaceState(null, "", location.pathname + location.search);
    form.submit();
  }

  // A bulk operation's page follows it until it is done: the page is fetched again
  // each second and its operation part replaced.
  function followOperation() {
    var op = document.getElementById("operation");
    if (!op || op.getAttribute("data-status") !== "running") return;
    setTimeout(function () {
      fetch(location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          var next = new DOMParser().parseFromString(html, "text/html").getElementById("operation");
          if (next) op.replaceWith(document.adoptNode(next));
          followOperation();
        })
        .catch(function (e) { if (typeof e !== "number") followOperation(); });
    }, 1000);
  }
  followOperation();

  // Times: the server writes UTC; show them in the browser's time zone with how
  // long ago, keeping UTC on hover, and keep "ago" current.
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function rel(ms) {
    var s = Math.abs(ms) / 1000, t;
    if (s < 60) t = Math.round(s) + "s";
    else if (s < 3600) t = Math.floor(s / 60) + "m";
    else if (s < 172800) t = Math.floor(s / 3600) + "h";
    else t = Math.floor(s / 86400) + "d";
    return ms < 0 ? "in " + t : t + " ago";
  }
  function localTimes(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      var local = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
      el.textContent = local + " ";
      var span = document.createElement("span");
      span.className = "rel";
      span.textContent = "(" + rel(Date.now() - d.getTime()) + ")";
      el.appendChild(span);
      el.classList.add("local");
    });
  }
  localTimes();
  setInterval(function () { localTimes(); }, 30000);

  // Keys: / searches; g then r, a, e, w, s, l or u goes to runs, approvals,
  // events, workflows, schedules, limits or (admins) the audit log.
  var lastG = 0;
  document.addEventListener("keydown", function (e) {
    var t = e.target, typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable);
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") {
      var q = document.getElementById("search-q");
      if (q) { e.preventDefault(); q.focus(); }
      return;
    }
    if (e.key === "g") { lastG = Date.now(); return; }
    if (Date.now() - lastG < 1500) {
      var link = document.querySelector('#nav a[data-key="' + e.key + '"]');
      if (link) { e.preventDefault(); location.href = link.href; }
    }
  });

  // The runs list's "select all" box.
  var all = document.getElementById("pick-all");
  if (all) all.addEventListener("change", function () {
    document.querySelectorAll("input.pick").forEach(function (c) { c.checked = all.checked; });
  });
  document.querySelectorAll("select[data-autosubmit]").forEach(function (sel) {
    sel.addEventListener("change", function () { sel.form.submit(); });
  });

  // Parts of a page that refresh quietly (data-refresh: every so many ms): the
  // page is fetched again and the part replaced, unless the user is working in
  // it (a box ticked, a field focused) or the tab is hidden.
  document.querySelectorAll("[data-refresh]").forEach(function (part) {
    var every = parseInt(part.getAttribute("data-refresh"), 10) || 5000;
    function again() {
      setTimeout(function () {
        var cur = document.getElementById(part.id);
        if (document.hidden || !cur || cur.querySelector("input:checked") || cur.contains(document.activeElement) ||
            document.querySelector("input.pick:checked")) { again(); return; }
        fetch(location.href, { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
          .then(function (html) {
            var next = new DOMParser().parseFromString(html, "text/html").getElementById(part.id);
            var now = document.getElementById(part.id);
            if (next && now && !now.querySelector("input:checked")) {
              now.replaceWith(document.adoptNode(next));
              localTimes(next);
              document.body.setAttribute("data-refreshed", String(Date.now()));
            }
            again();
          })
          .catch(function () { again(); });
      }, every);
    }
    again();
  });

  var run = document.getElementById("run");
  if (!run) return;
  var id = run.getAttribute("data-run");
  var base = "/ui/runs/" + id;
  var panel = document.getElementById("panel");
  // data-terminal: the server's word that the run has ended (RunStatus.Terminal).
  function ended() { return run.getAttribute("data-terminal") === "true"; }

  // Show only the run actions its state allows.
  function showActions(status) {
    document.querySelectorAll("#run-actions [data-when]").forEach(function (b) {
      b.hidden = b.getAttribute("data-when").split(" ").indexOf(status) < 0;
    });
  }
  showActions(run.getAttribute("data-status"));

  // classList, not className: an SVG element's className is no string.
  function setStatus(el, status) {
    Array.prototype.slice.call(el.classList).forEach(function (c) {
      if (c.indexOf("st-") === 0) el.classList.remove(c);
    });
    el.classList.add("st-" + status);
    el.setAttribute("data-status", status);
  }

  function loadPanel(key, push) {
    fetch(base + "/steps/" + encodeURIComponent(key), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        panel.innerHTML = html;
        panel.setAttribute("data-step", key);
        followLog();
        document.querySelectorAll("#dag .node").forEach(function (n) {
          n.classList.toggle("selected", n.getAttribute("data-key") === key);
        });
        if (push) history.pushState({ step: key }, "", "?step=" + encodeURIComponent(key));
      })
      .catch(function () {});
  }

  // The live tail of a running attempt's log: ask for what follows the offset the
  // panel (or the last answer) ended at, each second, until the attempt is
  // complete or the panel changed. Only the last 64 KiB stay on the page.
  var logTimer = null;
  function followLog() {
    clearTimeout(logTimer);
    var pre = document.getElementById("log-live");
    if (!pre) return;
    logTimer = setTimeout(function () {
      if (!document.body.contains(pre)) return;
      var offset = pre.getAttribute("data-offset");
      fetch(pre.getAttribute("data-url") + "&offset=" + offset, { credentials: "same-origin" })
        .then(function (r) {
          if (!r.ok) return Promise.reject(r.status);
          return r.arrayBuffer().then(function (buf) {
            var at = parseInt(r.headers.get("Cairn-Log-Offset") || offset, 10);
            var next = at + buf.byteLength, t = new TextDecoder().decode(buf);
            if (t.length) {
              var stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
              var text = pre.textContent + t;
              if (text.length > 65536) text = text.slice(text.length - 65536);
              pre.textContent = text;
              if (stick) pre.scrollTop = pre.scrollHeight;
            }
            pre.setAttribute("data-offset", String(next));
            if (r.headers.get("Cairn-Log-Complete") !== "true") followLog();
          });
        })
        .catch(function () { followLog(); });
    }, 1000);
  }
  followLog();

  // A click on a node opens its panel in place (the graph may be redrawn).
  document.addEventListener("click", function (e) {
    var n = e.target.closest && e.target.closest("#dag .node");
    if (!n) return;
    e.preventDefault();
    loadPanel(n.getAttribute("data-key"), true);
  });

  // The parts of the run page the server draws (data-live: the header with the
  // run's error, the graph, earlier tries, the history), fetched again when a
  // step appears (compensations, on_failure) or the run's status or error changes.
  var partsPending = false;
  function reloadParts() {
    if (partsPending) return;
    partsPending = true;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        partsPending = false;
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (part) {
          var next = doc.getElementById(part.id);
          if (next) { part.replaceWith(document.adoptNode(next)); localTimes(next); }
        });
        var key = panel.getAttribute("data-step");
        document.querySelectorAll("#dag .node").forEach(function (n) {
          n.classList.toggle("selected", n.getAttribute("data-key") === key);
        });
      })
      .catch(function () { partsPending = false; });
  }
  window.addEventListener("popstate", function () {
    var key = new URLSearchParams(location.search).get("step");
    if (key) loadPanel(key, false);
  });

  // The timeline is drawn by the server: fetch it again when a step changed.
  var timelineWrap = document.getElementById("timeline-wrap"), lastTimeline = "";
  function loadTimeline() {
    if (!timelineWrap || timelineWrap.getAttribute("data-drawn") !== "true") return;
    fetch(base + "/timeline", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { timelineWrap.innerHTML = html; })
      .catch(function () {});
  }

  // A map step's node: its progress line and bar, made when the map starts.
  var svgNS = "http://www.w3.org/2000/svg";
  function drawMap(n, m) {
    var text = n.querySelector("text.map"), bar = n.querySelector("rect.bar");
    if (!text) {
      var label = n.querySelector("text.label"), x = label.getAttribute("x"), y = label.getAttribute("y");
      label.setAttribute("dy", "15");
      n.querySelector("text.att").setAttribute("dy", "15");
      text = document.createElementNS(svgNS, "text");
      text.setAttribute("class", "map");
      text.setAttribute("x", x); text.setAttribute("y", y);
      text.setAttribute("dx", "10"); text.setAttribute("dy", "27");
      bar = document.createElementNS(svgNS, "rect");
      bar.setAttribute("class", "bar");
      bar.setAttribute("x", x); bar.setAttribute("y", y);
      bar.setAttribute("transform", "translate(4 29)");
      bar.setAttribute("height", "3");
      n.appendChild(text);
      n.appendChild(bar);
    }
    text.textContent = m.text;
    bar.setAttribute("width", String(m.bar_w));
  }

  // After events, fetch the run's state once (coalesced) and recolour.
  var pending = false, lastStatus = run.getAttribute("data-status"), openStep = panel.getAttribute("data-step");
  var prevSteps = {};
  function refresh() {
    if (pending) return;
    pending = true;
    setTimeout(function () {
      fetch(base + "/state", { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (s) {
          pending = false;
          var changedOpen = false, shown = {}, newSteps = false;
          document.querySelectorAll("#dag .node").forEach(function (n) {
            var key = n.getAttribute("data-key"), st = s.steps[key];
            shown[key] = true;
            var state = s.states[key] || "";
            if (state !== (n.getAttribute("data-state") || "")) {
              Array.prototype.slice.call(n.classList).forEach(function (c) { if (c.indexOf("ns-") === 0) n.classList.remove(c); });
              if (state) n.classList.add("ns-" + state);
              n.setAttribute("data-state", state);
            }
            if (st && st !== n.getAttribute("data-status")) {
              setStatus(n, st);
              if (n.querySelector("title")) n.querySelector("title").textContent = key + ": " + st;
              if (key === panel.getAttribute("data-step")) changedOpen = true;
            }
            if (s.maps[key]) drawMap(n, s.maps[key]);
            var att = n.querySelector("text.att");
            if (att && s.attempts[key] > 1) att.textContent = "×" + s.attempts[key];
            if (key === panel.getAttribute("data-step") && prevSteps[key] !== undefined && prevSteps[key] !== s.attempts[key]) changedOpen = true;
            prevSteps[key] = s.attempts[key];
          });
          Object.keys(s.steps).forEach(function (k) { if (!shown[k]) newSteps = true; });
          var rs = document.getElementById("run-status");
          var errNow = document.getElementById("run-error");
          var errChanged = (s.error || "") !== (errNow ? errNow.getAttribute("data-line") || "" : "");
          if (newSteps || errChanged || s.status !== lastStatus) reloadParts();
          rs = document.getElementById("run-status");
          rs.textContent = s.status;
          setStatus(rs, s.status);
          run.setAttribute("data-status", s.status);
          run.setAttribute("data-terminal", s.terminal ? "true" : "false");
          var why = document.getElementById("run-why");
          if (why) why.textContent = s.why || "";
          document.getElementById("progress").textContent = s.count + ", " + s.steps_remaining + " left";
          showActions(s.status);
          var key = panel.getAttribute("data-step");
          if (key && (changedOpen || s.status !== lastStatus)) loadPanel(key, false);
          var sig = JSON.stringify(s.steps) + JSON.stringify(s.attempts) + s.status;
          if (sig !== lastTimeline) { lastTimeline = sig; loadTimeline(); }
          lastStatus = s.status;
        })
        .catch(function () { pending = false; });
    }, 150);
  }

  // The run's events, relayed by the UI (the session stays in its HttpOnly cookie).
  var es = null;
  function follow() {
    es = new EventSource(base + "/events");
    es.onmessage = function () { refresh(); };
    es.onerror = function () {
      // The stream ends with the run's final event: stop there; otherwise the
      // browser reconnects with Last-Event-ID by itself.
      refresh();
      if (ended() && es.readyState !== EventSource.OPEN) {
        es.close();
        setTimeout(function () { if (!ended()) follow(); }, 3000);
      }
    };
  }
  follow();
  if (openStep) document.querySelectorAll("#dag .node").forEach(function (n) {
    n.classList.toggle("selected", n.getAttribute("data-key") === openStep);
  });
})();
