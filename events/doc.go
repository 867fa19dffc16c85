// Package events is the ticketing vertical (seeds 003, 004): events with
// seats, and first-come-first-served seat grabs. FCFS requests on an event
// share its serialization key ("events:ev:{id}"), so a batch of them is one
// transaction that hands out the next free seats in seat-id order, in
// acceptance order (SPEC §6: the seed's UPDATE … ORDER BY id LIMIT 1 is not
// valid Postgres and, without SKIP LOCKED, reports false sold-outs).
//
// The waiting room, entry tokens, seat booking and live updates are not
// built yet; the event settings that drive them are stored already.
package events
