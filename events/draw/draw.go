// Package draw is the pre-queue's provably fair draw (SPEC §6.1): the
// seed, its commitment, pseudonyms and the admission order anyone can
// re-derive. Pure functions, no I/O: the events vertical draws with them,
// and a fan or `api verify-prequeue` checks a draw with
// them without importing the vertical.
package draw

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// The pre-queue's shuffle (SPEC §6.1), which anyone can re-derive:
//
//   - At creation an event draws a secret 32-byte seed and publishes
//     shuffleCommitment = hex(SHA-256(seed)). Nobody can enter before the
//     event exists, so the seed cannot have been chosen after seeing who
//     entered.
//   - Every user of the event has a pseudonym: the first 16 bytes of
//     HMAC-SHA-256(key = seed, message = user id), in lowercase hex.
//     Without the seed, a pseudonym says nothing about its user.
//   - The admission order of the pre-queue is its pseudonyms in ascending
//     order. Keyed by a uniformly random secret seed, HMAC output is
//     indistinguishable from random, so this order is a uniformly random
//     permutation of the entrants, independent of when each entered.
//   - Once the pre-queue is sealed the public event shows the seed as
//     shuffleSeed, and GET /api/v1/public/events/{id}/prequeue lists the
//     entrants' pseudonyms in entry order. Anyone checks SHA-256(seed)
//     against the commitment and sorts the list; a user finds its own
//     place by computing its pseudonym (Verify, `api verify-prequeue`).
//
// The waiting room stores every user under its pseudonym, and gives every
// pre-queue entrant the same score, so Redis orders them by pseudonym
// (members of equal score sort bytewise, and lowercase hex sorts as the
// number it spells): the room's order is the published one by construction.

// SeedBytes is the length of a shuffle seed.
const SeedBytes = 32

// pseudonymBytes is how much of the HMAC a pseudonym keeps: 128 bits, so two
// users of one event share one with a chance below 2⁻⁹⁰ at a million entrants.
const pseudonymBytes = 16

// NewSeed draws a shuffle seed from the operating system's CSPRNG.
func NewSeed() ([]byte, error) {
	seed := make([]byte, SeedBytes)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("events: shuffle seed: %w", err)
	}
	return seed, nil
}

// Commitment is the published SHA-256 of a seed, in lowercase hex.
func Commitment(seed []byte) string {
	sum := sha256.Sum256(seed)
	return hex.EncodeToString(sum[:])
}

// Pseudonym is user's name in the event whose seed is seed.
func Pseudonym(seed []byte, user string) string {
	m := hmac.New(sha256.New, seed)
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil)[:pseudonymBytes])
}

// Order turns the pre-queue's entrants (pseudonyms, in any order)
// into the order they are admitted in: ascending.
func Order(entrants []string) []string {
	order := slices.Clone(entrants)
	slices.Sort(order)
	return order
}

// Prequeue is what the public endpoints publish about an event's pre-queue.
type Prequeue struct {
	Commitment string   // shuffleCommitment, from creation
	Seed       string   // shuffleSeed in hex, once the pre-queue is sealed
	Entrants   []string // pseudonyms in entry order
}

// ErrSeedNotRevealed means the sale has not started, so the seed is secret.
var ErrSeedNotRevealed = errors.New("draw: the shuffle seed is revealed when the sale starts")

// Verify checks the published data and recomputes the admission
// order from it: the seed must match the commitment and every entrant must
// be a well-formed pseudonym, listed once. When user is not empty it also
// returns that user's 0-based place in the order, or -1 if it did not enter
// the pre-queue.
func Verify(p Prequeue, user string) (order []string, place int, err error) {
	if p.Seed == "" {
		return nil, -1, ErrSeedNotRevealed
	}
	seed, err := hex.DecodeString(p.Seed)
	if err != nil || len(seed) != SeedBytes {
		return nil, -1, fmt.Errorf("events: shuffleSeed must be %d bytes in hex", SeedBytes)
	}
	if Commitment(seed) != p.Commitment {
		return nil, -1, fmt.Errorf("events: SHA-256 of the seed is %s, but the commitment published at creation is %q",
			Commitment(seed), p.Commitment)
	}
	seen := make(map[string]bool, len(p.Entrants))
	for _, e := range p.Entrants {
		if b, err := hex.DecodeString(e); err != nil || len(b) != pseudonymBytes || hex.EncodeToString(b) != e {
			return nil, -1, fmt.Errorf("events: %q is not a pseudonym (%d bytes in lowercase hex)", e, pseudonymBytes)
		}
		if seen[e] {
			return nil, -1, fmt.Errorf("events: pseudonym %s is listed twice", e)
		}
		seen[e] = true
	}
	order = Order(p.Entrants)
	place = -1
	if user != "" {
		if i, ok := slices.BinarySearch(order, Pseudonym(seed, user)); ok {
			place = i
		}
	}
	return order, place, nil
}
