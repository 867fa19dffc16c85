// The seat page: lists the free seats, books the chosen one with the
// waiting room's entry token, and shows the outcome.
"use strict";

(function () {
  var hf = holdfast;
  var base = "/api/v1/events/" + hf.eventId;
  var event = null; // the public event, once read
  hf.$("back-link").href = "/events/" + hf.eventId + "/waiting-room";

  function load(sentence) {
    hf.call("GET", "/api/v1/public/events/" + hf.eventId).then(function (r) {
      if (r.status === 200) {
        event = r.body;
        hf.showEvent(event, "choose a seat");
      }
      return hf.call("GET", base + "/seats?status=available");
    }).then(function (r) {
      hf.connection(true);
      if (r.status === 401) {
        hf.say("state", "Your sign-in has expired. Sign in again on the event's site.");
        return;
      }
      if (r.status !== 200) {
        hf.say("state", (hf.message(r) || "Could not load the seats.") + " Retrying…");
        setTimeout(function () { load(sentence); }, Math.max(1, r.retryAfter || 3) * 1000);
        return;
      }
      list(r.body.items, sentence);
    }, function () {
      hf.connection(false);
      setTimeout(function () { load(sentence); }, 2000);
    });
  }

  function list(seats, sentence) {
    var ul = hf.$("seats");
    ul.textContent = "";
    seats.forEach(function (s) {
      var li = document.createElement("li");
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = "Seat " + s.label;
      b.setAttribute("data-seat", String(s.seatId));
      b.onclick = function () { book(s); };
      li.appendChild(b);
      ul.appendChild(li);
    });
    hf.show("seats-box", seats.length > 0);
    if (seats.length === 0) {
      hf.say("state", "Sold out: every seat is taken.");
      return;
    }
    hf.say("state", (sentence ? sentence + " " : "") + seats.length + (seats.length === 1 ? " seat is" : " seats are") + " free. Pick one.");
  }

  function setBusy(on) {
    Array.prototype.forEach.call(hf.$("seats").querySelectorAll("button"), function (b) { b.disabled = on; });
  }

  function book(seat) {
    setBusy(true);
    hf.say("state", "Booking seat " + seat.label + "…");
    var headers = {};
    var entry = hf.get("entryToken");
    if (entry) { headers["X-Entry-Token"] = entry; }
    hf.call("POST", base + "/seats/" + seat.seatId + "/reservation", headers).then(function (r) {
      hf.connection(true);
      if (r.status === 202) {
        return hf.waitOutcome(r.body.statusUrl).then(function (o) { outcome(seat, o); });
      }
      refused(seat, r);
    }, function () {
      hf.connection(false);
      setBusy(false);
      hf.say("state", "Could not reach the server; seat " + seat.label + " is not booked. Try again.");
    });
  }

  function outcome(seat, o) {
    var v = o.body || {};
    if (o.status === 200 && v.status === "succeeded") {
      booked(seat, (v.result || {}).bookingReference);
      return;
    }
    if (v.error && v.error.code === "SEAT_TAKEN") {
      load("Someone was faster: seat " + seat.label + " is taken. Pick another.");
      return;
    }
    if (v.error && v.error.code === "SOLD_OUT") {
      hf.show("seats-box", false);
      hf.say("state", "Sold out: every seat is taken.");
      return;
    }
    setBusy(false);
    hf.say("state", (v.error ? v.error.message : "The booking did not go through.") + " Try again.");
  }

  // booked shows the booking: the seat, the reference to quote, and what
  // happens next. A booking made before references existed has none.
  function booked(seat, ref) {
    hf.show("seats-box", false);
    var state = hf.$("state");
    state.textContent = "Booked: seat " + seat.label + " is yours.";
    if (ref) { // the reference on one line: a break at its hyphen would misquote it
      state.appendChild(document.createTextNode(" Your booking reference is "));
      var r = document.createElement("span");
      r.className = "nowrap";
      r.textContent = ref;
      state.appendChild(r);
      state.appendChild(document.createTextNode("."));
    }
    hf.say("booked-seat", seat.label);
    hf.say("booking-reference", ref || "");
    hf.show("reference-box", !!ref);
    var next = "Nothing more is needed here: the seat is yours, and you may close this page.";
    if (ref) { next += " Keep your booking reference and quote it whenever you contact the organiser about this booking."; }
    if (event && (event.startsAt || event.venue)) {
      next += " See you" + (event.venue ? " at " + event.venue : "") + (event.startsAt ? " on " + hf.when(event.startsAt) : "") + ".";
    }
    hf.say("next-steps", next);
    hf.show("booked", true);
  }

  function refused(seat, r) {
    setBusy(false);
    var c = hf.code(r);
    if (c === "ENTRY_TOKEN_REQUIRED") {
      hf.show("seats-box", false);
      hf.show("back", true);
      hf.say("state", "Your turn has ended or this page was opened without it. Go back to the waiting room.");
      return;
    }
    if (r.status === 429 || r.status === 503) {
      hf.say("state", "Many people are booking at once. Try seat " + seat.label + " again in " + Math.max(1, r.retryAfter) + " s.");
      return;
    }
    hf.say("state", (hf.message(r) || "The booking did not go through.") + " Try again.");
  }

  if (!hf.get("token")) {
    hf.say("state", "This page needs your sign-in link. Open the waiting room from the event's site.");
    return;
  }
  load("");
})();
