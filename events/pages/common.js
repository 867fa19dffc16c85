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

  // call sends one API request, with body as JSON when given, and resolves
  // to {status, body, retryAfter}; it rejects only when the network failed
  // (no answer at all).
  function call(method, path, headers, body) {
    var h = { "Accept": "application/json" };
    var token = get("token");
    if (token) { h["Authorization"] = "Bearer " + token; }
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    var init = { method: method, headers: h, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      h["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (resp) {
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

  // A number and its unit are joined by a no-break space, so that a
  // phone's narrow screen never puts "2" on one line and "minutes" on the
  // next.
  var nbsp = "\u00a0";
  function count(n, unit) { return n + nbsp + unit + (n === 1 ? "" : "s"); }

  // duration writes a countdown's seconds as "1 h 5 min", "4 min 3 s",
  // "2 min" or "12 s": exact, and without a zero part.
  function duration(s) {
    s = Math.max(0, Math.round(s));
    var h = Math.floor(s / 3600), min = Math.floor((s % 3600) / 60), sec = s % 60;
    var parts = [];
    if (h > 0) { parts.push(h + nbsp + "h"); }
    if (min > 0) { parts.push(min + nbsp + "min"); }
    if (h === 0 && (sec > 0 || min === 0)) { parts.push(sec + nbsp + "s"); }
    return parts.join(" ");
  }

  // eta writes an estimated wait as people say one: "less than a minute",
  // "about 2 minutes", "about 1 hour 10 minutes". An estimate is rough, so
  // from an hour on it is rounded to 5 minutes; it may break onto a second
  // line only between its hours and its minutes.
  function eta(s) {
    if (!(s >= 60)) { return "less than a minute"; }
    var min = Math.round(s / 60);
    if (min < 60) { return "about" + nbsp + count(min, "minute"); }
    min = Math.round(min / 5) * 5;
    var h = Math.floor(min / 60), rest = min % 60;
    return "about" + nbsp + count(h, "hour") + (rest ? " " + count(rest, "minute") : "");
  }

  // when writes an RFC 3339 time as a date and time in the reader's own
  // language and time zone, which it names: "Sat, December 12, 2026 at
  // 7:30 PM UTC" (short enough for one line on a phone).
  function when(iso) {
    return new Date(iso).toLocaleString(undefined, { weekday: "short", day: "numeric", month: "long", year: "numeric",
      hour: "numeric", minute: "2-digit", timeZoneName: "short" });
  }

  // showEvent puts an event's name and details on the page: its start
  // (#event-when, a <time>), venue (#event-venue) and image (#event-image),
  // each hidden when the event has none. The image is the operator's
  // choice, on another host: it is asked for without a referrer, described
  // by the event's name, and stays hidden if it does not load.
  function showEvent(ev, what) {
    say("event-name", ev.name);
    document.title = ev.name + " – " + what;
    var t = $("event-when");
    if (ev.startsAt && t.dateTime !== ev.startsAt) {
      t.dateTime = ev.startsAt;
      say("event-when", when(ev.startsAt));
    }
    show("event-date", !!ev.startsAt);
    say("event-venue", ev.venue || "");
    show("event-venue", !!ev.venue);
    var img = $("event-image");
    img.alt = ev.name;
    if ((ev.imageUrl || "") === (img.getAttribute("src") || "")) { return; }
    img.hidden = true;
    if (!ev.imageUrl) {
      img.removeAttribute("src");
      return;
    }
    img.referrerPolicy = "no-referrer";
    img.onload = function () { img.hidden = false; };
    img.onerror = function () { img.hidden = true; };
    img.src = ev.imageUrl;
  }

  // connection shows, in the page's connection line, whether the last call
  // reached the server.
  function connection(ok) {
    say("connection", ok ? "" : "Connection lost. Reconnecting by itself…");
  }

  takeFragment();
  return { eventId: eventId, get: get, put: put, call: call, code: code, message: message, waitOutcome: waitOutcome,
    $: $, say: say, show: show, duration: duration, eta: eta, when: when, showEvent: showEvent, connection: connection };
})();
