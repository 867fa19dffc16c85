// The waiting room: joins the line, shows the place live (the position
// stream, polling when it is down), and hands over at the user's turn.
"use strict";

(function () {
  var hf = holdfast;
  var base = "/api/v1/events/" + hf.eventId;
  var event = null;      // the public event, once read
  var st = null;         // the last status shown
  var wait = readWait(); // what the page keeps of this wait: see keepWait
  var stream = null;     // the open EventSource, if any
  var next = null;       // the timer of the next poll or retry
  var retryAt = 0;       // when a refused call is retried (ms), for the countdown
  var opensAt = null;    // the queue's opening time while it is not open
  var done = false;      // sold out, handed over or no sign-in: nothing more to do

  function later(f, ms) {
    clearTimeout(next);
    next = setTimeout(f, ms);
  }

  // refused handles an answer that is neither a success nor a business
  // outcome: rate limited, service unavailable, network lost. It retries.
  function refused(r, again) {
    if (!r || r.status === 502 || r.status === 504) { // no answer, or none from behind a proxy
      hf.connection(false);
      later(again, 2000);
      return true;
    }
    hf.connection(true);
    if (r.status === 429 || r.status === 503) {
      var wait = Math.max(1, r.retryAfter || 2);
      retryAt = Date.now() + wait * 1000;
      hf.say("state", r.status === 429 ? "Many people are trying at once. Retrying in " + wait + " s."
        : "The service is busy. Retrying in " + wait + " s.");
      later(function () { retryAt = 0; again(); }, wait * 1000);
      return true;
    }
    if (r.status === 401) {
      stop("Your sign-in has expired. Sign in again on the event's site and come back.");
      return true;
    }
    return false;
  }

  function stop(sentence) {
    done = true;
    closeStream();
    clearTimeout(next);
    hf.say("state", sentence);
    hf.show("figures", false);
    hf.show("progress-box", false);
    hf.show("deadline", false);
    hf.show("action", false);
  }

  function loadEvent() {
    return hf.call("GET", "/api/v1/public/events/" + hf.eventId).then(function (r) {
      if (refused(r, start)) { return false; }
      if (r.status === 404 || r.status === 400) {
        stop("There is no such event.");
        return false;
      }
      event = r.body;
      hf.showEvent(event, "waiting room");
      if (event.remainingSeats === 0 && (!st || st.status !== "entered")) {
        stop("Sold out: every seat is taken.");
        return false;
      }
      return true;
    }, function () { refused(null, start); return false; });
  }

  function start() {
    if (!hf.get("token")) {
      stop("This page needs your sign-in link. Open the waiting room from the event's site.");
      return;
    }
    loadEvent().then(function (ok) { if (ok) { poll(); } });
  }

  function poll() {
    if (done) { return; }
    hf.call("GET", base + "/queue/status").then(function (r) {
      if (refused(r, poll)) { return; }
      if (r.status !== 200) {
        hf.say("state", hf.message(r) || "Something went wrong. Retrying…");
        later(poll, 3000);
        return;
      }
      render(r.body);
      if (!stream && !done) { later(poll, 3000); } // polling while the stream is down
    }, function () { refused(null, poll); });
  }

  function join() {
    forgetWait();
    hf.show("action", false);
    hf.say("state", "Joining the line…");
    hf.call("POST", base + "/queue").then(function (r) {
      if (refused(r, join)) { return; }
      if (r.status === 202) {
        return hf.waitOutcome(r.body.statusUrl).then(function (o) {
          if (refused(o, join)) { return; }
          var outcome = o.body || {};
          if (outcome.status === "rejected" && outcome.error && outcome.error.code === "SOLD_OUT") {
            stop("Sold out: every seat is taken.");
            return;
          }
          poll();
          openStream();
        });
      }
      var c = hf.code(r);
      if (c === "QUEUE_NOT_OPEN") {
        var at = r.body.error.meta && r.body.error.meta.queueOpensAt;
        opensAt = at ? new Date(at) : null;
        hf.say("state", opensAt ? "The line opens at " + opensAt.toLocaleTimeString() + "." : "The line is not open yet.");
        later(join, opensAt ? Math.max(1000, opensAt - Date.now()) : 5000);
        return;
      }
      if (c === "SOLD_OUT") {
        stop("Sold out: every seat is taken.");
        return;
      }
      hf.say("state", hf.message(r) || "Could not join the line. Retrying…");
      later(join, 3000);
    }, function () { refused(null, join); });
  }

  function claim() {
    hf.show("action", false);
    hf.say("state", "Taking your turn…");
    hf.call("POST", base + "/queue/token").then(function (r) {
      if (refused(r, claim)) { return; }
      if (r.status === 200) {
        hf.put("entryToken", r.body.entryToken);
        handOver(r.body.entryToken);
        return;
      }
      poll(); // not our turn after all (expired, or the cap changed): show why
    }, function () { refused(null, claim); });
  }

  function handOver(entryToken) {
    done = true;
    closeStream();
    hf.say("state", "You're in. Taking you on…");
    if (event && event.returnUrl) {
      location.assign(event.returnUrl + "#entryToken=" + encodeURIComponent(entryToken) + "&eventId=" + hf.eventId);
    } else {
      location.assign("/events/" + hf.eventId + "/seats-page");
    }
  }

  function action(label, f) {
    var b = hf.$("action");
    b.textContent = label;
    b.onclick = f;
    hf.show("action", true);
  }

  function render(s) {
    if (done) { return; }
    st = s;
    hf.connection(true);
    var waiting = s.status === "waiting";
    hf.show("figures", waiting);
    hf.show("progress-box", waiting);
    hf.show("deadline", s.status === "ready" || s.status === "prequeue");
    hf.show("action", false);
    switch (s.status) {
      case "not_queued":
        join();
        return;
      case "expired":
        closeStream();
        hf.say("state", "You left the line: the page was closed or silent too long, or your turn was not taken in time.");
        action("Join the line again", join);
        return;
      case "prequeue":
        hf.say("state", "You are in the pre-queue. When the sale starts, everyone here gets a place in line drawn at random.");
        break;
      case "waiting":
        showWaiting(s);
        break;
      case "ready":
        hf.say("state", "It's your turn!");
        action("Enter now", claim);
        hf.$("action").focus();
        break;
      case "entered":
      case "admitted":
        if (s.entryToken) { hf.put("entryToken", s.entryToken); }
        hf.say("state", "You're in.");
        action("Continue", function () { handOver(s.entryToken || hf.get("entryToken")); });
        break;
      default:
        hf.say("state", "Waiting…");
    }
    tick();
    if (!stream && (s.status === "prequeue" || s.status === "waiting" || s.status === "ready")) { openStream(); }
  }

  // keepWait stores what the page keeps of this wait, for the tab's life
  // (a reload included): firstAhead, the people ahead when it was first
  // seen, from which the progress bar counts; and eta, the last estimate
  // the server gave, which the page goes on showing, marked as such, when
  // the server no longer knows one (admissions paused, or none lately).
  function keepWait() { hf.put("wait", JSON.stringify(wait)); }
  function forgetWait() { wait = {}; keepWait(); }
  function readWait() {
    try { return JSON.parse(hf.get("wait")) || {}; } catch (e) { return {}; }
  }

  function showWaiting(s) {
    var ahead = s.aheadCount || 0;
    var known = typeof s.etaSeconds === "number";
    if (typeof wait.firstAhead !== "number" || ahead > wait.firstAhead) { wait.firstAhead = ahead; }
    if (known) { wait.eta = s.etaSeconds; }
    keepWait();
    hf.say("state", s.admissionPaused ? "Admissions are paused. You keep your place: number " + (ahead + 1) + " in line."
      : s.soldOut ? "Sold out for now. You keep your place, number " + (ahead + 1) +
        " in line: seats that others release or let expire go to the line in order."
        : "You are number " + (ahead + 1) + " in line.");
    hf.say("position", String(ahead + 1));
    hf.say("ahead", String(ahead));
    hf.say("eta", typeof wait.eta === "number" ? hf.eta(wait.eta) : "not yet known");
    hf.show("eta-note", !known && typeof wait.eta === "number");
    // The bar runs from where the wait began to the user's turn: one step
    // for each person then ahead, and one for the turn itself.
    var moved = wait.firstAhead - ahead, bar = hf.$("progress");
    bar.max = wait.firstAhead + 1;
    bar.value = moved;
    hf.say("progress-note", ahead === 0 ? "You are at the front of the line: your turn is next."
      : moved > 0 ? "You have moved up " + moved + (moved === 1 ? " place" : " places") + " since you joined."
        : "The bar fills as you move up to the front.");
  }

  // tick updates the countdowns once a second.
  function tick() {
    if (retryAt > Date.now()) {
      var secs = Math.ceil((retryAt - Date.now()) / 1000);
      hf.say("state", hf.$("state").textContent.replace(/\d+ s\.$/, secs + " s."));
    }
    if (!st || done) { return; }
    if (st.status === "ready" && st.claimBy) {
      var left = (new Date(st.claimBy) - Date.now()) / 1000;
      hf.say("deadline", left > 0 ? "Take your turn within " + hf.duration(left) + "." : "Your turn is passing…");
    } else if (st.status === "prequeue" && st.salesStartAt) {
      var until = (new Date(st.salesStartAt) - Date.now()) / 1000;
      hf.say("deadline", until > 0 ? "The sale starts in " + hf.duration(until) + "." : "The sale is starting: drawing the order…");
    }
  }

  // openStream opens the position stream with a one-use ticket (an
  // EventSource cannot send the bearer token). When it fails, the page
  // polls and opens a new one.
  function openStream() {
    if (stream || done || typeof window.EventSource !== "function") { return; } // without it, the page polls
    stream = "opening";
    hf.call("POST", base + "/queue/ticket").then(function (r) {
      if (r.status !== 200 || done) { stream = null; return; }
      var es;
      try {
        es = new EventSource(r.body.url);
      } catch (e) {
        stream = null;
        later(poll, 2000);
        return;
      }
      stream = es;
      es.addEventListener("status", function (e) {
        clearTimeout(next); // the stream carries the news: no poll needed
        render(JSON.parse(e.data));
      });
      es.onerror = function () {
        es.close();
        if (stream === es) { stream = null; }
        if (!done) { hf.connection(false); later(poll, 2000); }
      };
    }, function () { stream = null; refused(null, poll); });
  }

  function closeStream() {
    if (stream && stream !== "opening") { stream.close(); }
    stream = null;
  }

  setInterval(tick, 1000);
  setInterval(function () { if (!done && st && st.status === "waiting") { loadEvent(); } }, 15000);
  start();
})();
