// holdfast pages: what the waiting room and the seat page share. Plain
// JavaScript, no framework, nothing from other hosts.
"use strict";

var holdfast = (function () {
  var m = /^\/events\/(\d+)\//.exec(location.pathname);
  var eventId = m ? m[1] : "";

  // The bearer token arrives in the URL fragment (#token=…), which browsers
  // never send to servers, and is kept in sessionStorage (this tab only);
  // the fragment is then removed from the address bar and history.
  function takeFragment() {
    var params = new URLSearchParams(location.hash.slice(1));
    var found = false;
    ["token", "entryToken"].forEach(function (name) {
      var v = params.get(name);
      if (v) {
        sessionStorage.setItem(key(name), v);
        found = true;
      }
    });
    if (found) {
      history.replaceState(null, "", location.pathname + location.search);
    }
  }
  function key(name) {
    return name === "token" ? "holdfast.token" : "holdfast." + name + "." + eventId;
  }
  function get(name) { return sessionStorage.getItem(key(name)) || ""; }
  function put(name, value) { sessionStorage.setItem(key(name), value); }

  // call sends one API request and resolves to {status, body, retryAfter};
  // it rejects only when the network failed (no answer at all).
  function call(method, path, headers) {
    var h = { "Accept": "application/json" };
    var token = get("token");
    if (token) { h["Authorization"] = "Bearer " + token; }
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    return fetch(path, { method: method, headers: h, cache: "no-store", credentials: "omit" }).then(function (resp) {
      return resp.text().then(function (text) {
        var body = null;
        try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
        return { status: resp.status, body: body, retryAfter: parseInt(resp.headers.get("Retry-After") || "0", 10) || 0 };
      });
    });
  }

  function code(r) { return r.body && r.body.error ? r.body.error.code : ""; }
  function message(r) { return r.body && r.body.error ? r.body.error.message : ""; }

  // waitOutcome long-polls an accepted write until it is terminal.
  function waitOutcome(statusUrl) {
    return call("GET", statusUrl + "?wait=10s").then(function (r) {
      if (r.status === 200 && r.body && (r.body.status === "queued" || r.body.status === "processing")) {
        return waitOutcome(statusUrl);
      }
      return r;
    });
  }

  function $(id) { return document.getElementById(id); }
  function say(id, text) { var el = $(id); if (el.textContent !== text) { el.textContent = text; } }
  function show(id, on) { $(id).hidden = !on; }

  // duration writes seconds as "1 h 5 min", "4 min 3 s" or "12 s".
  function duration(s) {
    s = Math.max(0, Math.round(s));
    var h = Math.floor(s / 3600), min = Math.floor((s % 3600) / 60), sec = s % 60;
    if (h > 0) { return h + " h " + min + " min"; }
    if (min > 0) { return min + " min " + sec + " s"; }
    return sec + " s";
  }

  // connection shows, in the page's connection line, whether the last call
  // reached the server.
  function connection(ok) {
    say("connection", ok ? "" : "Connection lost. Reconnecting by itself…");
  }

  takeFragment();
  return { eventId: eventId, get: get, put: put, call: call, code: code, message: message, waitOutcome: waitOutcome,
    $: $, say: say, show: show, duration: duration, connection: connection };
})();
