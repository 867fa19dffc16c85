// Package lincheck records what clients of a running holdfast saw and asks
// Porcupine (github.com/anishathalye/porcupine) whether some sequential
// order of the operations, respecting real time, explains every answer:
// linearizability, checked per key against a model of that key. It is test
// code: e2e tests drive the real API and record; nothing else imports it.
//
// # Recording
//
//	rec := lincheck.NewRecorder()
//	sent := time.Now()
//	a := lincheck.Await(client, "POST", path, body) // a write, followed to its outcome
//	rec.Record(clientIndex, key, sent, lincheck.Grab{User: "u1"}, outcomeFrom(a))
//	…
//	rec.Check(t, lincheck.FCFS(seatsByKey), "fcfs")
//
// Record takes the client's index (one per concurrent client: Porcupine
// draws a lane per client), the key the operation acts on (an event, a
// product option, a room type's night, an event's waiting room), the time
// the client sent it, what it asked (one of the models' operation types)
// and the Outcome it learnt; the answer time is when Record is called
// (RecordAt gives it, for hand-made histories). An async write's interval
// runs from its send to the moment its client learnt the outcome, by
// Prefer: wait or by polling GET /api/v1/requests/{id} (Await does both).
// Times are the wall clock of the test process. The stays model compares
// them with the hold expiry the worker reports, which counts from the
// batch's time, Postgres' clock: the histories run Postgres on the test's
// machine, with its clock.
//
// Outcomes: OK (applied, with the model's reading of the result), Refused
// (a business "no", with its code), NotAccepted (a synchronous 4xx or 5xx:
// the write was never stored, docs/operations.md), Failed (accepted, then
// failed after retries; its transaction rolled back), Unknown (never
// learnt: a transport error, a poll that ran out). NotAccepted and Failed
// have no effect: every model accepts them anywhere in their interval and
// changes nothing, so a write that was refused at the door and yet applied
// shows up as the answers of the operations around it. Unknown is checked
// as an operation that never returned: it may take effect at any point
// after it was sent, or never (placed after everything else).
//
// Check(t, model, name) checks the history, each key on its own (the
// model's Partition), within Recorder.Timeout (30 s), and logs "name:
// operations checked: N on K keys, verdict: ok (took)". A history no
// order explains fails t: the message names, per key, the state the
// longest explained prefix reached and the operations real time lets come
// next, none of which the model accepts there, and the path of Porcupine's
// HTML visualization (t.ArtifactDir() under go test -artifacts, else a
// directory under os.TempDir that outlives the test). A check that does
// not end in time fails t as an unknown verdict: record fewer concurrent
// clients per key, or a shorter history. Verdict returns the result
// without failing anything (the controls).
//
// Checking is NP-hard in general, and Porcupine's search grows steeply with
// the number of clients acting on one key at once, not with the length of
// the history: generated histories of 2,000 operations, every operation
// overlapping others, check in well under a second with 10 clients a key,
// take seconds with 15, and do not end in 30 s with 20 (scale_test.go).
// Keep a key's concurrent clients near 10 and spread a crowd over keys.
//
// # Models
//
// Each model is a porcupine.Model over one key, built from the key's state
// when the history began: Stock (a product option's units), FCFS (an
// event's seats), RoomNight (a room type's rooms on one night),
// WaitingRoom (an event's line). Each function's documentation says
// exactly what it allows and why; in short:
//
//   - Stock: reserves, confirms, releases and stock reads on one option,
//     linearizable, with the one allowance docs/shop.md documents: a
//     reserve batch reads the reserved sums and the stock in two
//     statements, so a confirm or release committing between them makes it
//     decide on less available than there is (a refusal at the boundary, or
//     a lower availableStock), never more. The model lets a reserve leave
//     out the units of reservations ended during it, and no more. A stock
//     read is one SQL statement and may not lag: it returns the exact
//     counts at a point between its send and its answer.
//   - FCFS: grabs take the free seat of lowest id, SOLD_OUT only when none
//     is free, ALREADY_RESERVED names the user's seat; the seat list is
//     exact at a point of its interval. The public remainingSeats count, a
//     Redis copy, is not modelled.
//   - RoomNight: holds, confirms, cancels and availability reads, with
//     time: each write is decided at a time inside its interval, later
//     than the write before it (a hold's result pins it), and a hold counts
//     until its expiry, so a hold applied after its expiry counts for
//     nothing and confirming it is HOLD_EXPIRED. A read is exact at some
//     time of its own interval.
//   - WaitingRoom: entries join the back of the line, a status read gives
//     the exact rank and ready/waiting against maxConcurrent − tokens held,
//     a token goes only to a ready user, leaving frees the slot: positions
//     never move backwards, admissions follow the line, counts are exact.
//     Presence, claim windows and token expiry are not modelled (the
//     histories set them longer than the run).
package lincheck
