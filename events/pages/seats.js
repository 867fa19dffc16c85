// The seat page: the event's seats on its map; seats held for the buyer —
// one picked on the map, or several side by side, best available — with a
// countdown while the hold lasts; then confirmed with the payment's
// reference, or released; and the outcome.
"use strict";

(function () {
  var hf = holdfast;
  var base = "/api/v1/events/" + hf.eventId;
  var event = null; // the public event, once read
  var byId = {};    // seat id → seat, from the last list
  var hold = null;  // the caller's hold while it is held
  var ticking = 0;  // the countdown's interval
  hf.$("back-link").href = "/events/" + hf.eventId + "/waiting-room";

  // load reads the event, the caller's holds and the seats, and shows them
  // with sentence in front of what the page says.
  function load(sentence) {
    hf.call("GET", "/api/v1/public/events/" + hf.eventId).then(function (r) {
      if (r.status === 200) {
        event = r.body;
        hf.showEvent(event, "choose your seats");
      }
      return hf.call("GET", base + "/holds");
    }).then(function (r) {
      if (r.status === 200) {
        hold = null;
        // The server judges a hold's expiry by its own clock: a phone's
        // clock may run ahead or behind.
        r.body.items.forEach(function (h) {
          if (!hold && h.status === "held") { hold = h; }
        });
      }
      return hf.call("GET", base + "/seats");
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
      show(r.body.items, r.body.sections, sentence);
    }, function () {
      hf.connection(false);
      setTimeout(function () { load(sentence); }, 2000);
    });
  }

  function label(s) { return "seat " + s.label; }
  function labels(ids) {
    return ids.map(function (id) { return byId[id] ? byId[id].label : String(id); }).join(", ");
  }

  function show(seats, sections, sentence) {
    byId = {};
    seats.forEach(function (s) { byId[s.seatId] = s; });
    map(seats, sections);
    setBusy(false);
    var free = seats.filter(function (s) { return s.status === "available"; }).length;
    hf.show("seats-box", seats.length > 0);
    if (hold) {
      held(sentence);
      return;
    }
    clearInterval(ticking);
    hf.show("hold", false);
    together(sections, free);
    if (free === 0) {
      hf.say("state", (sentence ? sentence + " " : "") + "Sold out: every seat is taken.");
      return;
    }
    hf.say("state", (sentence ? sentence + " " : "") + free + (free === 1 ? " seat is" : " seats are") + " free. Pick one.");
  }

  // map draws the seats, a section and row at a time when the event has
  // more than one row; a free seat is a button that holds it.
  function map(seats, sections) {
    var box = hf.$("seats");
    box.textContent = "";
    var rows = {};
    seats.forEach(function (s) { rows[s.section + "\u0000" + s.row] = true; });
    var plain = Object.keys(rows).length === 1;
    var tiers = {};
    sections.forEach(function (x) { tiers[x.name] = x.priceTier; });
    var ul = null, at = "";
    seats.forEach(function (s) {
      if (s.section + "\u0000" + s.row !== at || !ul) {
        at = s.section + "\u0000" + s.row;
        if (!plain) {
          var h = document.createElement("h3");
          h.className = "row-label";
          h.textContent = s.section + (tiers[s.section] ? " (price " + tiers[s.section] + ")" : "") + ", row " + s.row;
          box.appendChild(h);
        }
        ul = document.createElement("ul");
        ul.className = "seats";
        box.appendChild(ul);
      }
      var li = document.createElement("li");
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = plain ? "Seat " + s.label : String(s.position);
      b.setAttribute("data-seat", String(s.seatId));
      var mine = hold && hold.seatIds.indexOf(s.seatId) >= 0;
      b.disabled = s.status !== "available" || !!hold;
      b.setAttribute("data-free", b.disabled ? "" : "1");
      if (mine) { b.className = "mine"; }
      b.setAttribute("aria-label", "Seat " + s.label + (mine ? ", held for you" : s.status === "available" ? "" : ", taken"));
      b.onclick = function () { holdSeats({ seatIds: [s.seatId] }, label(s)); };
      li.appendChild(b);
      ul.appendChild(li);
    });
  }

  // together offers seats side by side: how many (up to the event's cap
  // and the seats free), and where.
  function together(sections, free) {
    var n = Math.min(free, event ? event.maxSeatsPerUser : 1);
    var q = hf.$("quantity"), want = Math.min(parseInt(q.value || "2", 10) || 1, n);
    q.textContent = "";
    for (var i = 1; i <= n; i++) {
      var o = document.createElement("option");
      o.value = String(i);
      o.textContent = String(i);
      q.appendChild(o);
    }
    q.value = String(want);
    var sel = hf.$("section");
    if (sel.options.length === 1 && sections.length > 1) {
      sections.forEach(function (x) {
        var o = document.createElement("option");
        o.value = x.name;
        o.textContent = x.name + (x.priceTier ? " (price " + x.priceTier + ")" : "");
        sel.appendChild(o);
      });
    }
    hf.show("together", n > 0);
  }

  function setBusy(on) {
    Array.prototype.forEach.call(document.querySelectorAll("#seats button, #together button, #hold button"), function (b) {
      b.disabled = on || (b.hasAttribute("data-seat") && !b.getAttribute("data-free"));
    });
  }

  // submit sends a write and follows it to its outcome.
  function submit(method, path, headers, body) {
    return hf.call(method, path, headers, body).then(function (r) {
      hf.connection(true);
      if (r.status !== 202) { return r; }
      return hf.waitOutcome(r.body.statusUrl);
    });
  }

  function holdSeats(body, what) {
    setBusy(true);
    hf.say("state", "Holding " + what + "…");
    var headers = {};
    var entry = hf.get("entryToken");
    if (entry) { headers["X-Entry-Token"] = entry; }
    submit("POST", base + "/holds", headers, body).then(function (r) {
      var v = r.body || {};
      if (r.status === 200 && v.status === "succeeded") {
        hold = v.result;
        load("");
        return;
      }
      refused(what, r);
    }, function () {
      // The hold may have been accepted before the connection dropped:
      // what the server holds for the caller is read again.
      hf.connection(false);
      setTimeout(function () { load("The connection dropped while holding " + what + "."); }, 2000);
    });
  }

  function refused(what, r) {
    setBusy(false);
    var c = hf.code(r); // a refusal at once, or a rejected outcome: both carry error
    if (c === "SEAT_TAKEN") {
      load("Someone was faster: " + what + " is taken. Pick another.");
    } else if (c === "SOLD_OUT") {
      load("Not enough seats are left for that.");
    } else if (c === "SEATS_NOT_TOGETHER") {
      hf.say("state", "No " + hf.$("quantity").value + " seats side by side are left there. Ask for fewer, choose another section, or allow seats apart.");
    } else if (c === "ENTRY_TOKEN_REQUIRED") {
      hf.show("seats-box", false);
      hf.show("together", false);
      hf.show("back", true);
      hf.say("state", "Your turn has ended or this page was opened without it. Go back to the waiting room.");
    } else if (r.status === 429 || r.status === 503) {
      hf.say("state", "Many people are choosing at once. Try again in " + Math.max(1, r.retryAfter) + "\u00a0s.");
    } else {
      hf.say("state", (hf.message(r) || "That did not go through.") + " Try again.");
    }
  }

  // held shows the hold: its seats, the time left, and what to do.
  function held(sentence) {
    hf.show("together", false);
    hf.show("hold", true);
    var what = hold.seatIds.length === 1 ? "Seat " : "Seats ";
    hf.say("held-seats", what + labels(hold.seatIds) + (hold.seatIds.length === 1 ? " is" : " are") + " held for you.");
    hf.say("state", (sentence ? sentence + " " : "") + what + labels(hold.seatIds) + (hold.seatIds.length === 1 ? " is" : " are") +
      " held for you. Confirm before the time runs out.");
    clearInterval(ticking);
    var tick = function () {
      var left = (Date.parse(hold.expiresAt) - Date.now()) / 1000;
      if (left <= 0) {
        clearInterval(ticking);
        hf.say("hold-left", "Time is up.");
        ranOut();
        return;
      }
      hf.say("hold-left", hf.duration(Math.ceil(left)) + " left.");
    };
    tick();
    ticking = setInterval(tick, 1000);
  }

  // ranOut asks the server how the hold ended once its time is up.
  function ranOut() {
    if (!hold) { return; }
    hf.call("GET", base + "/holds").then(function (r) {
      var mine = r.status === 200 ? r.body.items.filter(function (h) { return hold && h.holdId === hold.holdId; })[0] : null;
      if (mine && mine.status === "confirmed") {
        booked(mine);
        return;
      }
      if (mine && mine.status === "held") { // this device's clock runs ahead of the server's
        setTimeout(ranOut, 1000);
        return;
      }
      hold = null;
      load("Your hold ran out, and the seats went back on sale.");
    }, function () { setTimeout(ranOut, 2000); });
  }

  hf.$("find").onclick = function () {
    var body = { quantity: parseInt(hf.$("quantity").value, 10), apart: hf.$("apart").checked };
    if (hf.$("section").value) { body.section = hf.$("section").value; }
    holdSeats(body, body.quantity === 1 ? "the best seat" : "the best " + body.quantity + " seats");
  };

  hf.$("confirm").onclick = function () {
    var ref = hf.$("payment-ref").value.trim();
    if (!ref) {
      hf.say("state", "Enter the payment reference to confirm your seats.");
      hf.$("payment-ref").focus();
      return;
    }
    setBusy(true);
    hf.say("state", "Confirming…");
    submit("POST", base + "/holds/" + hold.holdId + "/confirm", {}, { paymentReference: ref }).then(function (r) {
      var v = r.body || {};
      if (r.status === 200 && v.status === "succeeded") {
        booked(v.result);
      } else if (v.error && v.error.code === "HOLD_EXPIRED") {
        clearInterval(ticking);
        hold = null;
        load("Your hold ran out before the confirmation, and the seats went back on sale.");
      } else if (v.error && ["INVALID_STATUS_TRANSITION", "NOT_FOUND", "CONFLICT"].indexOf(v.error.code) >= 0) {
        hold = null; // the hold is no longer what this page showed: read it again
        load(v.error.message);
      } else {
        refused("your seats", r);
      }
    }, function () {
      hf.connection(false);
      setTimeout(function () { load("The connection dropped while confirming."); }, 2000);
    });
  };

  hf.$("release").onclick = function () {
    setBusy(true);
    submit("DELETE", base + "/holds/" + hold.holdId, {}).then(function (r) {
      var v = r.body || {};
      clearInterval(ticking);
      hold = null;
      load(r.status === 200 && v.status === "succeeded" && v.result.status === "released" ? "You released the seats." :
        (v.error ? v.error.message : hf.message(r)));
    }, function () {
      hf.connection(false);
      setTimeout(function () { hold = null; load("The connection dropped while releasing."); }, 2000);
    });
  };

  // booked shows the order: the seats, the reference to quote, and what
  // happens next.
  function booked(order) {
    clearInterval(ticking);
    hold = null;
    ["seats-box", "together", "hold"].forEach(function (id) { hf.show(id, false); });
    var seats = labels(order.seatIds), one = order.seatIds.length === 1;
    var ref = order.bookingReference;
    var state = hf.$("state");
    state.textContent = "Booked: " + (one ? "seat " : "seats ") + seats + (one ? " is" : " are") + " yours.";
    if (ref) { // the reference on one line: a break at its hyphen would misquote it
      state.appendChild(document.createTextNode(" Your booking reference is "));
      var r = document.createElement("span");
      r.className = "nowrap";
      r.textContent = ref;
      state.appendChild(r);
      state.appendChild(document.createTextNode("."));
    }
    hf.say("booked-seat", seats);
    hf.say("booking-reference", ref || "");
    hf.show("reference-box", !!ref);
    var next = "Nothing more is needed here: the " + (one ? "seat is" : "seats are") + " yours, and you may close this page.";
    if (ref) { next += " Keep your booking reference and quote it whenever you contact the organiser about this booking."; }
    if (event && (event.startsAt || event.venue)) {
      next += " See you" + (event.venue ? " at " + event.venue : "") + (event.startsAt ? " on " + hf.when(event.startsAt) : "") + ".";
    }
    hf.say("next-steps", next);
    hf.show("booked", true);
  }

  if (!hf.get("token")) {
    hf.say("state", "This page needs your sign-in link. Open the waiting room from the event's site.");
    return;
  }
  load("");
})();
