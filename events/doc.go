// Package events is the ticketing vertical (seeds 003, 004; SPEC §6):
// events with seats, a waiting room that admits a crowd a few at a time,
// seat booking with the room's entry token, and first-come-first-served
// seat grabs.
//
// FCFS requests on an event share its serialization key ("events:ev:{id}"),
// so a batch of them is one transaction that hands out the next free seats
// in seat-id order, in seq order (SPEC §6: the seed's UPDATE … ORDER
// BY id LIMIT 1 is not valid Postgres and, without SKIP LOCKED, reports
// false sold-outs).
//
// The waiting room (room.go) keeps each event's line, tokens and admission
// settings in Redis under one hash tag; every script tidies what has lapsed
// at Redis's clock before it counts, so caps hold at every instant with no
// sweeper, and users who walk away lose their place after a presence
// timeout, when the line reaches them (a user silent far back keeps it),
// or a claim window. Entries before salesStartAt form a pre-queue
// whose order is drawn from a seed committed to at creation (package draw)
// and opens once sealed (seal.go); position streams fan out one script per
// event per API process (stream.go). docs/waiting-room.md explains why.
package events
